"""The broker transport: a worker acknowledges its tasks through a full Redis without exiting."""

# mypy: disable-error-code="no-untyped-call"

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from redis.exceptions import OutOfMemoryError


@contextmanager
def full(url: str) -> Iterator[None]:
    """Redis at its memory limit with no eviction: every command inside a transaction is refused."""
    client = redis.Redis.from_url(url)
    policy = str(client.config_get("maxmemory-policy")["maxmemory-policy"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", max(1, int(client.info("memory")["used_memory"]) // 2))
    try:
        yield
    finally:
        client.config_set("maxmemory", 0)
        client.config_set("maxmemory-policy", policy)


def delivered(url: str, transport: str, name: str) -> tuple[Connection, object]:
    """A connection on ``transport`` and a message of queue ``name`` delivered on it, unacknowledged."""
    connection = Connection(url, transport=transport)
    queue = Queue(name, Exchange(name), routing_key=name)
    producer = connection.Producer()
    producer.publish({"task": "x"}, exchange=queue.exchange, routing_key=name, declare=[queue])
    message = queue(connection.default_channel).get(no_ack=False)
    assert message is not None
    return connection, message


@pytest.mark.parametrize("transport", ["workers.broker:RedisTransport", "redis"])
def test_an_acknowledgement_through_a_full_redis_is_logged_not_raised(redis_url: str, transport: str) -> None:
    """kombu's own transport raises out of the worker's loop (which then exits); Helix's leaves
    the message recorded as unacknowledged, to be delivered again, and frees its prefetch place."""
    name = f"helix-broker-{uuid.uuid4().hex[:8]}"
    connection, message = delivered(redis_url, transport, name)
    channel = connection.default_channel
    channel.basic_qos(0, 1, False)  # one message at a time, as Helix's workers take them
    assert not channel.qos.can_consume()
    try:
        with full(redis_url):
            if transport == "redis":
                with pytest.raises(OutOfMemoryError):
                    message.ack()  # type: ignore[attr-defined]
                return
            message.ack()  # type: ignore[attr-defined]
        assert channel.qos.can_consume()  # the worker may take its next message
        assert redis.Redis.from_url(redis_url).hexists("unacked", message.delivery_tag)  # type: ignore[attr-defined]
    finally:
        connection.release()
    # After the visibility timeout (0 s here) a worker gives it back to the queue: delivered again.
    with Connection(redis_url, transport=transport, transport_options={"visibility_timeout": 0}) as again:
        again.default_channel.qos.restore_visible(num=100, interval=1)
    assert redis.Redis.from_url(redis_url).llen(name) == 1
