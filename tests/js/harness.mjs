// Drives the real AI SDK chat client (AbstractChat + DefaultChatTransport) over SSE bodies
// produced by the Python bridge. One JSON request per stdin line, one JSON answer per line.
//
// request: {client: "v6" | "v6-strict" | "v7", chatId, messages: UIMessage[],
//           actions: [{kind: "send", text} | {kind: "continue"} | {kind: "resume"},
//                     ... each with response: {status, body}]}
// answer:  {messages, status, error, data: [data events seen by onData], requests: [...]}
import * as readline from "node:readline";
import * as v6 from "ai-v6";
import * as v6strict from "ai-v6-strict";
import * as v7 from "ai-v7";

const clients = { v6, "v6-strict": v6strict, v7 };

class State {
  constructor(messages) {
    this.messages = messages;
    this.status = "ready";
    this.error = undefined;
  }
  pushMessage = (message) => { this.messages = this.messages.concat(message); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  };
  snapshot = (value) => structuredClone(value);
}

async function run(request) {
  const ai = clients[request.client];
  if (!ai) throw new Error(`unknown client ${request.client}`);
  const responses = request.actions.map((action) => action.response);
  const requests = [];
  const data = [];
  const errors = [];
  const fetch = async (url, init) => {
    requests.push({ url: String(url), method: init?.method ?? "GET", body: init?.body ? JSON.parse(init.body) : null });
    const next = responses.shift();
    if (!next) throw new Error("no response scripted for this request");
    const body = next.status === 204 ? null : next.body;
    return new Response(body, { status: next.status, headers: { "content-type": "text/event-stream" } });
  };
  const transport = new ai.DefaultChatTransport({ api: "/api/chat", fetch });
  const state = new State(structuredClone(request.messages ?? []));
  class Chat extends ai.AbstractChat {
    constructor() {
      super({ id: request.chatId ?? "chat-1", transport, state, onData: (part) => data.push(part), onError: (error) => errors.push(String(error?.message ?? error)) });
    }
  }
  const chat = new Chat();
  for (const action of request.actions) {
    if (action.kind === "send") await chat.sendMessage({ text: action.text });
    else if (action.kind === "continue") await chat.sendMessage();
    else if (action.kind === "resume") await chat.resumeStream();
    else throw new Error(`unknown action ${action.kind}`);
  }
  return { messages: state.messages, status: state.status, error: state.error ? String(state.error.message ?? state.error) : null, errors, data, requests };
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    answer = await run(JSON.parse(line));
  } catch (error) {
    answer = { fatal: String(error?.stack ?? error) };
  }
  process.stdout.write(JSON.stringify(answer) + "\n");
}
