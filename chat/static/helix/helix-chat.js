// Helix for Django: helpers for the AI SDK's DefaultChatTransport (ai 6 and 7). An ES module with
// no build step, served by Django at {% static 'helix/helix-chat.js' %}, and the main entry of the
// npm package @helix-django/chat (clients/chat), whose "@helix-django/chat/react" entry has the
// React hooks built on these helpers.
//
//   import { prepareHelixChatRequest, prepareHelixReconnectRequest, loadHelixSnapshot,
//            createResyncHandler, createClientToolHandler } from "@helix-django/chat";
//   const snapshot = await loadHelixSnapshot({ sessionId });
//   const options = { sessionId, resumeFromSequence: snapshot?.streamSequence, snapshot, agent: "chat" };
//   const transport = new DefaultChatTransport({
//     prepareSendMessagesRequest: prepareHelixChatRequest(options),
//     prepareReconnectToStreamRequest: prepareHelixReconnectRequest(options),
//   });
//
// Every request goes to <api>/<session id> (`api` is "/api/chat" unless the site mounts Helix
// elsewhere): POST starts or continues a run, GET resumes it, POST …/stop stops it. Browsers send
// the CSRF token from the csrftoken cookie, else from the page's <meta name="csrf-token">
// ({% helix_csrf_meta %}), else `csrfToken` in the options; API clients pass
// `headers: {Authorization: "Token …"}`.

const DEFAULT_API = "/api/chat";

/**
 * @typedef {object} HelixOptions What the helpers take; one object may be shared by all of them.
 * @property {string} [sessionId] The session (else the chat's own id).
 * @property {string} [api] Where the site mounts Helix's chat URLs: `"<prefix>/chat"`, `/api/chat` by default.
 * @property {string} [agent] The agent a new run uses.
 * @property {Record<string, string> | Headers} [headers] Sent with every request (`Authorization` for API clients).
 * @property {RequestCredentials} [credentials] `same-origin` by default.
 * @property {string} [csrfToken] The CSRF token, when neither the cookie nor the meta tag has it.
 * @property {Record<string, unknown>} [body] More fields for every chat POST.
 * @property {number} [resumeFromSequence] The stream position the page shows (the snapshot's `streamSequence`).
 * @property {HelixSnapshot | null} [snapshot] The snapshot the page rendered.
 * @property {string} [existingMessageId] The message the page shows for the run in flight.
 * @property {typeof fetch} [fetch] A fetch of your own.
 */

/**
 * @typedef {object} HelixSnapshot A session as the server stores it: what a page renders before it resumes.
 * @property {any[]} messages The UI messages (`UIMessage[]`).
 * @property {Record<string, unknown>} state The agent's state.
 * @property {number} streamSequence Resume the stream from here.
 * @property {number} startSequence The current run's first chunk follows this one.
 * @property {"active" | "paused" | "ended" | "failed"} status The stream's status.
 * @property {string | null} checkpointId The checkpoint the snapshot shows.
 * @property {number} stepCount The steps its run had committed at that checkpoint (0 without one).
 * @property {string | null} existingMessageId The in-flight answer's message id.
 * @property {number} timestamp When it was taken (ms).
 */

/**
 * The page's CSRF token (browsers only): from Django's `csrftoken` cookie, else from
 * `<meta name="csrf-token">` ({% load helix %}{% helix_csrf_meta %}), which a site whose cookie
 * JavaScript cannot read (CSRF_COOKIE_HTTPONLY, CSRF_USE_SESSIONS) puts in its page.
 * @param {string} [cookieName]
 * @returns {string | undefined}
 */
export function csrfToken(cookieName = "csrftoken") {
  if (typeof document === "undefined") return undefined;
  for (const part of (document.cookie || "").split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === cookieName) return decodeURIComponent(rest.join("="));
  }
  return document.querySelector('meta[name="csrf-token"]')?.getAttribute("content") || undefined;
}

/** An `Error` for a request the server refused, with its typed `code` and the HTTP `status`. */
export class HelixError extends Error {
  /**
   * @param {string} message
   * @param {string | undefined} code
   * @param {number} status
   */
  constructor(message, code, status) {
    super(message);
    this.name = "HelixError";
    this.code = code;
    this.status = status;
  }
}

async function refused(response, what) {
  const text = await response.text();
  let body = {};
  try { body = JSON.parse(text); } catch { /* a proxy's page, not Helix's answer */ }
  return new HelixError(body.error ?? `${what} failed: HTTP ${response.status}`, body.code, response.status);
}

function toObject(headers) {
  if (!headers) return {};
  if (typeof Headers !== "undefined" && headers instanceof Headers) return Object.fromEntries(headers.entries());
  if (Array.isArray(headers)) return Object.fromEntries(headers);
  return { ...headers };
}

function chatUrl(options, id) {
  const base = (options.api ?? DEFAULT_API).replace(/\/$/, "");
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
 * For `prepareSendMessagesRequest`: POST to <api>/<session id> with the AI SDK body (`id`,
 * `messages`, `trigger`, `messageId`) plus `agent` when `options.agent` names one, and the page's
 * position (`X-Resume-From-Sequence`), so that under the default double-texting policy a POST
 * that meets a run in flight (another tab's) streams that run instead of failing with 409.
 * `reattach: false` leaves the position out: such a POST is refused (409 `RUN_CONFLICT`), for a
 * page that follows the session's feed and shows other tabs' runs by itself.
 * @param {HelixOptions & {reattach?: boolean}} [options]
 */
export function prepareHelixChatRequest(options = {}) {
  return ({ id, messages, trigger, messageId, body, headers, credentials }) => ({
    api: chatUrl(options, id),
    credentials: credentials ?? options.credentials ?? "same-origin",
    headers: helixHeaders({
      ...options,
      existingMessageId: undefined,
      resumeFromSequence: options.reattach === false ? undefined : options.resumeFromSequence,
    }, headers),
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

/**
 * The message a snapshot taken with content replay off shows for the run in flight, if any: a
 * `-partial` message (a step under way), or the answer of a run that waits on a person.
 */
function inFlightMessageId(snapshot) {
  const last = snapshot?.messages?.at(-1);
  if (last?.role !== "assistant" || typeof last.id !== "string") return undefined;
  if (last.id.endsWith("-partial")) return last.id;
  return shouldResume(snapshot) && snapshot.existingMessageId === last.id ? last.id : undefined;
}

/**
 * For `prepareReconnectToStreamRequest`: GET <api>/<session id> (instead of the SDK's
 * `<api>/<id>/stream`), with the resume position of the snapshot the page loaded. Without a
 * position the server replays the current run from its start.
 *
 * Pass the loaded snapshot as `options.snapshot`. When it shows the answer in flight (content
 * replay off: a `-partial` message, or the answer of a run waiting on a person) and the client
 * starts a fresh message for a resumed stream (ai 6.0.304+ and 7.x, whose transports declare
 * `resumeStreamIsReplay`), the run is asked for from its start under that message's id: the
 * client replaces the message with the whole answer, so the page keeps one message with each
 * part once. Older clients continue the message from the position.
 * @param {HelixOptions} [options]
 */
export function prepareHelixReconnectRequest(options = {}) {
  return function prepareReconnect({ id, headers, credentials }) {
    const partial = inFlightMessageId(options.snapshot);
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

/**
 * GET the session's snapshot (at `checkpointId` when given), or null for a session that does not
 * exist yet. A refused request throws a {@link HelixError}.
 * @param {HelixOptions & {checkpointId?: string}} [options]
 * @returns {Promise<HelixSnapshot | null>}
 */
export async function loadHelixSnapshot({ sessionId, api, headers, credentials, checkpointId, fetch: fetchImpl } = {}) {
  const doFetch = fetchImpl ?? globalThis.fetch;
  const query = checkpointId ? `?checkpointId=${encodeURIComponent(checkpointId)}` : "";
  const response = await doFetch(`${chatUrl({ api, sessionId }, sessionId)}/snapshot${query}`, {
    headers: toObject(headers),
    credentials: credentials ?? "same-origin",
  });
  if (response.status === 404 && !checkpointId) return null;
  if (!response.ok) throw await refused(response, "snapshot");
  return response.json();
}

/**
 * Stop the session's run on the server (`POST <api>/<session id>/stop`), not only this page's
 * connection: the run keeps what it streamed and ends its stream, and every tab's stream of it
 * ends there. Resolves to whether a run was in flight; a refused request throws a
 * {@link HelixError}.
 * @param {HelixOptions} options
 * @returns {Promise<boolean>}
 */
export async function stopHelixRun(options) {
  const doFetch = options.fetch ?? globalThis.fetch;
  const response = await doFetch(`${chatUrl(options, options.sessionId)}/stop`, {
    method: "POST",
    headers: helixHeaders({ ...options, resumeFromSequence: undefined, existingMessageId: undefined }),
    credentials: options.credentials ?? "same-origin",
  });
  if (!response.ok) throw await refused(response, "stop");
  return (await response.json()).stopped === true;
}

/**
 * The error a chat shows for a refused request: the server's `{"error", "code"}` as a
 * {@link HelixError} with that message and code (its `status` is 0: the AI SDK keeps only the
 * body), rather than the JSON text the AI SDK puts in its error. Anything else is returned as it is.
 * @param {unknown} error
 * @returns {unknown}
 */
export function readableError(error) {
  if (!(error instanceof Error) || error instanceof HelixError) return error;
  try {
    const body = JSON.parse(error.message);
    if (body && typeof body.error === "string") return new HelixError(body.error, body.code, 0);
  } catch { /* not the server's JSON */ }
  return error;
}

/**
 * @typedef {object} HelixRunEvent What a session's feed says of its run.
 * @property {"active" | "paused" | "ended" | "failed" | "none"} status The run's stream.
 * @property {string | null} runId The run.
 * @property {number} streamSequence The stream's last sequence.
 */

/**
 * Open the session's feed (`GET <api>/<session id>/feed`): `onRun(event)` hears the run's state
 * when the feed opens and whenever a run starts, pauses, goes on, ends or fails, in any tab or
 * device. One connection, for as long as it is open: it reconnects (1 s, then up to 15 s apart)
 * after a drop, and stops for good on a 401, 403 or 404 (`onError` hears why). Returns
 * `{close()}`. Fetch-based, so `headers` (an API token) work where `EventSource` has none.
 * @param {HelixOptions & {onRun: (event: HelixRunEvent) => void, onError?: (error: unknown) => void}} options
 * @returns {{close: () => void}}
 */
export function openHelixFeed(options) {
  const doFetch = options.fetch ?? globalThis.fetch;
  const controller = new AbortController();
  let delay = 1000;
  const listen = async () => {
    while (!controller.signal.aborted) {
      try {
        const response = await doFetch(`${chatUrl(options, options.sessionId)}/feed`, {
          headers: { ...toObject(options.headers), Accept: "text/event-stream" },
          credentials: options.credentials ?? "same-origin",
          signal: controller.signal,
        });
        if (response.status === 401 || response.status === 403 || response.status === 404) {
          options.onError?.(await refused(response, "feed"));
          return;
        }
        if (!response.ok || !response.body) throw await refused(response, "feed");
        delay = 1000;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end;
          while ((end = buffer.indexOf("\n\n")) !== -1) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const lines = block.split("\n");
            const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
            if (lines.includes("event: run") && data) options.onRun(JSON.parse(data));
          }
        }
      } catch (error) {
        if (controller.signal.aborted) return;
        options.onError?.(error);
      }
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 15000);
    }
  };
  void listen();
  return { close: () => controller.abort() };
}

/**
 * Follow the session from this page: whenever its feed says the session's run started, paused,
 * went on, ended or failed in a way the page does not show (another tab's run, an approval
 * answered elsewhere), and the page is idle, `onNews(event)` is called once: reload the snapshot
 * and resume (`createResyncHandler`'s `handler.refetch()` does both). While `isBusy()` the page
 * is showing a run itself; call `catchUp()` when it is done, for the news heard meanwhile.
 * `shownSnapshot()` is the snapshot the page shows. The feed opens only for a session that exists
 * (for a new one, open it once its first answer is under way); `close()` ends it.
 * @param {HelixOptions & {
 *   isBusy: () => boolean,
 *   shownSnapshot: () => HelixSnapshot | null | undefined,
 *   onNews: (event: HelixRunEvent) => void,
 *   onError?: (error: unknown) => void,
 * }} options
 * @returns {{catchUp: () => void, close: () => void, closed: () => boolean}}
 */
export function followHelixSession(options) {
  let latest = null;
  let known = null;
  let stopped = false;
  const catchUp = () => {
    const event = latest;
    if (event === null || stopped || options.isBusy()) return;
    const before = known;
    known = event;
    if (before === null) {
      // The feed's first word: news only if the session moved on since the page's snapshot.
      const snapshot = options.shownSnapshot();
      if (snapshot && snapshot.status === event.status && snapshot.streamSequence === event.streamSequence) return;
      if (!snapshot && event.status === "none") return;
    } else if (before.runId === event.runId && before.status === event.status) {
      return;
    }
    options.onNews(event);
  };
  const feed = openHelixFeed({
    ...options,
    onRun: (event) => {
      latest = event;
      catchUp();
    },
    onError: (error) => {
      if (error instanceof HelixError && error.status >= 400 && error.status < 500) stopped = true;
      options.onError?.(error);
    },
  });
  return {
    catchUp,
    close: () => {
      stopped = true;
      feed.close();
    },
    closed: () => stopped,
  };
}

/**
 * Whether the page should resume the stream for this snapshot.
 * @param {HelixSnapshot | null | undefined} snapshot
 * @returns {boolean}
 */
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
 * have without the crash. Without `getChat` it only replaces the messages. `onResync(data,
 * snapshot)` follows each resync; `onError(error, data)` a resync that failed (without it,
 * `onResync(data, null, error)`). `handler.settled()` is a promise for the resyncs in progress;
 * `handler.refetch()` does the same without a resync part (news from the session's feed).
 * @param {HelixOptions & {
 *   setMessages: (messages: any[]) => void,
 *   getChat?: () => any,
 *   reconnectOptions?: HelixOptions,
 *   onResync?: (data: any, snapshot: HelixSnapshot | null, error?: unknown) => void,
 *   onError?: (error: unknown, data: any) => void,
 * }} options
 * @returns {((part: {type: string, data?: any}) => void) & {settled: () => Promise<void>, refetch: () => Promise<void>}}
 */
export function createResyncHandler({
  sessionId, api, headers, credentials, fetch: fetchImpl, setMessages, getChat, reconnectOptions, onResync, onError,
}) {
  let pending = Promise.resolve();
  const resync = async (data) => {
    const chat = getChat?.();
    if (chat) await chat.stop();
    const snapshot = await loadHelixSnapshot({ sessionId, api, headers, credentials, fetch: fetchImpl });
    if (snapshot) setMessages(snapshot.messages);
    if (snapshot && reconnectOptions) {
      reconnectOptions.resumeFromSequence = snapshot.streamSequence;
      reconnectOptions.snapshot = snapshot;
    }
    onResync?.(data, snapshot);
    if (chat && shouldResume(snapshot)) await chat.resumeStream();
  };
  const queue = (data) => {
    pending = pending
      .then(() => new Promise((resolve) => setTimeout(resolve, 0)))
      .then(() => resync(data))
      .catch((error) => (onError ? onError(error, data) : onResync?.(data, null, error)));
    return pending;
  };
  const handler = (part) => {
    if (part?.type === "data-stream-resync") queue(part.data);
  };
  handler.settled = () => pending;
  // The same for news of the session from elsewhere (followHelixSession): `onResync(null, snapshot)`.
  handler.refetch = () => queue(null);
  return handler;
}

function pendingCall(messages, toolCallId) {
  for (let i = messages.length - 1; i >= 0; i--) {
    const part = messages[i].parts?.find((p) => p.toolCallId === toolCallId);
    if (part) return { part, message: messages[i] };
  }
  return null;
}

function toolName(part) {
  return part.type === "dynamic-tool" ? part.toolName : part.type.startsWith("tool-") ? part.type.slice(5) : undefined;
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
 * continued with `sendMessage()`. A call answered already is left alone, so a call dispatched
 * twice (seen live, then again in a replay after a reload) runs once.
 *
 * `handler.dispatchPending()` runs the calls of the last message that still wait, for a page
 * that loaded a snapshot while the run waited on them (no stream announces them again).
 * @param {{tools: Record<string, (input: any) => unknown>, getChat: () => any, autoContinue?: boolean}} options
 * @returns {((event: {toolCall: any}) => void) & {settled: () => Promise<void>, dispatchPending: () => Promise<void>}}
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
    // The chat may have continued by itself (its sendAutomaticallyWhen): never send twice.
    const sent = chat.status === "submitted" || chat.status === "streaming";
    if (autoContinue && !waiting && !sent) await chat.sendMessage();
  };
  const handler = ({ toolCall }) => {
    if (toolCall.providerExecuted || !Object.hasOwn(tools, toolCall.toolName)) return;
    pending = pending.then(() => new Promise((resolve) => setTimeout(resolve, 0))).then(() => dispatch(toolCall));
    pending = pending.catch(() => {});
  };
  handler.settled = () => pending;
  handler.dispatchPending = () => {
    const last = getChat().messages.at(-1);
    if (last?.role !== "assistant") return pending;
    for (const part of last.parts ?? []) {
      const name = toolName(part);
      if (name && part.state === "input-available" && !part.providerExecuted && Object.hasOwn(tools, name)) {
        handler({ toolCall: { toolCallId: part.toolCallId, toolName: name, input: part.input } });
      }
    }
    return pending;
  };
  return handler;
}
