// Drives the real AI SDK chat client against a live Helix server, through the Helix helpers
// (chat/static/helix/helix-chat.js). One JSON request per stdin line, one JSON answer per line.
//
// request: {client, baseUrl, sessionId, token, agent, actions: [...]}
// actions: {kind: "send", text} | {kind: "send-and-stop", text, afterMs} |
//          {kind: "send-and-drop", text, afterMs, untilText?} | {kind: "resume"} | {kind: "refresh"} |
//          {kind: "approve", approved, reason?, approvalId?} | {kind: "tool-output", tool, output} |
//          {kind: "wait-for-end"} | {kind: "second-tab-sends", text, secondText, afterMs, untilText?}
//   "refresh" is what a page reload does: load the snapshot, build a new chat from it, resume.
//   "second-tab-sends": while the first tab's answer streams, a second tab opens the page (its
//   snapshot) and sends a message of its own through the helpers.
//          {kind: "resend-last-post", expectStatus, expectCode}: the last POST again, as a
//          retry or a second tab sends it; anything but the expected refusal is an error.
//          {kind: "check"}: once the page is idle, record what it shows beside the snapshot.
//   Any action may name an `agent` for the messages it sends; send-and-stop with `mayMiss`
//   accepts a stop that came after the answer ended.
// answer:  {messages, status, error, errors, data, snapshots, secondTab?, checks}
import * as readline from "node:readline";
import * as v6 from "ai-v6";
import * as v6strict from "ai-v6-strict";
import * as v7 from "ai-v7";
import * as helix from "../../chat/static/helix/helix-chat.js";

const clients = { v6, "v6-strict": v6strict, v7 };

class State {
  constructor(messages) { this.messages = messages; this.status = "ready"; this.error = undefined; }
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), this.snapshot(m), ...this.messages.slice(i + 1)]; };
  snapshot = (v) => structuredClone(v);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Wait (up to 10 s) until the page shows some text of the answer it is receiving.
async function answerText(state) {
  for (const deadline = Date.now() + 10000; Date.now() < deadline; await sleep(20)) {
    const last = state.messages.at(-1);
    if (last?.role === "assistant" && last.parts.some((p) => p.type === "text" && p.text)) return;
  }
}

async function run(request) {
  const ai = clients[request.client];
  const headers = request.token ? { Authorization: `Token ${request.token}` } : {};
  const base = `${request.baseUrl}/api/chat`;
  const data = [];
  const errors = [];
  const snapshots = [];
  let state;
  let chat;
  let onResync;
  let onToolCall;
  let refreshed = false;
  let secondTab;
  let chatOptions;
  let lastPost;
  const checks = [];
  const recordingFetch = (url, init) => {
    if (init?.method === "POST") lastPost = { url: String(url), init: { ...init } };
    return fetch(url, init);
  };

  function makeChat(messages, resumeFromSequence, snapshot) {
    const options = { api: base, sessionId: request.sessionId, agent: request.agent, headers, resumeFromSequence, snapshot };
    chatOptions = options;
    const transport = new ai.DefaultChatTransport({
      fetch: recordingFetch,
      prepareSendMessagesRequest: helix.prepareHelixChatRequest(options),
      prepareReconnectToStreamRequest: helix.prepareHelixReconnectRequest(options),
    });
    state = new State(structuredClone(messages));
    onResync = helix.createResyncHandler({
      sessionId: request.sessionId, api: base, headers, setMessages: (m) => { state.messages = m; },
      getChat: () => chat, reconnectOptions: options,
    });
    // Client tools the page runs ({name: output}), from the start or only after a refresh.
    const withTools = request.clientTools && (request.clientToolsAfterRefresh ? refreshed : true);
    onToolCall = withTools
      ? helix.createClientToolHandler({
          tools: Object.fromEntries(Object.entries(request.clientTools).map(([name, output]) => [name, async () => output])),
          getChat: () => chat,
        })
      : undefined;
    class Chat extends ai.AbstractChat {
      constructor() {
        super({ id: request.sessionId, transport, state, onError: (e) => errors.push(String(e?.message ?? e)),
                onData: (part) => { data.push(part); return onResync(part); }, onToolCall });
      }
    }
    chat = new Chat();
  }

  makeChat(request.messages ?? [], undefined);
  for (const action of request.actions) {
    chatOptions.agent = action.agent ?? request.agent;
    if (action.kind === "send") {
      await chat.sendMessage({ text: action.text });
    } else if (action.kind === "send-and-stop" || action.kind === "send-and-drop") {
      const sending = chat.sendMessage({ text: action.text });
      await sleep(action.afterMs ?? 300);
      if (action.untilText) await answerText(state);  // drop only once some of the answer's text has arrived
      if (action.kind === "send-and-stop") {
        const response = await fetch(`${base}/${request.sessionId}/stop`, { method: "POST", headers });
        // A stop may miss: the run ended already (200), or its POST is not recorded yet (404).
        const missed = action.mayMiss && (response.status === 200 || response.status === 404);
        if (response.status !== 202 && !missed) errors.push(`stop answered ${response.status}`);
      } else {
        await chat.stop();  // the browser drops the connection: a disconnect, not a cancel
      }
      await sending;
    } else if (action.kind === "second-tab-sends") {
      const sending = chat.sendMessage({ text: action.text });
      await sleep(action.afterMs ?? 300);
      if (action.untilText) await answerText(state);  // the first answer has begun, however slow the machine
      let snapshot = null;
      for (const deadline = Date.now() + 10000; Date.now() < deadline; await sleep(50)) {
        snapshot = await helix.loadHelixSnapshot({ sessionId: request.sessionId, api: base, headers });
        if (snapshot?.status === "active") break;  // the first tab's answer is streaming
      }
      if (snapshot?.status !== "active") throw new Error("the first tab's answer never started");
      const options = {
        api: base, sessionId: request.sessionId, agent: chatOptions.agent, headers,
        resumeFromSequence: snapshot.streamSequence, existingMessageId: snapshot.existingMessageId,
      };
      const transport = new ai.DefaultChatTransport({
        prepareSendMessagesRequest: helix.prepareHelixChatRequest(options),
        prepareReconnectToStreamRequest: helix.prepareHelixReconnectRequest(options),
      });
      const tabState = new State(structuredClone(snapshot.messages));
      class SecondTab extends ai.AbstractChat {
        constructor() {
          super({ id: request.sessionId, transport, state: tabState, onError: (e) => errors.push(`second tab: ${e?.message ?? e}`) });
        }
      }
      const tab = new SecondTab();
      await Promise.all([sending, tab.sendMessage({ text: action.secondText })]);
      secondTab = { messages: tabState.messages, status: tabState.status };
    } else if (action.kind === "resend-last-post") {
      const response = await fetch(lastPost.url, lastPost.init);
      const body = await response.json().catch(() => ({}));
      if (response.status !== action.expectStatus || body.code !== action.expectCode) {
        errors.push(`sent again, the last POST answered ${response.status} ${JSON.stringify(body)}`);
      }
    } else if (action.kind === "check") {
      for (const deadline = Date.now() + 30000; Date.now() < deadline; await sleep(50)) {
        await onResync.settled();
        await onToolCall?.settled();
        if (state.status !== "streaming" && state.status !== "submitted") break;
      }
      const snapshot = await helix.loadHelixSnapshot({ sessionId: request.sessionId, api: base, headers });
      checks.push({ messages: structuredClone(state.messages), snapshot });
    } else if (action.kind === "resume") {
      await chat.resumeStream();
    } else if (action.kind === "refresh") {
      const snapshot = await helix.loadHelixSnapshot({ sessionId: request.sessionId, api: base, headers });
      snapshots.push(snapshot);
      refreshed = true;
      makeChat(snapshot.messages, snapshot.streamSequence, snapshot);
      if (helix.shouldResume(snapshot)) await chat.resumeStream();
    } else if (action.kind === "approve") {
      // The page's approve / deny buttons: answer the pending approval, then continue the message.
      const part = state.messages.at(-1).parts.find((p) => p.state === "approval-requested");
      if (!part) throw new Error("no approval is pending");
      await chat.addToolApprovalResponse({ id: action.approvalId ?? part.approval.id, approved: action.approved, reason: action.reason });
      await chat.sendMessage();
    } else if (action.kind === "tool-output") {
      // A client tool: the page runs it and sends its output back.
      const part = state.messages.at(-1).parts.find((p) => p.state === "input-available" && (p.toolName ?? p.type.slice(5)) === action.tool);
      if (!part) throw new Error(`no call of ${action.tool} waits for its output`);
      await chat.addToolOutput({ tool: action.tool, toolCallId: part.toolCallId, output: action.output });
      await chat.sendMessage();
    } else if (action.kind === "wait-for-end") {
      // Follow the run to its end: resume whenever the client is left without a stream.
      const deadline = Date.now() + (action.timeoutMs ?? 90000);
      while (Date.now() < deadline) {
        await onResync.settled();
        const snapshot = await helix.loadHelixSnapshot({ sessionId: request.sessionId, api: base, headers });
        if (!helix.shouldResume(snapshot) && state.status !== "streaming" && state.status !== "submitted") break;
        await sleep(200);
      }
    } else {
      throw new Error(`unknown action ${action.kind}`);
    }
    await onResync.settled();
    await onToolCall?.settled();
  }
  return { messages: state.messages, status: state.status, error: state.error ? String(state.error.message ?? state.error) : null,
           errors, data, snapshots, secondTab, checks };
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try { answer = await run(JSON.parse(line)); } catch (error) { answer = { fatal: String(error?.stack ?? error) }; }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
