"""Hot reads compiled once: the ORM builds a read's SQL once per database, then each call runs
that SQL with its parameter.

Building a query is most of what a small read costs in Django: on a slow machine 0.65-1 ms for
a one-row lookup whose SQL runs in 36 µs. The resume of a stream makes one such read per
request, and a reconnect storm is thousands of resumes at once, so that read is compiled here.
The SQL is still Django's (the table names, quoting and placeholders of the site's database,
chosen by its routers), and each value comes back through its field's ``to_python``, which is
all the plain columns read this way need. A query whose compiled form does not take exactly
the one parameter is run through the ORM each time instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections, models, router

__all__ = ["CompiledRead"]

_PROBE = "helix-compiled-read-probe"


class CompiledRead:
    """A read of ``model`` by one string: ``build(value)`` is its ``values_list`` queryset and
    ``fields()`` the model fields of its columns, in order."""

    def __init__(
        self,
        model: type[models.Model],
        build: Callable[[str], models.QuerySet[Any, Any]],
        fields: Callable[[], Sequence[models.Field[Any, Any]]],
    ) -> None:
        self.model, self.build, self.fields = model, build, fields
        self._sql: dict[str, str | None] = {}

    def rows(self, value: str) -> list[tuple[Any, ...]]:
        alias = router.db_for_read(self.model)
        if alias not in self._sql:
            sql, params = self.build(_PROBE).query.get_compiler(using=alias).as_sql()
            self._sql[alias] = sql if tuple(params) == (_PROBE,) else None
        sql = self._sql[alias]
        if sql is None:
            return [tuple(row) for row in self.build(value).using(alias)]
        with connections[alias].cursor() as cursor:
            cursor.execute(sql, [value])
            fetched = cursor.fetchall()
        fields = self.fields()
        return [
            tuple(None if item is None else field.to_python(item) for field, item in zip(fields, row, strict=True))
            for row in fetched
        ]
