// The demo site's React chat page: everything resumable comes from useResumableChat. Reload
// mid-answer, kill a worker, open the session in a second tab, stop: the page shows what the
// server stored. Rendered under StrictMode, with two components reading the one chat.
import { StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { useResumableChat } from "@helix-django/chat/react";

const params = new URLSearchParams(location.search);
const sessionId = params.get("session") ?? crypto.randomUUID();
if (!params.get("session")) history.replaceState(null, "", `${location.pathname}?${new URLSearchParams({ ...Object.fromEntries(params), session: sessionId })}`);
const api = document.body.dataset.chatApi ?? "/api/chat";

// Client tools: the assistant agent's get_location runs here, in the page.
const tools = {
  get_location: async () => ({ city: Intl.DateTimeFormat().resolvedOptions().timeZone.split("/").pop().replace(/_/g, " ") }),
};

function Part({ part, onApprove }) {
  if (part.type === "text") return <div className="part text">{part.text}</div>;
  if (part.type === "reasoning") return <div className="part reasoning">{part.text}</div>;
  if (part.type !== "dynamic-tool" && !part.type.startsWith("tool-")) return null;
  const name = part.toolName ?? part.type.slice(5);
  const output = part.state === "output-error" ? part.errorText : part.output !== undefined ? JSON.stringify(part.output) : "";
  return (
    <div className="part tool" data-call={part.toolCallId}>
      <b>🔧 {name}</b> <span className={`state ${part.state}`}>{part.state}</span>
      <pre className="input">{JSON.stringify(part.input ?? null)}</pre>
      <pre className="output">{output ? `→ ${output}` : ""}</pre>
      {part.state === "approval-requested" && (
        <div className="approval">
          <button type="button" onClick={() => onApprove(part.approval.id, true)}>Approve</button>
          <button type="button" onClick={() => onApprove(part.approval.id, false)}>Deny</button>
        </div>
      )}
    </div>
  );
}

// A second reader of the same chat: one chat and one resume, however many components open it.
function Summary({ agent }) {
  const { messages, status, resyncCount } = useResumableChat({ sessionId, api, agent, tools });
  return (
    <span id="summary" data-testid="summary">
      {messages.length} messages · {status}{resyncCount ? ` · resynced ${resyncCount}×` : ""}
    </span>
  );
}

function App() {
  const [agent, setAgent] = useState(() => localStorage.getItem(`helix-agent:${sessionId}`) ?? "chat");
  const [agents, setAgents] = useState([]);
  const [input, setInput] = useState("");
  const [activity, setActivity] = useState([]);
  const note = (text) => setActivity((items) => [text, ...items].slice(0, 40));
  const chat = useResumableChat({
    sessionId,
    api,
    agent,
    tools,
    onSnapshotLoaded: (snapshot) => note(snapshot && (snapshot.status === "active" || snapshot.status === "paused") ? "resuming the answer in progress" : "loaded"),
    onResync: () => note("resynced after a worker change"),
    onError: (error) => note(`error: ${error.message ?? error}`),
  });
  useEffect(() => {
    fetch(api.replace(/\/chat$/, "/agents")).then((r) => (r.ok ? r.json() : [{ name: "chat" }])).then(setAgents);
  }, []);
  const busy = chat.status === "streaming" || chat.status === "submitted";
  const status = chat.isLoading ? "loading" : chat.error ? `error: ${chat.error.message}` : chat.chatError ? `error: ${chat.chatError.message}` : chat.status;
  return (
    <>
      <header>
        <h1>Helix chat · React</h1>
        <label>
          Agent{" "}
          <select data-testid="agent" value={agent} onChange={(e) => { setAgent(e.target.value); localStorage.setItem(`helix-agent:${sessionId}`, e.target.value); }}>
            {agents.map((a) => <option key={a.name} value={a.name} title={a.description ?? ""}>{a.name}</option>)}
          </select>
        </label>
        <span id="status" data-testid="status">{status}</span>
        <Summary agent={agent} />
      </header>
      <main>
        <section id="messages" data-testid="messages" aria-live="polite">
          {chat.messages.map((message) => (
            <div key={message.id} className={`msg ${message.role}`} data-id={message.id}>
              {message.parts.map((part, i) => (
                <Part key={part.toolCallId ?? i} part={part} onApprove={(id, approved) => chat.respondToApproval({ id, approved })} />
              ))}
            </div>
          ))}
        </section>
        <aside>
          <h2>Activity</h2>
          <ol id="activity" data-testid="activity">{activity.map((text, i) => <li key={i}>{text}</li>)}</ol>
        </aside>
      </main>
      <form id="composer" onSubmit={(e) => { e.preventDefault(); const text = input.trim(); if (!text) return; setInput(""); chat.sendMessage({ text }); }}>
        <input name="message" autoComplete="off" placeholder="Ask something…" value={input} onChange={(e) => setInput(e.target.value)} />
        <button type="submit" disabled={busy || chat.isLoading}>Send</button>
        <button type="button" disabled={!busy} onClick={() => chat.stop()}>Stop</button>
      </form>
    </>
  );
}

createRoot(document.getElementById("root")).render(<StrictMode><App /></StrictMode>);
