// React bindings of Helix for Django on @ai-sdk/react (3.x on ai 6, 4.x on ai 7).
//
// `useResumableChat` is the one call a page needs: it loads the session's snapshot before the chat
// shows anything, resumes a run in flight (streaming or waiting on a person), rebuilds the answer
// from the server when a worker died mid-answer (`stream_resync`), runs client tools, also those a
// run waited on before a reload, sends approvals when every waiting call has an answer, and stops
// runs on the server. However many components open one session, and however often React runs
// their effects (StrictMode runs them twice), the session has one chat and is resumed once.
//
// The smaller hooks are the same parts for a page that builds its own chat.

import { Chat, useChat, type UseChatHelpers } from "@ai-sdk/react";
import {
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  type ChatInit,
  type UIMessage,
} from "ai";
import { useCallback, useEffect, useMemo, useRef, useState, useSyncExternalStore } from "react";

import {
  createClientToolHandler,
  createResyncHandler,
  followHelixSession,
  HelixError,
  loadHelixSnapshot,
  prepareHelixChatRequest,
  prepareHelixReconnectRequest,
  readableError,
  shouldResume,
  stopHelixRun,
  type HelixOptions,
  type HelixRunEvent,
  type HelixSnapshot,
} from "./index.js";

export type { HelixOptions, HelixRunEvent, HelixSnapshot } from "./index.js";
export { HelixError } from "./index.js";

/** A `data-stream-resync` part: a worker took over the run from its last committed step. */
export interface ResyncEvent {
  type: "data-stream-resync";
  data: { reason?: string; fromSequence?: number; [key: string]: unknown };
}

/** Where a snapshot stands: its checkpoint and the stream position to resume from. */
export interface Checkpoint {
  id: string | null;
  stepCount: number;
  streamSequence: number;
}

/** Client tools: a tool's name to the function that runs it in the page. */
export type ClientTools = Record<string, (input: any) => unknown>;

type DataPart = { type: string; data?: unknown };
type ChatLike = {
  messages: UIMessage[];
  status: string;
  stop: () => Promise<void> | void;
  resumeStream: () => Promise<void>;
  addToolOutput: (...args: any[]) => Promise<void>;
  sendMessage: (...args: any[]) => Promise<void>;
};

function isResync(part: DataPart): part is ResyncEvent {
  return part?.type === "data-stream-resync";
}

function useLatest<T>(value: T): { readonly current: T } {
  const ref = useRef(value);
  ref.current = value;
  return ref;
}

function idle(chat: { status: string }, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve) => {
    const check = () => {
      if (chat.status !== "streaming" && chat.status !== "submitted") resolve(true);
      else if (Date.now() >= deadline) resolve(false);
      else setTimeout(check, 25);
    };
    check();
  });
}

// ---------------------------------------------------------------------------------------------
// The small hooks

/**
 * Call `onResync` for each `data-stream-resync` part; pass the returned `onData` to the chat
 * (compose it with your own). Nothing else is done: see {@link useAutoResync}.
 */
export function useStreamResync(options: { onResync: (event: ResyncEvent) => void }): {
  onData: (part: DataPart) => void;
} {
  const latest = useLatest(options);
  const onData = useCallback((part: DataPart) => {
    if (isResync(part)) latest.current.onResync(part);
  }, [latest]);
  return { onData };
}

/**
 * Whether a resync is in progress and the last one seen; pass the returned `onData` to the chat.
 * `isResyncing` is true from a `data-stream-resync` part until `settle()` is called, which
 * {@link useAutoResync} does when the snapshot is back.
 */
export function useResyncState(): {
  isResyncing: boolean;
  lastResyncEvent: ResyncEvent | null;
  resyncCount: number;
  onData: (part: DataPart) => void;
  settle: () => void;
} {
  const [state, setState] = useState({ isResyncing: false, lastResyncEvent: null as ResyncEvent | null, resyncCount: 0 });
  const onData = useCallback((part: DataPart) => {
    if (isResync(part)) {
      setState((s) => ({ isResyncing: true, lastResyncEvent: part, resyncCount: s.resyncCount + 1 }));
    }
  }, []);
  const settle = useCallback(() => setState((s) => ({ ...s, isResyncing: false })), []);
  return { ...state, onData, settle };
}

/**
 * On each `data-stream-resync` part: stop the stream, reload the snapshot, replace the messages
 * with the server's, point `reconnectOptions` (the object your transport's
 * `prepareHelixReconnectRequest` was given) at the snapshot's position and resume. Pass the
 * returned `onData` to the chat; `getChat` returns what `useChat` returned.
 */
export function useAutoResync(
  options: HelixOptions & {
    getChat: () => ChatLike & { setMessages?: (messages: UIMessage[]) => void };
    reconnectOptions?: HelixOptions;
    onResync?: (event: ResyncEvent, snapshot: HelixSnapshot | null) => void;
    onError?: (error: unknown) => void;
  },
): { onData: (part: DataPart) => void; isResyncing: boolean; resyncCount: number; resyncError: unknown } {
  const latest = useLatest(options);
  const state = useResyncState();
  const [resyncError, setResyncError] = useState<unknown>(undefined);
  const handler = useMemo(
    () =>
      createResyncHandler({
        ...latest.current,
        setMessages: (messages: any[]) => {
          const chat = latest.current.getChat();
          if (chat.setMessages) chat.setMessages(messages);
          else chat.messages = messages;
        },
        getChat: () => latest.current.getChat(),
        reconnectOptions: latest.current.reconnectOptions,
        onResync: (data: any, snapshot: HelixSnapshot | null) => {
          state.settle();
          setResyncError(undefined);
          latest.current.onResync?.({ type: "data-stream-resync", data }, snapshot);
        },
        onError: (error: unknown) => {
          state.settle();
          setResyncError(error);
          latest.current.onError?.(error);
        },
      }),
    // One handler for the component's life: everything it reads comes from `latest`.
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [],
  );
  const onData = useCallback((part: DataPart) => {
    state.onData(part);
    handler(part);
  }, [handler, state.onData]);
  return { onData, isResyncing: state.isResyncing, resyncCount: state.resyncCount, resyncError };
}

const snapshotLoads = new Map<string, Promise<HelixSnapshot | null>>();

function loadOnce(options: HelixOptions & { checkpointId?: string }): Promise<HelixSnapshot | null> {
  const key = JSON.stringify([options.api ?? "", options.sessionId, options.checkpointId ?? ""]);
  let load = snapshotLoads.get(key);
  if (!load) {
    load = loadHelixSnapshot(options);
    snapshotLoads.set(key, load);
    const forget = () => snapshotLoads.delete(key);
    load.then(forget, forget);
  }
  return load;
}

/**
 * Load a session's snapshot (at `checkpointId` when given): what a page renders before it opens
 * the chat. Requests for the same snapshot made at once (StrictMode, several components) share
 * one fetch.
 */
export function useCheckpointSnapshot(
  options: HelixOptions & { sessionId: string; checkpointId?: string; enabled?: boolean },
): { snapshot: HelixSnapshot | null; checkpoint: Checkpoint | null; loading: boolean; error: unknown; refetch: () => Promise<void> } {
  const { sessionId, api, checkpointId, enabled = true } = options;
  const latest = useLatest(options);
  const [state, setState] = useState({ snapshot: null as HelixSnapshot | null, loading: enabled, error: undefined as unknown });
  const fetchSnapshot = useCallback(async (isCurrent: () => boolean = () => true) => {
    setState((s) => ({ ...s, loading: true, error: undefined }));
    try {
      const snapshot = await loadOnce(latest.current);
      if (isCurrent()) setState({ snapshot, loading: false, error: undefined });
    } catch (error) {
      if (isCurrent()) setState({ snapshot: null, loading: false, error });
    }
  }, [latest]);
  useEffect(() => {
    if (!enabled) return;
    let current = true;
    void fetchSnapshot(() => current);
    return () => {
      current = false;
    };
  }, [sessionId, api, checkpointId, enabled, fetchSnapshot]);
  const refetch = useCallback(() => fetchSnapshot(), [fetchSnapshot]);
  return { ...state, checkpoint: checkpointOf(state.snapshot), refetch };
}

/**
 * Client tools: returns the `onToolCall` to give the chat, which runs each call of a tool in
 * `tools` once the stream is idle, answers it and continues the message; and, once `ready` (the
 * snapshot is in the chat), runs the calls the run was left waiting on before a reload.
 */
export function useResumeClientTools(options: {
  tools: ClientTools;
  getChat: () => ChatLike;
  ready?: boolean;
  autoContinue?: boolean;
}): { onToolCall: (event: { toolCall: any }) => void } {
  const latest = useLatest(options);
  const handler = useMemo(
    () =>
      createClientToolHandler({
        tools: new Proxy({} as ClientTools, {
          get: (_, name: string) => latest.current.tools[name],
          has: (_, name: string) => Object.hasOwn(latest.current.tools, name),
          getOwnPropertyDescriptor: (_, name: string) => Object.getOwnPropertyDescriptor(latest.current.tools, name),
        }),
        getChat: () => latest.current.getChat(),
        autoContinue: options.autoContinue ?? true,
      }),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [],
  );
  const ready = options.ready ?? true;
  useEffect(() => {
    if (ready) void handler.dispatchPending();
  }, [ready, handler]);
  return { onToolCall: handler };
}

function checkpointOf(snapshot: HelixSnapshot | null): Checkpoint | null {
  return snapshot
    ? { id: snapshot.checkpointId, stepCount: snapshot.stepCount, streamSequence: snapshot.streamSequence }
    : null;
}

// ---------------------------------------------------------------------------------------------
// useResumableChat: one chat per session, shared by every component that opens it

/** What {@link useResumableChat} takes. */
export interface ResumableChatOptions extends HelixOptions {
  /** The session to open. */
  sessionId: string;
  /** Open the chat at an earlier checkpoint's snapshot. */
  checkpointId?: string;
  /** `false` holds the chat until it is true (nothing is loaded). */
  enabled?: boolean;
  /** Client tools, run in the page (also after a reload while the run waits on them). */
  tools?: ClientTools;
  /** Whether an answered approval (or a client tool's output) continues the run when no call waits any more: true. */
  autoContinue?: boolean;
  /** After each resync, with the snapshot the answer was rebuilt from. */
  onResync?: (event: ResyncEvent, snapshot: HelixSnapshot | null) => void;
  /** A resync that failed, or a failed stop. */
  onError?: (error: unknown) => void;
  /** The snapshot the chat opened with. */
  onSnapshotLoaded?: (snapshot: HelixSnapshot | null) => void;
  /** The chat's own callbacks, passed on. */
  onData?: ChatInit<UIMessage>["onData"];
  onToolCall?: ChatInit<UIMessage>["onToolCall"];
  onFinish?: ChatInit<UIMessage>["onFinish"];
  onChatError?: ChatInit<UIMessage>["onError"];
  /** useChat's throttle of message updates, in ms. */
  experimental_throttle?: number;
}

/** What {@link useResumableChat} returns: `useChat`'s helpers and the session's recovery state. */
export type ResumableChat = Omit<UseChatHelpers<UIMessage>, "error" | "stop"> & {
  /** The snapshot the chat opened with (or was last rebuilt from). */
  snapshot: HelixSnapshot | null;
  /** True until the snapshot is loaded; messages sent meanwhile wait for it. */
  isLoading: boolean;
  /** Why the snapshot could not be loaded. */
  error: unknown;
  /** The chat's own error (a failed run), as `useChat`'s `error`, or why the server refused the
   *  last message (a `HelixError` with its `code`: the page then shows the server's messages). */
  chatError: Error | undefined;
  /** Why the last resync failed, if it did. */
  resyncError: unknown;
  hasResynced: boolean;
  resyncCount: number;
  checkpoint: Checkpoint | null;
  /** Load the snapshot again and show the server's messages (resuming a run in flight). */
  refetch: () => Promise<void>;
  /** Stop the run on the server, then show what it stored: no part is left streaming. */
  stop: () => Promise<void>;
  /** Answer an approval; the run continues when no call of the message waits any more. */
  respondToApproval: (answer: { id: string; approved: boolean; reason?: string }) => Promise<void>;
};

interface SessionState {
  snapshot: HelixSnapshot | null;
  isLoading: boolean;
  error: unknown;
  resyncError: unknown;
  resyncCount: number;
  refusal: HelixError | undefined;
}


/** One session's chat, shared by the components that open it. */
class HelixSession {
  readonly chat: Chat<UIMessage>;
  readonly options: HelixOptions & { sessionId: string; checkpointId?: string };
  /** The options of every component that has the chat open, as each last rendered them. */
  readonly members = new Set<{ readonly current: ResumableChatOptions }>();
  state: SessionState = {
    snapshot: null,
    isLoading: true,
    error: undefined,
    resyncError: undefined,
    resyncCount: 0,
    refusal: undefined,
  };
  private follower: ReturnType<typeof followHelixSession> | undefined;
  /** This tab's requests under way (a send, a resume, a load) that may not show in the chat's
   * status yet: a resume is "ready" until its stream answers. */
  private working = 0;
  private refetching: Promise<void> | undefined;
  private retries = 0;
  private closed = false;
  ready: Promise<void>;
  private readonly listeners = new Set<() => void>();
  private readonly tools: ReturnType<typeof createClientToolHandler>;
  private readonly resync: ReturnType<typeof createResyncHandler>;
  private disposal: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly key: string,
    options: ResumableChatOptions,
  ) {
    // One object for every request of the session: the resume position moves with resyncs.
    this.options = { ...options };
    const tool = (name: string) => {
      for (const member of this.members) if (member.current.tools && Object.hasOwn(member.current.tools, name)) return member.current.tools[name];
      return undefined;
    };
    this.tools = createClientToolHandler({
      tools: new Proxy({} as ClientTools, {
        get: (_, name: string) => tool(name),
        getOwnPropertyDescriptor: (_, name: string) =>
          tool(name) ? { value: tool(name), enumerable: true, configurable: true, writable: false } : undefined,
      }),
      getChat: () => this.chat,
      autoContinue: options.autoContinue ?? true,
    });
    this.resync = createResyncHandler({
      ...this.options,
      setMessages: (messages: any[]) => {
        this.chat.messages = messages;
      },
      getChat: () => this.chat,
      reconnectOptions: this.options,
      onResync: (data: any, snapshot: HelixSnapshot | null) => {
        this.update({ snapshot, resyncError: undefined, resyncCount: this.state.resyncCount + 1 });
        this.emit((m) => m.onResync?.({ type: "data-stream-resync", data }, snapshot));
      },
      onError: (error: unknown) => {
        this.update({ resyncError: error, resyncCount: this.state.resyncCount + 1 });
        this.emit((m) => m.onError?.(error));
      },
    });
    const autoContinue = options.autoContinue ?? true;
    this.chat = new Chat<UIMessage>({
      id: options.sessionId,
      messages: [],
      transport: new DefaultChatTransport<UIMessage>({
        // Other tabs' runs come through the feed: a message sent meanwhile is refused, readably.
        prepareSendMessagesRequest: prepareHelixChatRequest(Object.assign(this.options, { reattach: false })),
        prepareReconnectToStreamRequest: prepareHelixReconnectRequest(this.options),
      }),
      onData: (part) => {
        this.resync(part);
        this.emit((m) => m.onData?.(part));
      },
      onToolCall: (event) => {
        this.tools(event);
        this.emit((m) => m.onToolCall?.(event));
      },
      onFinish: (event) => {
        this.openFeed(); // a new session exists once its first answer is under way
        if (event.isDisconnect) this.reconnectSoon(); // the connection dropped, not the run
        else this.retries = 0;
        this.emit((m) => m.onFinish?.(event));
      },
      onError: (error) => {
        const readable = readableError(error);
        if (readable instanceof HelixError && readable.code === "RUN_CONFLICT") {
          // Refused while a run is in flight (another tab's, or one waiting on a person): show
          // the server's messages, without the refused one, and the run as it goes.
          this.update({ refusal: readable });
          this.refetch().catch(() => this.reconnectSoon());
        }
        this.emit((m) => m.onChatError?.(error));
      },
      sendAutomaticallyWhen: autoContinue ? lastAssistantMessageIsCompleteWithApprovalResponses : undefined,
    });
    this.ready = this.track(this.load(true));
    this.release(); // a session no component commits to (a render React threw away) goes away
  }

  subscribe = (listener: () => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  getState = () => this.state;

  private emit(call: (options: ResumableChatOptions) => void) {
    for (const member of this.members) call(member.current);
  }

  private update(change: Partial<SessionState>) {
    this.state = { ...this.state, ...change };
    for (const listener of this.listeners) listener();
  }

  /** Follow the session's feed: a run this tab does not show (another tab's, an approval
   * answered elsewhere) makes the page load the snapshot again and resume. */
  private openFeed() {
    if ((this.follower && !this.follower.closed()) || this.closed) return;
    this.follower = followHelixSession({
      ...this.options,
      isBusy: () => this.working > 0 || this.chat.status === "streaming" || this.chat.status === "submitted",
      shownSnapshot: () => this.state.snapshot,
      onNews: () => void this.refetch().catch(() => this.reconnectSoon()),
    });
  }

  /** Count `work` as this tab's until it settles. */
  private track<T>(work: Promise<T>): Promise<T> {
    this.working += 1;
    return work.finally(() => {
      this.working -= 1;
      // The chat's status settles after the promise: look at the feed's news just after.
      if (this.working === 0) setTimeout(() => this.follower?.catchUp(), 0);
    });
  }

  /** Load the snapshot, show it, resume a run in flight and run the client tools it waits on. */
  async load(initial = false): Promise<void> {
    if (initial) this.update({ isLoading: true, error: undefined });
    let snapshot: HelixSnapshot | null;
    try {
      snapshot = await loadHelixSnapshot(this.options);
    } catch (error) {
      if (!initial) throw error; // a refetch: its caller decides (a reconnect tries again)
      this.update({ isLoading: false, error });
      return;
    }
    if (!initial && (this.chat.status === "streaming" || this.chat.status === "submitted")) {
      return; // the page moved on meanwhile (a send, an approval): what it streams is newer
    }
    this.options.snapshot = snapshot;
    this.options.resumeFromSequence = snapshot?.streamSequence;
    this.chat.messages = snapshot?.messages ?? [];
    this.update({ snapshot, isLoading: false });
    this.emit((m) => m.onSnapshotLoaded?.(snapshot));
    if (shouldResume(snapshot)) void this.track(this.chat.resumeStream());
    void this.tools.dispatchPending();
    if (snapshot) this.openFeed();
  }

  /** Load the snapshot again and show it; refetches asked for meanwhile run after it, once. */
  refetch(): Promise<void> {
    if (this.refetching) return this.refetching;
    const run = async () => {
      this.refetching = undefined;
      if (this.chat.status === "streaming" || this.chat.status === "submitted") await this.chat.stop();
      await this.load();
    };
    const attempt = this.ready.then(run);
    this.refetching = attempt;
    this.ready = this.track(attempt.catch(() => {})); // sends wait for it, whatever it met
    return attempt;
  }

  /** After a dropped connection: load the snapshot and resume, 1 s later, then up to 15 s apart
   * while the server cannot be reached. */
  private reconnectSoon() {
    if (this.closed) return;
    const delay = Math.min(1000 * 2 ** this.retries, 15000);
    this.retries += 1;
    setTimeout(() => {
      this.refetch().catch(() => this.reconnectSoon());
    }, delay);
  }

  async send(...args: Parameters<Chat<UIMessage>["sendMessage"]>): Promise<void> {
    await this.ready;
    this.update({ refusal: undefined });
    return this.track(this.chat.sendMessage(...args));
  }

  async stop(): Promise<void> {
    try {
      await stopHelixRun(this.options);
    } catch (error) {
      this.emit((m) => m.onError?.(error));
    }
    // The run ends its stream at its next safe point; a connection that does not end is closed.
    if (!(await idle(this.chat, 5000))) await this.chat.stop();
    const snapshot = await loadHelixSnapshot(this.options).catch(() => undefined);
    if (snapshot) {
      this.options.snapshot = snapshot;
      this.options.resumeFromSequence = snapshot.streamSequence;
      this.chat.messages = snapshot.messages;
      this.update({ snapshot });
    }
  }

  join(member: { readonly current: ResumableChatOptions }) {
    this.members.add(member);
    clearTimeout(this.disposal);
    // A component that opens a chat already loaded hears of the snapshot it opened with.
    if (!this.state.isLoading && !this.state.error) member.current.onSnapshotLoaded?.(this.state.snapshot);
  }

  leave(member: { readonly current: ResumableChatOptions }) {
    this.members.delete(member);
    this.release();
  }

  private release() {
    clearTimeout(this.disposal);
    // StrictMode unmounts and mounts again at once: only a session left alone for a while goes.
    this.disposal = setTimeout(() => {
      if (this.members.size === 0 && sessions.get(this.key) === this) {
        sessions.delete(this.key);
        this.closed = true;
        this.follower?.close();
        void this.chat.stop();
      }
    }, 1000);
  }
}

const sessions = new Map<string, HelixSession>();

function sessionFor(options: ResumableChatOptions): HelixSession {
  const key = JSON.stringify([options.api ?? "", options.sessionId, options.checkpointId ?? ""]);
  let session = sessions.get(key);
  if (!session) {
    session = new HelixSession(key, options);
    sessions.set(key, session);
  }
  return session;
}

/**
 * The one-call resumable chat of a Helix session: `useChat`'s helpers on a chat that opens with
 * the session's snapshot, resumes the run in flight, survives a worker's death (`stream_resync`),
 * runs client tools and approvals, and stops runs on the server.
 *
 *     const chat = useResumableChat({ sessionId, agent: "assistant", tools: { get_location } });
 *     if (chat.isLoading) return <p>Loading…</p>;
 *     chat.messages.map(...); chat.sendMessage({ text }); chat.stop();
 */
export function useResumableChat(options: ResumableChatOptions): ResumableChat {
  const enabled = options.enabled ?? true;
  const session = enabled ? sessionFor(options) : undefined;
  const member = useLatest(options);
  if (session) {
    // What requests carry follows the latest render of any component that has the chat open.
    session.options.agent = options.agent;
    session.options.headers = options.headers;
    session.options.body = options.body;
    session.options.csrfToken = options.csrfToken;
  }
  useEffect(() => {
    if (!session) return;
    session.join(member);
    return () => session.leave(member);
  }, [session, member]);
  const idleState = useMemo<SessionState>(
    () => ({
      snapshot: null,
      isLoading: false,
      error: undefined,
      resyncError: undefined,
      resyncCount: 0,
      refusal: undefined,
    }),
    [],
  );
  const state = useSyncExternalStore(
    session?.subscribe ?? noSubscription,
    session?.getState ?? (() => idleState),
    session?.getState ?? (() => idleState),
  );
  const helpers = useChat<UIMessage>(
    session
      ? { chat: session.chat, experimental_throttle: options.experimental_throttle }
      : { id: `${options.sessionId}:disabled` },
  );
  const sendMessage = useCallback<UseChatHelpers<UIMessage>["sendMessage"]>(
    async (...args) => {
      if (!session) throw new Error("useResumableChat: the chat is not enabled");
      return session.send(...args);
    },
    [session],
  );
  const stop = useCallback(async () => {
    await session?.stop();
  }, [session]);
  const refetch = useCallback(async () => {
    await session?.refetch();
  }, [session]);
  const respondToApproval = useCallback(
    async (answer: { id: string; approved: boolean; reason?: string }) => {
      await session?.chat.addToolApprovalResponse(answer);
    },
    [session],
  );
  return {
    ...helpers,
    sendMessage,
    stop,
    refetch,
    respondToApproval,
    chatError: state.refusal ?? (readableError(helpers.error) as Error | undefined),
    snapshot: state.snapshot,
    isLoading: enabled && state.isLoading,
    error: state.error,
    resyncError: state.resyncError,
    hasResynced: state.resyncCount > 0,
    resyncCount: state.resyncCount,
    checkpoint: checkpointOf(state.snapshot),
  };
}

function noSubscription(): () => void {
  return () => {};
}
