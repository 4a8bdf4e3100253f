// The shop's support page: the AI SDK chat with Helix's helpers, signed in by the session cookie.
// The CSRF cookie is HttpOnly: the helpers take the token from the page's meta tag. A reload
// mid-answer loads the snapshot and resumes the answer where it was.
import { AbstractChat, DefaultChatTransport } from "ai";
import {
  loadHelixSnapshot, prepareHelixChatRequest, prepareHelixReconnectRequest, shouldResume,
} from "helix-chat";

const $ = (id) => document.getElementById(id);
const api = document.body.dataset.chatUrl;
const params = new URLSearchParams(location.search);
const sessionId = params.get("session") ?? crypto.randomUUID();
if (!params.get("session")) history.replaceState(null, "", `?session=${sessionId}`);

class PageState {
  constructor(messages) { this._messages = messages; this._status = "ready"; this.error = undefined; }
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

let chat;
function render() {
  if (!chat) return;
  $("messages").replaceChildren(...chat.state.messages.map((message) => {
    const node = document.createElement("p");
    node.className = `msg ${message.role}`;
    node.textContent = message.parts.filter((part) => part.type === "text").map((part) => part.text).join("");
    return node;
  }));
  $("status").textContent = chat.state.error ? `error: ${chat.state.error.message}` : chat.state.status;
}

const snapshot = await loadHelixSnapshot({ sessionId, api });
const options = { sessionId, api, resumeFromSequence: snapshot?.streamSequence, snapshot };
const transport = new DefaultChatTransport({
  prepareSendMessagesRequest: prepareHelixChatRequest(options),
  prepareReconnectToStreamRequest: prepareHelixReconnectRequest(options),
});
const state = new PageState(snapshot?.messages ?? []);
class PageChat extends AbstractChat {
  constructor() { super({ id: sessionId, transport, state }); }
}
chat = new PageChat();
chat.state = state;
render();
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value.trim();
  $("input").value = "";
  if (text) chat.sendMessage({ text });
});
if (shouldResume(snapshot)) chat.resumeStream();
