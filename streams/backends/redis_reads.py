"""Page reads of the Redis store, coalesced: the reads one event loop asks for at about the same
time share one transaction.

A reader's page is a status (``HMGET`` of the meta hash) and the chunks after its position
(``XRANGE``), read in one ``MULTI`` so that both are from one instant. Sent one by one, each read
costs a pipeline, a connection from the pool and four replies parsed in Python: most of a
resume's CPU in a reconnect storm, where thousands arrive at once. Here a read waits for the
current loop iteration to end; every read asked for by then goes out in one ``MULTI`` (at most
:attr:`PageReads.max_batch`, a few batches in flight), and each caller gets its own two replies or
its own error. A lone read pays one extra loop iteration. The commands are the same, so every
reader still sees its status and chunks from one instant (the whole batch's, in fact).

A transaction goes out through :func:`~streams.backends.redis_wire.exchange`, not redis-py's
pipeline, which spent most of a page read's CPU on each command and reply in Python.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ExecAbortError

from streams.backends.redis_wire import exchange, typed

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["PageReads"]

_STATUS_FIELDS = ("status", "seq", "error")


class _Read:
    __slots__ = ("after", "chunks_key", "future", "limit", "meta_key")

    def __init__(self, chunks_key: str, meta_key: str, after: int, limit: int, future: asyncio.Future[Any]) -> None:
        self.chunks_key, self.meta_key, self.after, self.limit, self.future = chunks_key, meta_key, after, limit, future


class PageReads:
    """The page reads of one event loop and client, sent in shared transactions."""

    #: Reads per transaction: enough to take a storm in few round trips, few enough that Redis is
    #: never held long (a page is at most the store's ``page_size`` chunks).
    max_batch = 64
    #: Transactions in flight at once (the pool's other connections stay free for writes).
    max_in_flight = 2

    def __init__(self, client: Redis, *, shared_up_to: int, timeout: float) -> None:
        self._client = client
        self._shared_up_to = shared_up_to
        self._timeout = timeout  # for a whole transaction, written and read
        self._pending: list[_Read] = []
        self._sending = 0  # senders that will still look at _pending
        self._tasks: set[asyncio.Task[None]] = set()  # held until done

    async def read(self, chunks_key: str, meta_key: str, after: int, limit: int) -> tuple[list[Any], list[Any]]:
        """``[status, seq, error]`` of the meta hash and the ``XRANGE`` entries after ``after``
        (at most ``limit``), as raw replies. A read of more than ``shared_up_to`` chunks (a
        reader catching up on a long stream) goes out on its own, at once."""
        future: asyncio.Future[tuple[list[Any], list[Any]]] = asyncio.get_running_loop().create_future()
        read = _Read(chunks_key, meta_key, after, limit, future)
        if limit > self._shared_up_to:
            # In a task of its own, like a shared read: a caller that goes away (a client closing
            # a resume mid-read) leaves the reply to be read to its end. Cancelled mid-reply,
            # redis-py would drop the connection, and the next read would pay for a new one.
            self._hold(self._transaction([read]))
            return await future
        self._pending.append(read)
        if self._sending < self.max_in_flight:
            self._sending += 1
            self._hold(self._send())
        return await future

    def _hold(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self) -> None:
        try:
            await asyncio.sleep(0)  # the reads asked for in this loop iteration go together
            while self._pending:
                batch = [r for r in self._pending[: self.max_batch] if not r.future.done()]
                del self._pending[: self.max_batch]
                if batch:
                    await self._transaction(batch)
        finally:
            # In the same step as the last look at _pending: a read asked for from now on starts
            # a sender (a task's done callbacks run later, after callers it woke may have asked).
            self._sending -= 1

    async def _transaction(self, batch: list[_Read]) -> None:
        commands: list[tuple[Any, ...]] = [("MULTI",)]
        for read in batch:
            commands.append(("HMGET", read.meta_key, *_STATUS_FIELDS))
            commands.append(("XRANGE", read.chunks_key, f"{read.after + 1}-0", "+", "COUNT", read.limit))
        commands.append(("EXEC",))
        try:
            replies = _executed(await exchange(self._client.connection_pool, commands, self._timeout))
        except Exception as exc:
            aborted = isinstance(exc, ExecAbortError) or isinstance(exc.__cause__, ExecAbortError)
            if aborted and len(batch) > 1:
                # Redis would not even queue one of the reads (an ACL, say): each on its own.
                for read in batch:
                    await self._transaction([read])
                return
            for read in batch:  # the connection (or Redis) failed: every read of the batch alike
                if not read.future.done():
                    read.future.set_exception(copy.copy(exc))
            return
        except BaseException:  # this task cancelled (its loop closing): so are its reads
            for read in batch:
                read.future.cancel()
            raise
        for index, read in enumerate(batch):
            status, entries = replies[2 * index], replies[2 * index + 1]
            if read.future.done():  # its caller has gone
                continue
            failed = status if isinstance(status, Exception) else entries if isinstance(entries, Exception) else None
            if failed is not None:
                read.future.set_exception(failed)
            else:
                read.future.set_result((status, entries))


def _executed(replies: list[Any]) -> list[Any]:
    """The replies of the commands between ``MULTI`` and ``EXEC``, from the replies of all, errors
    typed as redis-py types them. As redis-py does: a reply that says Redis is not ready (``LOADING``
    after a restart, a ConnectionError) is raised as it is, for the store to retry; a transaction
    Redis discarded raises the error of the command it refused to queue."""
    replies = [typed(reply) for reply in replies]
    for reply in replies:
        if isinstance(reply, RedisConnectionError):
            raise reply
    result = replies[-1]
    if isinstance(result, ExecAbortError):
        refused = next((reply for reply in replies[1:-1] if isinstance(reply, Exception)), None)
        if refused is not None:
            raise refused from result
    if isinstance(result, Exception):
        raise result
    if isinstance(replies[0], Exception):
        raise replies[0]
    return [typed(reply) for reply in result]
