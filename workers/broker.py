# mypy: disable-error-code="no-untyped-call"
"""Celery's Redis broker transport, made to keep a worker alive while Redis is full.

kombu's Redis transport keeps its own record of every message it hands to a worker (an
"unacked" hash and index), written when the message is delivered and removed when the task
acknowledges it, each in a MULTI transaction. A Redis at its ``maxmemory`` with no eviction
refuses every command queued inside a transaction, deletions included, and kombu lets that
refusal out of the worker's consumer loop: the worker exits ("Unrecoverable error:
OutOfMemoryError") with every run it holds.

This transport logs those refusals and goes on. A message whose acknowledgement Redis refused
stays in the record, and a worker gives it back to the queue after the visibility timeout: a
Helix task delivered again changes nothing (a finished run is not claimed twice).
A message Redis refused to record is run all the same; were its worker to die during it, the
reaper would find the run (its lease expires, or it is still queued) and send it again.

Use it with ``CELERY_BROKER_TRANSPORT = "workers.broker:RedisTransport"`` beside the ``redis://``
broker URL. A transport named this way does not take TLS from a ``rediss://`` scheme: with TLS,
set ``CELERY_BROKER_USE_SSL`` as well.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from redis.exceptions import ExecAbortError, OutOfMemoryError

__all__ = ["RedisTransport"]

logger = logging.getLogger(__name__)

#: What Redis answers a transaction while it is full (the first queued command's refusal, or
#: the EXEC that discards the transaction).
REDIS_FULL = (OutOfMemoryError, ExecAbortError)


class RedisFullQoS(kombu_redis.QoS):
    """kombu's acknowledgement emulation, with Redis's refusals while full logged, not raised."""

    def append(self, message: Any, delivery_tag: str) -> None:
        try:
            super().append(message, delivery_tag)
        except REDIS_FULL as exc:
            logger.warning("Redis is full: message %s delivered without its unacked record (%s)", delivery_tag, exc)
            virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        try:
            self._remove_from_indices(delivery_tag).execute()
        except REDIS_FULL as exc:
            logger.warning(
                "Redis is full: message %s stays unacknowledged, to be delivered again (%s)", delivery_tag, exc
            )
        virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue)
        except REDIS_FULL as exc:
            logger.warning(
                "Redis is full: message %s stays unacknowledged, to be delivered again (%s)", delivery_tag, exc
            )
            virtual.QoS.ack(self, delivery_tag)


class RedisChannel(kombu_redis.Channel):
    QoS = RedisFullQoS


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`RedisFullQoS`."""

    Channel = RedisChannel
