"""Queries compiled once per process: for a query the worker runs at every pickup, Django's
building and compiling of the queryset (~3 ms of CPU for the pickup's candidates) costs
far more than running its SQL (~0.2 ms). The queryset stays the one definition of the query
(its QuerySet methods hold the rules); only its SQL is kept.

`compiled_rows(key, build, **values)` builds `build(**values)` with stand-ins for `values` the first
time (per database vendor and `key`), keeps its SQL and parameters, and from then on puts the
real values where the stand-ins were. A value may be a string or an aware datetime; what
changes the SQL's shape (e.g. the number of items of an IN list) belongs in `key`.
`compiled_models(key, build, **values)` runs such a query and returns its model instances, with
what it `select_related` (as iterating the queryset would; `raw()` cannot follow relations);
`compiled_update(key, build, changes, **values)` updates the rows it selects;
`update_row(model, pk, **changes)` one row by its primary key (a status move, a workspace's
last activity: ~0.05 ms of CPU where building the queryset's UPDATE took ~0.3).
`insert(objs)` is `bulk_create(objs)` for new rows whose generated ids nobody reads back (trace
rows, the outbox's events, log entries: a step's finish writes each), its SQL built once per
model, columns and row count (~0.03 ms of CPU for three rows, where bulk_create took ~0.19).
"""

import threading
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import connections
from django.db.models import AutoField, Model, QuerySet
from django.db.models.query import get_related_populators

_STANDIN_TIME = datetime(1901, 2, 3, 4, 5, 6, 789012, tzinfo=UTC)
_lock = threading.Lock()
_compiled: dict[tuple, "_Entry"] = {}


def _standin(name: str, value):
    if isinstance(value, datetime):
        return _STANDIN_TIME
    if isinstance(value, str):
        return f"\x00compiled-query:{name}\x00"
    raise TypeError(f"a compiled query's value must be a string or a datetime: {name}")


def _as_param(connection, value):
    """How the compiler writes a value of this kind as a parameter."""
    if isinstance(value, datetime):
        return connection.ops.adapt_datetimefield_value(value)
    return value


def _is_in(param, by_param: dict) -> bool:
    try:
        return param in by_param
    except TypeError:  # (unhashable: never a stand-in)
        return False


class _Entry:
    """A query compiled once: its SQL and parameters, where the values go, and (for
    compiled_models) how its rows become model instances."""

    def __init__(self, queryset: QuerySet, standins: dict):
        connection = connections[queryset.db]
        self.compiler = queryset.query.get_compiler(using=queryset.db)
        sql, params = self.compiler.as_sql()
        self.sql, self.params = sql, list(params)
        by_param = {_as_param(connection, standin): name for name, standin in standins.items()}
        self.places = {
            index: by_param[param]
            for index, param in enumerate(self.params)
            if _is_in(param, by_param)
        }
        lost = set(standins) - set(self.places.values())
        if lost:  # a value the SQL does not take as it was given: no stand-in to replace
            raise ValueError(f"a compiled query cannot take {sorted(lost)}")
        self._rows_to_models = None

    def bind(self, connection, values: dict) -> list:
        real = {name: _as_param(connection, value) for name, value in values.items()}
        places = self.places
        return [real[places[i]] if i in places else p for i, p in enumerate(self.params)]

    def models(self, rows: list, db: str) -> list:
        """As Django's ModelIterable makes them (the select's fields, then select_related)."""
        compiler = self.compiler
        if self._rows_to_models is None:
            select, klass_info = compiler.select, compiler.klass_info
            fields = klass_info["select_fields"]
            start, end = fields[0], fields[-1] + 1
            init_list = [column[0].target.attname for column in select[start:end]]
            populators = get_related_populators(klass_info, select, db)
            # The columns' converters (results_iter works them out for every query: a third
            # of the CPU of the finish's locking read of a task and its workspace).
            columns = [column[0] for column in select[: compiler.col_count]]
            if compiler.has_composite_fields(columns):
                raise ValueError("a compiled query cannot select composite fields")
            converters = compiler.get_converters(columns)
            model = klass_info["model"]
            self._rows_to_models = (model, init_list, start, end, populators, converters)
        model, init_list, start, end, populators, converters = self._rows_to_models
        found = []
        for row in compiler.apply_converters(rows, converters) if converters else rows:
            instance = model.from_db(db, init_list, row[start:end])
            for populator in populators:
                populator.populate(row, instance)
            found.append(instance)
        return found


def _entry(key: tuple, build: Callable[..., QuerySet], values: dict) -> _Entry:
    connection = connections["default"]
    cache_key = (connection.vendor, *key)
    entry = _compiled.get(cache_key)
    if entry is None:
        standins = {name: _standin(name, value) for name, value in values.items()}
        entry = _Entry(build(**standins), standins)
        with _lock:
            _compiled[cache_key] = entry
    return entry


def compiled_rows(key: tuple, build: Callable[..., QuerySet], **values) -> list[tuple]:
    """The rows of `build(**values)`'s query (a `values_list()` or `values()` one), compiled
    once for `key`, as the database gives them (no field converters: an SQLite datetime is a
    string)."""
    entry = _entry(key, build, values)
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute(entry.sql, entry.bind(connection, values))
        return cursor.fetchall()


def compiled_models(key: tuple, build: Callable[..., QuerySet], **values) -> list:
    """The model instances `build(**values)` would give (no annotations, no prefetches), its
    query compiled once for `key`. A locking query (select_for_update) runs in the caller's
    transaction, as the queryset would."""
    entry = _entry(key, build, values)
    connection = connections["default"]
    if entry.compiler.query.select_for_update and connection.get_autocommit():
        raise RuntimeError("a locking query runs inside a transaction")
    with connection.cursor() as cursor:
        cursor.execute(entry.sql, entry.bind(connection, values))
        rows = cursor.fetchall()
    return entry.models(rows, "default")


def compiled_update(key: tuple, build: Callable[..., QuerySet], changes: dict, **values) -> int:
    """`build(**values).update(**changes)` in one UPDATE whose condition is compiled once for
    `key` (`WHERE id IN (<its query of the ids>)`): how many rows it changed."""
    entry = _entry(key, lambda **standins: build(**standins).values("id"), values)
    model = entry.compiler.query.model
    connection = connections["default"]
    name = connection.ops.quote_name
    columns, params = [], []
    for field_name, value in changes.items():
        field = model._meta.get_field(field_name)
        columns.append(f"{name(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {name(model._meta.db_table)} SET {', '.join(columns)} "
            f"WHERE {name('id')} IN ({entry.sql})",
            [*params, *entry.bind(connection, values)],
        )
        return cursor.rowcount


def update_row(model: type[Model], pk, **changes) -> int:
    """`model.objects.filter(pk=pk).update(**changes)` for plain values (no expressions), its
    SQL built once per model and columns: how many rows it changed (0 or 1)."""
    connection = connections["default"]
    meta = model._meta
    fields = [meta.get_field(name) for name in changes]
    key = (connection.vendor, meta.label, *changes)
    sql = _updates.get(key)
    if sql is None:
        name = connection.ops.quote_name
        columns = ", ".join(f"{name(field.column)} = %s" for field in fields)
        sql = f"UPDATE {name(meta.db_table)} SET {columns} WHERE {name(meta.pk.column)} = %s"
        with _lock:
            _updates[key] = sql
    params = []
    for field, value in zip(fields, changes.values(), strict=True):
        if hasattr(value, "resolve_expression"):
            raise TypeError(f"update_row takes plain values, not expressions: {field.name}")
        params.append(field.get_db_prep_save(value, connection))
    params.append(meta.pk.get_db_prep_value(pk, connection))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


_updates: dict[tuple, str] = {}
_inserts: dict[tuple, str] = {}


def insert(objs: list[Model]) -> None:
    """INSERT new instances of one model as bulk_create would (their fields' own `pre_save`
    and `get_db_prep_save`, in batches the database takes), without reading back ids the
    database generates: an auto id left empty stays None. No signals, as bulk_create."""
    if not objs:
        return
    connection = connections["default"]
    meta = type(objs[0])._meta
    fields = [f for f in meta.concrete_fields if not f.generated]
    if any(obj.pk is None for obj in objs):
        fields = [f for f in fields if not isinstance(f, AutoField)]
    size = max(1, connection.ops.bulk_batch_size(fields, objs) or len(objs))
    with connection.cursor() as cursor:
        for start in range(0, len(objs), size):
            batch = objs[start : start + size]
            params = [
                field.get_db_prep_save(field.pre_save(obj, True), connection)
                for obj in batch
                for field in fields
            ]
            cursor.execute(_insert_sql(connection, meta, fields, len(batch)), params)
    for obj in objs:
        obj._state.adding, obj._state.db = False, "default"


def _insert_sql(connection, meta, fields: list, rows: int) -> str:
    key = (connection.vendor, meta.label, tuple(f.column for f in fields), rows)
    sql = _inserts.get(key)
    if sql is None:
        name = connection.ops.quote_name
        row = f"({', '.join(['%s'] * len(fields))})"
        sql = (
            f"INSERT INTO {name(meta.db_table)} ({', '.join(name(f.column) for f in fields)}) "
            f"VALUES {', '.join([row] * rows)}"
        )
        with _lock:
            _inserts[key] = sql
    return sql
