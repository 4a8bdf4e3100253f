"""The frontend handler: chat requests in, UI message streams and JSON out, with no Django in it.

``create_frontend_handler(...)`` returns a :class:`FrontendHandler` whose methods take plain
values (a session id, a parsed body, a header mapping) and return a
:class:`~chat.http.responses.HandlerResponse`: a status, headers and a body that is a string or an
async iterator of bytes. ``chat.http.views`` adapts it to Django. Ownership is the caller's
business: the views check it before calling.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import msgspec

from chat.ai_sdk.loading import load_reply_page
from chat.ai_sdk.messages import IdGenerator
from chat.ai_sdk.resume import resume_position, resume_run_stream
from chat.ai_sdk.snapshot import SnapshotDeps, build_snapshot
from chat.ai_sdk.sse import create_sse_headers, ending_cleanly, ui_message_stream
from chat.ai_sdk.state import RunInfo, StateStore
from chat.ai_sdk.transformer import StreamTransformer
from chat.exceptions import MethodNotAllowedError, OverrideNotAllowedError
from chat.http.continuations import continued_run
from chat.http.double_texting import DoubleTexting, existing_message_id
from chat.http.feed import session_feed
from chat.http.parsing import ChatInput, Limits, parse_chat_body
from chat.http.read_ahead import PageAhead
from chat.http.responses import STREAM_OPEN, HandlerResponse, error_response
from chat.session_ids import body_session_id, canonical_session_id, new_session_id
from chat.state.approvals import ToolAnswer
from streams.backends.base import StreamManager
from streams.exceptions import (
    ConfigurationError,
    ExecutionError,
    HelixError,
    ResumePositionError,
    StreamFailedError,
    ValidationError,
)
from streams.messages import StoredMessage
from streams.sse import UI_MESSAGE_STREAM_HEADERS, extract_resume_position
from workers.exceptions import RunConflictError
from workers.executors import Executor

__all__ = ["FrontendHandler", "create_frontend_handler"]

#: Records a continuation's answers to a paused run's calls; returns the tool call ids answered.
Decide = Callable[[str, list[ToolAnswer], "int | None"], Awaitable[list[str]]]


class _Unread:
    """The type of :data:`UNREAD`."""


UNREAD = _Unread()
"""``handle_resume(run=UNREAD)``: the caller has not read the session's current run
(``position=UNREAD``: nor the client's position)."""


class FrontendHandler:
    """Start, continue and resume chat runs; snapshots and messages of a session."""

    def __init__(
        self,
        executor: Executor,
        stream_manager: StreamManager,
        state_store: StateStore,
        agent: str = "chat",
        transformer_options: dict[str, Any] | None = None,
        content_replay: bool = True,
        logger: logging.Logger | None = None,
        *,
        limits: Limits | None = None,
        keep_alive: float = 15.0,
        decide: Decide | None = None,
        generate_message_id: Callable[[], str] | None = None,
        double_texting: DoubleTexting | None = None,
    ) -> None:
        self.executor = executor
        self.streams = stream_manager
        self.store = state_store
        self.agent = agent
        self.transformer_options = transformer_options or {}
        self.content_replay = content_replay
        self.logger = logger or logging.getLogger("chat.http.handler")
        self.limits = limits or Limits()
        self.keep_alive = keep_alive
        self.decide = decide  # records the answers to a paused run's tool calls
        #: The id of each new reply's assistant message (default: ``msg-`` and a random hex).
        self.generate_message_id = generate_message_id
        #: What a POST does while a run is in flight (default: ``reattach``, no waiting policy).
        self.double_texting = double_texting or DoubleTexting("reattach")

    def _stream(self, body: AsyncIterator[bytes], headers: Mapping[str, str] | None = None) -> HandlerResponse:
        """A stream response of ``body``, whose reader sends keep-alives itself (``batches(keep_alive=…)``).
        It opens with a comment: a server sends the headers only with the first bytes of a body."""
        return HandlerResponse(200, create_sse_headers(headers), ending_cleanly(body, self.logger, first=STREAM_OPEN))

    # -- the seeds' single entry point ----------------------------------------------------------

    async def handle_request(
        self,
        method: str,
        *,
        body: Any = None,
        session_id: str | None = None,
        headers: Mapping[str, Any] | None = None,
        owner_id: int | None = None,
    ) -> HandlerResponse:
        """One call for both verbs, as the seeds' ``handleRequest``: ``POST`` starts (or continues) a
        run in ``session_id``, else in the session the body names (``sessionId`` or ``id``), else
        in a new one, and streams it with ``X-Session-Id``; ``GET`` resumes ``session_id`` from
        the position in ``headers``.

        This is the site's own code calling, so the seeds' override semantics hold: ``messages``
        replaces the session's history (its ``system`` messages dropped) and ``state`` its state;
        a session that does not exist yet starts from them, or empty.
        """
        try:
            if session_id is not None:
                session_id = canonical_session_id(session_id)
            verb = method.upper()
            if verb == "POST":
                target = session_id or body_session_id(body) or new_session_id()
                return await self.handle_post(target, body, owner_id=owner_id, trusted=True)
            if verb == "GET":
                if session_id is None:
                    raise ValidationError("session_id is required to resume a stream")
                return await self.handle_resume(session_id, headers or {})
        except HelixError as exc:
            return error_response(exc)
        return error_response(MethodNotAllowedError(f"Method {method!r} not allowed; use POST or GET"))

    # -- POST: start or continue a run and stream it --------------------------------------------

    async def handle_post(
        self,
        session_id: str,
        body: Any,
        *,
        owner_id: int | None = None,
        trusted: bool = True,
        headers: Mapping[str, Any] | None = None,
        caller_owns: bool | None = None,
    ) -> HandlerResponse:
        """Start a run for the chat request ``body`` and stream it.

        ``trusted``: the caller may replace the session's history and state (the seeds'
        ``messages`` / ``state`` overrides). The site's own code calling the handler is; the HTTP
        views pass what ``HELIX["OVERRIDE_PERMISSION_CLASSES"]`` say of the request. While the
        session has a run in flight, the double-texting policy decides (:mod:`chat.http.double_texting`;
        ``headers`` carry the helpers' reattach position). ``caller_owns``: whether the caller owns
        the session if it exists (``None``: the site's own code, which may use any; see
        :meth:`~workers.runtime.persistence.RunRecorder.start_run`).
        """
        try:
            request = parse_chat_body(body, self.limits)
            if request.overrides and not trusted:
                raise OverrideNotAllowedError(request.overrides[0])
            if request.continuation_of is not None:
                run = await continued_run(self.store, session_id, request)
                if run is not None:
                    return await self._resume_paused(session_id, run, request, owner_id)
            handle = await self._execute_once_free(session_id, request, owner_id, headers or {}, caller_owns)
            if isinstance(handle, HandlerResponse):
                return handle  # reattached to the run in flight
        except HelixError as exc:
            return error_response(exc)
        except Exception:
            self.logger.exception("could not execute a chat request for session %s", session_id)
            return error_response(ExecutionError("The chat request could not be executed"))
        reader = await self.streams.create_resumable_reader(handle.session_id, handle.start_sequence)
        if reader is None:  # the run failed before we could attach: the stream says why
            return error_response(StreamFailedError(handle.session_id, "the run failed to start"))
        transformer = StreamTransformer(message_id=handle.message_id, **self.transformer_options)
        body = ui_message_stream(reader.batches(keep_alive=self.keep_alive), transformer)
        return self._stream(body, {"X-Session-Id": handle.session_id})

    async def _resume_paused(
        self, session_id: str, run: RunInfo, request: ChatInput, owner_id: int | None
    ) -> HandlerResponse:
        """A continuation that answers the calls a paused run waits on: record the answers, resume
        the same run on a worker and stream what it does next into the same message."""
        if self.decide is None:
            raise ConfigurationError("This handler cannot take answers to paused tool calls")
        answered = await self.decide(run.run_id, request.answers, owner_id)
        info = await self.streams.get_stream_info(session_id)
        position = info.latest_sequence if info is not None else run.start_sequence
        await self.streams.resume_stream(session_id, holder=run.run_id)  # as the run's, as every write
        await self.executor.resume(run.run_id, request.agent or self.agent)
        reader = await self.streams.create_resumable_reader(session_id, position)
        if reader is None:
            return error_response(StreamFailedError(session_id, "the run failed to resume"))
        # The answered calls are on the client already: their results land on them.
        transformer = StreamTransformer(
            message_id=run.message_id, known_tool_calls=answered, **self.transformer_options
        )
        body = ui_message_stream(reader.batches(keep_alive=self.keep_alive), transformer)
        return self._stream(body, {"X-Session-Id": session_id})

    async def _execute_once_free(
        self,
        session_id: str,
        request: ChatInput,
        owner_id: int | None,
        headers: Mapping[str, Any],
        caller_owns: bool | None = None,
    ) -> Any:
        """Start the run, applying the double-texting policy while another is in flight: the run's
        handle, or the response of a POST reattached to the run in flight."""
        for _ in range(3):  # with interrupt or enqueue, another tab's message may win the free slot
            try:
                return await self._execute(session_id, request, owner_id, caller_owns)
            except RunConflictError as conflict:
                run = await self.store.get_current_run(session_id)
                if self.double_texting.reattach_to(run, headers):
                    return await self.handle_resume(session_id, headers)
                await self.double_texting.make_room(self.store, self.streams, session_id, run, conflict)
        raise RunConflictError(f"Session {session_id} stayed busy with other messages")

    async def _execute(
        self, session_id: str, request: ChatInput, owner_id: int | None, caller_owns: bool | None = None
    ) -> Any:
        agent = request.agent or self.agent
        messages = request.messages
        user: StoredMessage | None = None
        if request.text is not None and not request.regenerate:
            user = StoredMessage(role="user", content=request.text, id=request.user_message_id)
        if request.regenerate:  # answer the last user message again: drop what followed it
            stored = (await self.store.get_messages(session_id)).messages
            last_user = max((i for i, m in enumerate(stored) if m.role == "user"), default=None)
            if last_user is None:
                user = StoredMessage(role="user", content=request.text or "", id=request.user_message_id)
            else:
                messages = stored[: last_user + 1]
        return await self.executor.execute(
            agent,
            user,
            session_id=session_id,
            messages=messages,
            state=request.state,
            message_id=request.continuation_of or self._new_message_id(agent),
            owner_id=owner_id,
            caller_owns=caller_owns,
        )

    def _new_message_id(self, agent_name: str) -> str | None:
        """The id of a new reply's message: the handler's ``generate_message_id``, else the
        transformer's (``transformer_options["generate_message_id"]``, given the agent's name),
        else ``None`` (the recorder's default)."""
        if self.generate_message_id is not None:
            return self.generate_message_id()
        generate = self.transformer_options.get("generate_message_id")
        return generate(agent_name) if generate is not None else None

    # -- GET: resume the current run -------------------------------------------------------------

    def read_ahead(self, session_id: str, position: int) -> PageAhead:
        """Start reading the first page a resume of ``session_id`` from ``position`` needs, for
        :meth:`handle_resume` (``ahead=``) once the caller is known to own the session."""
        return PageAhead(self.streams, session_id, position)

    async def handle_resume(
        self,
        session_id: str,
        headers: Mapping[str, Any] | Any,
        *,
        run: RunInfo | _Unread | None = UNREAD,
        ahead: PageAhead | None = None,
        position: int | _Unread | None = UNREAD,
    ) -> HandlerResponse:
        """Stream the session's current run from the client's position: 200 with what the client
        lacks (the rest of the run, and its end when it ended), 204 when it has everything (or
        there is nothing), 410 when the run failed, and a typed 400 for a position past the end
        of the stream, which this server never sent. ``run``: the session's current run when the
        caller has read it already (in the hop that checked the session's owner), else it is read
        here. ``ahead``: the first page from the client's position, read while the caller was
        checked (:meth:`read_ahead`); used when the run starts at or before that position.
        ``position``: the client's position when the caller has read it from ``headers`` already."""
        try:
            if isinstance(position, _Unread):
                position = extract_resume_position(headers)
            if isinstance(run, _Unread):
                run = await self.store.get_current_run(session_id)
            # The stream's state and the reader's first page in one round trip.
            start = resume_position(run, position)
            page = await ahead.take(session_id, start) if ahead is not None else None
            if page is None:
                page = await self.streams.first_page(session_id, start)
            if page is None:
                return HandlerResponse(204)
            if position is not None and position > page.latest_sequence:
                raise ResumePositionError(
                    f"The resume position {position} is past the end of the stream ({page.latest_sequence}): "
                    "reload the snapshot"
                )
        except HelixError as exc:
            return error_response(exc)
        if page.status == "failed":
            return error_response(StreamFailedError(session_id, page.error))
        if page.status == "ended" and (position is None or position == page.latest_sequence):
            return HandlerResponse(204)  # the client has it all (or asks for no position after the end)
        if run is None:
            return HandlerResponse(204)
        body = await resume_run_stream(
            self.streams,
            session_id,
            run,
            position,
            # A paused run's answer is in every snapshot (its pending calls are shown there), so
            # a resume from a snapshot's position adds to it instead of replaying it.
            content_replay=self.content_replay and page.status != "paused",
            transformer_options=self.transformer_options,
            message_id=existing_message_id(headers),
            keep_alive=self.keep_alive,
            first_page=page,
        )
        if body is None:
            return HandlerResponse(204)
        return self._stream(body, {"X-Session-Id": session_id})

    # -- JSON --------------------------------------------------------------------------------------

    async def get_messages(
        self,
        session_id: str,
        offset: int = 0,
        limit: int = 50,
        include_reasoning: bool = True,
        include_tool_results: bool = True,
        generate_id: IdGenerator | None = None,
    ) -> dict[str, Any]:
        """A page of the session's messages as the client shows them (one per reply, each with its
        own id), as JSON-ready builtins; ``offset``/``limit`` count those messages.
        ``generate_id(index, message)`` names a stored message that has no id of its own."""
        messages, has_more, total = await load_reply_page(
            self.store, session_id, offset, limit, include_reasoning, include_tool_results, generate_id
        )
        return {
            "messages": msgspec.to_builtins(messages),
            "hasMore": has_more,
            "offset": offset,
            "limit": limit,
            "total": total,
        }

    def session_feed(self, session_id: str) -> HandlerResponse:
        """The session's feed (:mod:`chat.http.feed`): an event stream, open until the client
        leaves, that says whenever the session's run starts, pauses, goes on, ends or fails."""
        headers = {k: v for k, v in UI_MESSAGE_STREAM_HEADERS.items() if not k.startswith("x-vercel")}
        body = session_feed(self.streams, session_id, keep_alive=self.keep_alive)
        return HandlerResponse(200, headers, ending_cleanly(body, self.logger, first=STREAM_OPEN))

    async def get_snapshot(
        self, session_id: str, include_partial_content: bool | None = None, checkpoint_id: str | None = None
    ) -> dict[str, Any] | None:
        """The session's snapshot as JSON-ready builtins (at checkpoint ``checkpoint_id`` when
        given), or ``None`` for an unknown session."""
        deps = SnapshotDeps(self.store, self.streams, self.content_replay)
        snapshot = await build_snapshot(deps, session_id, include_partial_content, checkpoint_id)
        return None if snapshot is None else msgspec.to_builtins(snapshot)


def create_frontend_handler(
    executor: Executor,
    stream_manager: StreamManager,
    state_store: StateStore,
    agent: str = "chat",
    transformer_options: dict[str, Any] | None = None,
    content_replay: bool = True,
    logger: logging.Logger | None = None,
    **options: Any,
) -> FrontendHandler:
    """A :class:`FrontendHandler` over the given executor and stores."""
    return FrontendHandler(
        executor, stream_manager, state_store, agent, transformer_options, content_replay, logger, **options
    )
