// The demo chat page: the real AI SDK chat (bundled into ./vendor/ai.js by bin/run) with the
// Helix helpers. Reload mid-answer: the page loads the snapshot and resumes the stream.
import { AbstractChat, DefaultChatTransport } from "./vendor/ai.js";
import {
  createClientToolHandler, createResyncHandler, csrfToken, followHelixSession, loadHelixSnapshot,
  prepareHelixChatRequest, prepareHelixReconnectRequest, readableError, shouldResume,
} from "../helix/helix-chat.js";

const $ = (id) => document.getElementById(id);
const csrf = csrfToken();  // the cookie's, or the page's meta tag when the cookie is HttpOnly
const params = new URLSearchParams(location.search);
const sessionId = params.get("session") ?? crypto.randomUUID();
if (!params.get("session")) history.replaceState(null, "", `?session=${sessionId}`);

const options = { sessionId, csrfToken: csrf, agent: localStorage.getItem(`helix-agent:${sessionId}`) ?? "chat" };
let chat;
let resync;
let follower;
let renderQueued = false;

class PageState {
  constructor(messages) { this.messages = messages; this._status = "ready"; this.error = undefined; }
  get status() { return this._status; }
  set status(value) { this._status = value; render(); }
  get messages() { return this._messages; }
  set messages(value) { this._messages = value; render(); }
  pushMessage = (message) => { this.messages = this._messages.concat(message); };
  popMessage = () => { this.messages = this._messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    const next = this._messages.slice();
    next[index] = structuredClone(message);
    this.messages = next;
  };
  snapshot = (value) => structuredClone(value);
}

function activity(text, kind = "") {
  const item = document.createElement("li");
  item.textContent = text;
  item.className = kind;
  $("activity").prepend(item);
  while ($("activity").children.length > 60) $("activity").lastChild.remove();
}

const subAgentLines = new Map();

function subAgentText(chunk) {
  let line = subAgentLines.get(chunk.agentId);
  if (!line || !line.isConnected) {
    activity(`${chunk.agentType}: `, "subagent-text");
    line = $("activity").firstChild;
    subAgentLines.set(chunk.agentId, line);
  }
  line.textContent += chunk.delta;
}

function onData(part) {
  const data = part.data ?? {};
  if (part.type === "data-search_progress") activity(`search “${data.query}”: ${data.done}/${data.total}`, "progress");
  else if (part.type === "data-subagent-start") activity(`sub-agent ${data.subAgentType} started`, "subagent");
  else if (part.type === "data-subagent-end") activity(`sub-agent ${data.subAgentType} finished`, "subagent");
  else if (part.type === "data-subagent-chunk" && data.type === "text_delta") subAgentText(data);
  else if (part.type === "data-state-patch") activity(`state: ${data.map((p) => `${p.op} ${p.path}`).join(", ")}`, "state");
}

function partNode(part) {
  const node = document.createElement("div");
  if (part.type === "text") {
    node.className = "part text";
    node.textContent = part.text;
  } else if (part.type === "reasoning") {
    node.className = "part reasoning";
    node.textContent = part.text;
  } else if (part.type === "dynamic-tool" || part.type.startsWith("tool-")) {
    node.className = "part tool";
    const name = part.toolName ?? part.type.slice(5);
    node.innerHTML = `<b></b> <span class="state"></span><pre class="input"></pre><pre class="output"></pre>`;
    node.querySelector("b").textContent = `🔧 ${name}`;
    node.querySelector(".state").textContent = part.state;
    node.querySelector(".state").classList.add(part.state);
    node.querySelector(".input").textContent = JSON.stringify(part.input ?? null);
    const result = part.state === "output-error" ? part.errorText : part.output !== undefined ? JSON.stringify(part.output) : "";
    node.querySelector(".output").textContent = result ? `→ ${result}` : "";
    if (part.state === "approval-requested") node.append(approvalButtons(part));
  } else {
    return null;
  }
  return node;
}

// Approval gates: the run waits until you answer; the answer continues the same message.
function approvalButtons(part) {
  const box = document.createElement("div");
  box.className = "approval";
  for (const [label, approved] of [["Approve", true], ["Deny", false]]) {
    const button = document.createElement("button");
    button.textContent = label;
    button.dataset.approve = String(approved);
    button.addEventListener("click", async () => {
      await chat.addToolApprovalResponse({ id: part.approval.id, approved });
      await chat.sendMessage();
    });
    box.append(button);
  }
  return box;
}

// Client tools: the assistant agent's get_location runs here, in the page.
const clientTools = {
  get_location: async () => ({ city: Intl.DateTimeFormat().resolvedOptions().timeZone.split("/").pop().replace(/_/g, " ") }),
};

function render() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    if (!chat) return;
    const box = $("messages");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    box.replaceChildren(...chat.state.messages.map((message) => {
      const node = document.createElement("div");
      node.className = `msg ${message.role}`;
      node.dataset.id = message.id;
      for (const part of message.parts) {
        const child = partNode(part);
        if (child) node.append(child);
      }
      return node;
    }));
    if (atBottom) box.scrollTop = box.scrollHeight;
    const status = chat.state.status;
    $("status").textContent = chat.state.error ? `error: ${readableError(chat.state.error).message}` : status;
    $("stop").disabled = !(status === "streaming" || status === "submitted");
    $("send").disabled = status === "streaming" || status === "submitted";
  });
}

function makeChat(messages, resumeFromSequence, loaded) {
  // Other tabs' runs come through the session's feed: a message sent meanwhile is refused (409).
  const chatOptions = Object.assign(options, { resumeFromSequence, snapshot: loaded, reattach: false });
  const transport = new DefaultChatTransport({
    prepareSendMessagesRequest: prepareHelixChatRequest(chatOptions),
    prepareReconnectToStreamRequest: prepareHelixReconnectRequest(chatOptions),
  });
  const state = new PageState(messages);
  resync = createResyncHandler({
    sessionId, getChat: () => chat, reconnectOptions: chatOptions,
    setMessages: (next) => { state.messages = next; },
    onResync: (data) => activity(data ? "resynced after a worker change" : "caught up with another tab"),
  });
  const onToolCall = createClientToolHandler({ tools: clientTools, getChat: () => chat });
  class PageChat extends AbstractChat {
    constructor() {
      super({
        id: sessionId, transport, state, onToolCall,
        onData: (part) => { onData(part); return resync(part); },
        onFinish: () => { follow(); setTimeout(() => follower?.catchUp(), 0); },
        onError: (error) => {
          const readable = readableError(error);
          activity(`error: ${readable.message}`, "error");
          if (readable.code === "RUN_CONFLICT") resync.refetch();  // show what the server holds, and its run
        },
      });
    }
  }
  chat = new PageChat();
  chat.state = state;
  render();
}

async function loadAgents() {
  const response = await fetch("/api/agents");
  const agents = response.ok ? await response.json() : [{ name: "chat" }];
  $("agent").replaceChildren(...agents.map((agent) => {
    const option = new Option(agent.name, agent.name, false, agent.name === options.agent);
    option.title = agent.description ?? "";
    return option;
  }));
}

$("agent").addEventListener("change", (event) => {
  options.agent = event.target.value;
  localStorage.setItem(`helix-agent:${sessionId}`, options.agent);
});
$("new-chat").addEventListener("click", () => { location.search = ""; });
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  if (!text) return;
  $("input").value = "";
  chat.sendMessage({ text });
});
$("stop").addEventListener("click", () => {
  fetch(`/api/chat/${sessionId}/stop`, { method: "POST", headers: { "X-CSRFToken": csrf } });
});

// Every tab of the session live: a run started or answered elsewhere shows here too.
function follow() {
  if (follower && !follower.closed()) return;
  follower = followHelixSession({
    sessionId, csrfToken: csrf,
    isBusy: () => chat.status === "streaming" || chat.status === "submitted",
    shownSnapshot: () => options.snapshot,
    onNews: () => resync.refetch().then(() => follower.catchUp()),
  });
}

await loadAgents();
const snapshot = await loadHelixSnapshot({ sessionId });
makeChat(snapshot?.messages ?? [], snapshot?.streamSequence, snapshot);
if (snapshot) follow();
if (shouldResume(snapshot)) {
  activity("resuming the answer in progress");
  chat.resumeStream();
}
window.helixChat = chat;
