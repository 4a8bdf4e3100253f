"""Hot reads compiled once: the ORM builds a read's SQL once per database, then each call runs
that SQL with its parameter.

Building a query is most of what a small read costs in Django: many times what its SQL takes to
run. The resume of a stream makes one such read per request, and a reconnect storm is thousands
of resumes at once, so that read is compiled here.
The SQL is still Django's (the table names, quoting and placeholders of the site's database,
chosen by its routers), and each value goes through the converters the ORM would apply (the
backend's and the field's: a SQLite datetime comes back aware, a UUID as a UUID). A query whose
compiled form does not take exactly its values as its parameters is run through the ORM each time
instead.

Inside :func:`shared_reads` (one database hop made for several requests at once: see
:func:`chat.state.db.together`), a read answers from the rows it already read for the same value,
or that were read for it ahead (:meth:`CompiledRead.remember`), instead of querying again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from django.db import connections, models, router

__all__ = ["CompiledRead", "read_ahead", "shared_reads"]

_PROBE = "helix-compiled-read-probe"

#: The SQL of a read and, per column that needs one, its position, converters and expression.
_Compiled = tuple[str, list[tuple[int, list[Callable[..., Any]], Any]]]


_thread = threading.local()


@contextlib.contextmanager
def shared_reads() -> Iterator[None]:
    """Until the block ends, reads on this thread of the same value by the same
    :class:`CompiledRead` share their rows: the requests of one hop ask one moment's database."""
    outer = getattr(_thread, "rows", None)
    _thread.rows = {} if outer is None else outer
    try:
        yield
    finally:
        _thread.rows = outer


class CompiledRead:
    """A read of ``model`` by strings: ``build(*values)`` is its ``values_list`` queryset. Each
    number of values has its own compiled SQL (an ``IN`` list of that length, say)."""

    def __init__(self, model: type[models.Model], build: Callable[..., models.QuerySet[Any, Any]]) -> None:
        self.model, self.build = model, build
        self._compiled: dict[tuple[str, int], _Compiled | None] = {}

    def rows(self, *values: str) -> list[tuple[Any, ...]]:
        """The rows of ``build(*values)``, each value as the ORM would give it."""
        alias = router.db_for_read(self.model)
        shared: dict[Any, list[tuple[Any, ...]]] | None = getattr(_thread, "rows", None)
        if shared is None:
            return self._read(alias, values)
        key = (self, alias, values)
        rows = shared.get(key)
        if rows is None:
            rows = shared[key] = self._read(alias, values)
        return list(rows)

    def remember(self, rows: list[tuple[Any, ...]], *values: str) -> None:
        """Inside :func:`shared_reads`: ``rows`` are what ``rows(*values)`` reads (read ahead,
        with the values of other reads, in one query); outside, nothing."""
        shared = getattr(_thread, "rows", None)
        if shared is not None:
            shared[(self, router.db_for_read(self.model), values)] = rows

    def _read(self, alias: str, values: tuple[str, ...]) -> list[tuple[Any, ...]]:
        form = (alias, len(values))
        if form not in self._compiled:
            self._compiled[form] = self._compile(alias, len(values))
        compiled = self._compiled[form]
        if compiled is None:
            return [tuple(row) for row in self.build(*values).using(alias)]
        sql, converters = compiled
        connection = connections[alias]
        with connection.cursor() as cursor:
            cursor.execute(sql, list(values))
            fetched = cursor.fetchall()
        if not converters:
            return [tuple(row) for row in fetched]
        rows = []
        for fetched_row in fetched:
            row = list(fetched_row)
            for position, functions, expression in converters:
                item = row[position]
                for function in functions:
                    item = function(item, expression, connection)
                row[position] = item
            rows.append(tuple(row))
        return rows

    def _compile(self, alias: str, count: int) -> _Compiled | None:
        probes = tuple(f"{_PROBE}-{n}" for n in range(count))
        try:
            compiler: Any = self.build(*probes).query.get_compiler(using=alias)
            sql, params = compiler.as_sql()
        except Exception:  # a column the probe is no value of (a UUID, a number): the ORM each time
            return None
        if tuple(params) != probes:
            return None
        columns = [selected[0] for selected in compiler.select[: compiler.col_count]]
        if compiler.has_composite_fields(columns):
            return None
        # The backend's and the fields' converters, as the ORM applies them to every row it reads.
        converters = [
            (position, functions, column) for position, (functions, column) in compiler.get_converters(columns).items()
        ]
        return sql, converters


def read_ahead(
    one: CompiledRead, many: CompiledRead, keys: Iterable[Any], *, per_query: int, most: int, exact: bool = True
) -> None:
    """``one.rows(key)`` for every key of ``keys``, read with ``many`` (whose rows each begin with
    the key they are for) in one query per ``per_query`` keys, and remembered for the reads of this
    hop (:func:`shared_reads`); at most ``most`` rows a key, as ``one`` reads them. Each query's
    keys are padded with its last to a power of two, so that a few compiled forms serve any hop.

    A row is remembered only for the key it came back with. ``exact``: the database compares the
    keys as Python does, so a key no row came back for has none; otherwise (a column of another
    type than the keys', a case-insensitive collation) that key is left to its own read, which
    asks the database as ``one`` would."""
    distinct = list(dict.fromkeys(keys))
    for start in range(0, len(distinct), per_query):
        chunk = distinct[start : start + per_query]
        padded = chunk + chunk[-1:] * ((1 << (len(chunk) - 1).bit_length()) - len(chunk))
        found: dict[Any, list[tuple[Any, ...]]] = {key: [] for key in chunk}
        for key, *row in many.rows(*padded):
            rows = found.get(key)
            if rows is not None and len(rows) < most:
                rows.append(tuple(row))
        for key, rows in found.items():
            if rows or exact:
                one.remember(rows, key)
