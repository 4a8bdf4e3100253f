// The real AI SDK chat client against the host project: the AI SDK pinned in tests/js, and the
// Helix helpers *as installed from the wheel* (request.helix: the path of the installed
// chat/static/helix/helix-chat.js). tests/js/live.mjs cannot be reused here: it fixes the API
// path (/api/chat) and the credentials (Authorization: Token).
//
// stdin: one JSON request {client, helix, api, sessionId, headers, agent, actions}
//   api: where the host mounted the chat API, e.g. http://127.0.0.1:8000/assistant/chat
//   actions: {kind: "send", text} | {kind: "send-and-drop", text, dropWhenText} | {kind: "resume"}
//     "send-and-drop" drops the connection (a disconnect, not a stop) once the answer's text
//     holds dropWhenText, and records the answer as the client had it then in `dropped`.
// stdout: one JSON answer {messages, status, error, errors, dropped}
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const modules = new URL("../js/node_modules/", import.meta.url);

async function importPackage(name) {
  const manifest = JSON.parse(readFileSync(new URL(`${name}/package.json`, modules), "utf8"));
  const entry = manifest.exports?.["."]?.import ?? manifest.module ?? manifest.main;
  return import(new URL(`${name}/${entry}`, modules));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function answerText(messages) {
  const last = messages.at(-1);
  if (last?.role !== "assistant") return "";
  return last.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
}

class State {
  constructor() { this.messages = []; this.status = "ready"; this.error = undefined; }
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), structuredClone(m), ...this.messages.slice(i + 1)]; };
  snapshot = (v) => structuredClone(v);
}

async function run(request) {
  const ai = await importPackage(`ai-${request.client}`);
  const helix = await import(pathToFileURL(request.helix));
  const errors = [];
  const options = { api: request.api, sessionId: request.sessionId, agent: request.agent, headers: request.headers };
  const transport = new ai.DefaultChatTransport({
    prepareSendMessagesRequest: helix.prepareHelixChatRequest(options),
    prepareReconnectToStreamRequest: helix.prepareHelixReconnectRequest(options),
  });
  const state = new State();
  class Chat extends ai.AbstractChat {}
  const chat = new Chat({ id: request.sessionId, transport, state, onError: (e) => errors.push(String(e?.message ?? e)) });
  let dropped = null;

  for (const action of request.actions) {
    if (action.kind === "send") {
      await chat.sendMessage({ text: action.text });
    } else if (action.kind === "send-and-drop") {
      let answered = false;
      const sending = chat.sendMessage({ text: action.text }).finally(() => { answered = true; });
      const deadline = Date.now() + (action.timeoutMs ?? 20000);
      while (!answerText(state.messages).includes(action.dropWhenText)) {
        if (answered || Date.now() > deadline) {
          throw new Error(`the answer never held ${JSON.stringify(action.dropWhenText)}: ${JSON.stringify(state.messages)}`);
        }
        await sleep(5);
      }
      await chat.stop();  // the connection drops: the run goes on on the worker
      await sending;
      dropped = { text: answerText(state.messages), status: state.status };
    } else if (action.kind === "resume") {
      await chat.resumeStream();
    } else {
      throw new Error(`unknown action ${action.kind}`);
    }
  }
  return { messages: state.messages, status: state.status, error: state.error ? String(state.error.message ?? state.error) : null,
           errors, dropped };
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
let answer;
try { answer = await run(JSON.parse(Buffer.concat(chunks).toString("utf8"))); } catch (error) { answer = { fatal: String(error?.stack ?? error) }; }
process.stdout.write(JSON.stringify(answer) + "\n");
