"""The store's own RESP packing: byte for byte what redis-py sends for the same commands."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection

from streams.backends.redis_wire import pack

_arguments = st.one_of(st.text(), st.binary(), st.integers(min_value=-(2**63), max_value=2**63 - 1))
_names = st.sampled_from(["MULTI", "HMGET", "XRANGE", "EXEC"])
_commands = st.lists(st.tuples(_names, st.lists(_arguments)).map(lambda c: (c[0], *c[1])))


@given(commands=_commands)
def test_commands_are_packed_as_redis_py_packs_them(commands: list[tuple[Any, ...]]) -> None:
    assert pack(commands) == b"".join(Connection().pack_commands(commands))


def test_an_argument_redis_cannot_take_is_refused() -> None:
    with pytest.raises(TypeError):
        pack([("SET", "k", 1.5)])
