// Helix for Django: helpers for the AI SDK's DefaultChatTransport (ai v6). An ES module with no
// build step, served by Django at {% static 'helix/helix-chat.js' %}.
//
//   import { prepareHelixChatRequest, prepareHelixReconnectRequest, loadHelixSnapshot,
//            createResyncHandler, createClientToolHandler } from "/static/helix/helix-chat.js";
//   const snapshot = await loadHelixSnapshot({ sessionId });
//   const options = { sessionId, resumeFromSequence: snapshot.streamSequence, snapshot, agent: "chat" };
//   const transport = new DefaultChatTransport({
//     prepareSendMessagesRequest: prepareHelixChatRequest(options),
//     prepareReconnectToStreamRequest: prepareHelixReconnectRequest(options),
//   });
//
// Every request goes to the single-path layout /api/chat/<session id>: POST starts or continues
// a run, GET resumes it. Browsers send the CSRF token from the csrftoken cookie, else from the
// page's <meta name="csrf-token"> ({% helix_csrf_meta %}), else `csrfToken` in the options; API
// clients pass `headers: {Authorization: "Token …"}`.

const DEFAULT_BASE = "/api/chat";

/**
 * The page's CSRF token (browsers only): from Django's `csrftoken` cookie, else from
 * `<meta name="csrf-token">` ({% load helix %}{% helix_csrf_meta %}), which a site whose cookie
 * JavaScript cannot read (CSRF_COOKIE_HTTPONLY, CSRF_USE_SESSIONS) puts in its page.
 */
export function csrfToken(cookieName = "csrftoken") {
  if (typeof document === "undefined") return undefined;
  for (const part of (document.cookie || "").split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === cookieName) return decodeURIComponent(rest.join("="));
  }
  return document.querySelector('meta[name="csrf-token"]')?.getAttribute("content") || undefined;
}

function toObject(headers) {
  if (!headers) return {};
  if (typeof Headers !== "undefined" && headers instanceof Headers) return Object.fromEntries(headers.entries());
  if (Array.isArray(headers)) return Object.fromEntries(headers);
  return { ...headers };
}

function chatUrl(options, id) {
  const base = (options.baseUrl ?? DEFAULT_BASE).replace(/\/$/, "");
  return `${base}/${encodeURIComponent(options.sessionId ?? id)}`;
}

function helixHeaders(options, requestHeaders) {
  const headers = { ...toObject(requestHeaders), ...toObject(options.headers) };
  const token = options.csrfToken ?? csrfToken();
  if (token) headers["X-CSRFToken"] = token;
  if (options.resumeFromSequence != null) headers["X-Resume-From-Sequence"] = String(options.resumeFromSequence);
  if (options.existingMessageId) headers["X-Existing-Message-Id"] = options.existingMessageId;
  return headers;
}

/**
 * For `prepareSendMessagesRequest`: POST to /api/chat/<session id> with the AI SDK body
 * (`id`, `messages`, `trigger`, `messageId`) plus `agent` when `options.agent` names one.
 */
export function prepareHelixChatRequest(options = {}) {
  return ({ id, messages, trigger, messageId, body, headers, credentials }) => ({
    api: chatUrl(options, id),
    credentials: credentials ?? options.credentials ?? "same-origin",
    headers: helixHeaders({ ...options, resumeFromSequence: undefined }, headers),
    body: {
      ...(body ?? {}),
      ...(options.body ?? {}),
      ...(options.agent ? { agent: options.agent } : {}),
      id: options.sessionId ?? id,
      messages,
      trigger,
      ...(messageId != null ? { messageId } : {}),
    },
  });
}

/** The id of the `-partial` message a snapshot taken with content replay off ends with, if any. */
function partialMessageId(snapshot) {
  const last = snapshot?.messages?.at(-1);
  return last?.role === "assistant" && typeof last.id === "string" && last.id.endsWith("-partial") ? last.id : undefined;
}

/**
 * For `prepareReconnectToStreamRequest`: GET /api/chat/<session id> (instead of the SDK's
 * `<api>/<id>/stream`), with the resume position of the snapshot the page loaded. Without a
 * position the server replays the current run from its start.
 *
 * Pass the loaded snapshot as `options.snapshot`. When it shows the answer in flight as a
 * `-partial` message (content replay off) and the client starts a fresh message for a resumed
 * stream (ai 6.0.304+ and 7.x, whose transports declare `resumeStreamIsReplay`), the run is asked
 * for from its start under that message's id: the client replaces the partial message with the
 * whole answer, so the page keeps one message. Older clients continue the partial message from
 * the position.
 */
export function prepareHelixReconnectRequest(options = {}) {
  return function prepareReconnect({ id, headers, credentials }) {
    const partial = partialMessageId(options.snapshot);
    const freshOnResume = typeof this?.resumeStreamIsReplay === "boolean";
    const resume = partial && freshOnResume
      ? { ...options, resumeFromSequence: undefined, existingMessageId: partial }
      : options;
    return {
      api: chatUrl(options, id),
      credentials: credentials ?? options.credentials ?? "same-origin",
      headers: helixHeaders(resume, headers),
    };
  };
}

/** GET the session's snapshot: `{messages, state, streamSequence, status, …}`, or null (404). */
export async function loadHelixSnapshot({ sessionId, baseUrl, headers, fetch: fetchImpl } = {}) {
  const doFetch = fetchImpl ?? globalThis.fetch;
  const response = await doFetch(`${chatUrl({ baseUrl, sessionId }, sessionId)}/snapshot`, {
    headers: toObject(headers),
    credentials: "same-origin",
  });
  if (response.status === 404) return null;
  if (!response.ok) throw new Error(`snapshot failed: ${response.status} ${await response.text()}`);
  return response.json();
}

/** Whether the page should resume the stream for this snapshot. */
export function shouldResume(snapshot) {
  return snapshot != null && (snapshot.status === "active" || snapshot.status === "paused");
}

/**
 * An `onData` callback for `data-stream-resync`: the worker running the answer died and another
 * took over from the last committed step, so what the page shows of the answer may hold a step
 * that was voided. Right after the current event (outside the SDK's update job) the handler
 * stops the stream, reloads the snapshot, hands its messages to `setMessages`, points
 * `reconnectOptions` (the object given to `prepareHelixReconnectRequest`) at the snapshot's
 * position and resumes: the answer is rebuilt from what the server holds, and ends as it would
 * have without the crash. Without `getChat` it only replaces the messages.
 * `handler.settled()` is a promise for the resyncs in progress.
 */
export function createResyncHandler({
  sessionId, baseUrl, headers, fetch: fetchImpl, setMessages, getChat, reconnectOptions, onResync,
}) {
  let pending = Promise.resolve();
  const resync = async (data) => {
    const chat = getChat?.();
    if (chat) await chat.stop();
    const snapshot = await loadHelixSnapshot({ sessionId, baseUrl, headers, fetch: fetchImpl });
    if (snapshot) setMessages(snapshot.messages);
    if (snapshot && reconnectOptions) {
      reconnectOptions.resumeFromSequence = snapshot.streamSequence;
      reconnectOptions.snapshot = snapshot;
    }
    onResync?.(data, snapshot);
    if (chat && shouldResume(snapshot)) await chat.resumeStream();
  };
  const handler = (part) => {
    if (part?.type !== "data-stream-resync") return;
    pending = pending
      .then(() => new Promise((resolve) => setTimeout(resolve, 0)))
      .then(() => resync(part.data))
      .catch((error) => onResync?.(part.data, null, error));
  };
  handler.settled = () => pending;
  return handler;
}

function pendingCall(messages, toolCallId) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const part = messages[i].parts?.find((p) => p.toolCallId === toolCallId);
    if (part) return { part, message: messages[i] };
  }
  return null;
}

async function idle(chat) {
  while (chat.status === "streaming" || chat.status === "submitted") {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * An `onToolCall` callback that runs client tools (tools without a server-side `execute`) in the
 * page: `tools` maps a tool name to `async (input) => output`. Once the stream is idle, each call
 * still waiting (`input-available`) gets its output through `addToolOutput` (or `output-error`
 * when the function throws), and when no call of the message waits any more the message is
 * continued with `sendMessage()`. A call answered already (a replay after a page refresh shows
 * it before its output) is left alone, so a refresh while the run waits simply dispatches it.
 */
export function createClientToolHandler({ tools, getChat, autoContinue = true }) {
  let pending = Promise.resolve();
  const dispatch = async (toolCall) => {
    const chat = getChat();
    await idle(chat);
    const found = pendingCall(chat.messages, toolCall.toolCallId);
    if (!found || found.part.state !== "input-available") return;
    const tool = toolCall.toolName;
    try {
      const output = await tools[tool](toolCall.input);
      await chat.addToolOutput({ tool, toolCallId: toolCall.toolCallId, output });
    } catch (error) {
      await chat.addToolOutput({ state: "output-error", tool, toolCallId: toolCall.toolCallId, errorText: String(error?.message ?? error) });
    }
    const message = pendingCall(chat.messages, toolCall.toolCallId)?.message;
    const waiting = message?.parts.some((p) => p.toolCallId && (p.state === "input-available" || p.state === "approval-requested"));
    if (autoContinue && !waiting) await chat.sendMessage();
  };
  const handler = ({ toolCall }) => {
    if (toolCall.providerExecuted || !Object.hasOwn(tools, toolCall.toolName)) return;
    pending = pending.then(() => new Promise((resolve) => setTimeout(resolve, 0))).then(() => dispatch(toolCall));
    pending = pending.catch(() => {});
  };
  handler.settled = () => pending;
  return handler;
}
