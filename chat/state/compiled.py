"""Hot reads compiled once: the ORM builds a read's SQL once per database, then each call runs
that SQL with its parameter.

Building a query is most of what a small read costs in Django: on a slow machine 0.65-1 ms for
a one-row lookup whose SQL runs in 36 µs. The resume of a stream makes one such read per
request, and a reconnect storm is thousands of resumes at once, so that read is compiled here.
The SQL is still Django's (the table names, quoting and placeholders of the site's database,
chosen by its routers), and each value goes through the converters the ORM would apply (the
backend's and the field's: a SQLite datetime comes back aware, a UUID as a UUID). A query whose
compiled form does not take exactly the one parameter is run through the ORM each time instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connections, models, router

__all__ = ["CompiledRead"]

_PROBE = "helix-compiled-read-probe"

#: The SQL of a read and, per column that needs one, its position, converters and expression.
_Compiled = tuple[str, list[tuple[int, list[Callable[..., Any]], Any]]]


class CompiledRead:
    """A read of ``model`` by one string: ``build(value)`` is its ``values_list`` queryset."""

    def __init__(self, model: type[models.Model], build: Callable[[str], models.QuerySet[Any, Any]]) -> None:
        self.model, self.build = model, build
        self._compiled: dict[str, _Compiled | None] = {}

    def rows(self, value: str) -> list[tuple[Any, ...]]:
        """The rows of ``build(value)``, each value as the ORM would give it."""
        alias = router.db_for_read(self.model)
        if alias not in self._compiled:
            self._compiled[alias] = self._compile(alias)
        compiled = self._compiled[alias]
        if compiled is None:
            return [tuple(row) for row in self.build(value).using(alias)]
        sql, converters = compiled
        connection = connections[alias]
        with connection.cursor() as cursor:
            cursor.execute(sql, [value])
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

    def _compile(self, alias: str) -> _Compiled | None:
        try:
            compiler: Any = self.build(_PROBE).query.get_compiler(using=alias)
            sql, params = compiler.as_sql()
        except Exception:  # a column the probe is no value of (a UUID, a number): the ORM each time
            return None
        if tuple(params) != (_PROBE,):
            return None
        columns = [selected[0] for selected in compiler.select[: compiler.col_count]]
        if compiler.has_composite_fields(columns):
            return None
        # The backend's and the fields' converters, as the ORM applies them to every row it reads.
        converters = [
            (position, functions, column) for position, (functions, column) in compiler.get_converters(columns).items()
        ]
        return sql, converters
