"""What a rebuildable projection declares, and the helpers for its tables (driver module: psycopg).

A service makes a projection rebuildable by exposing a :class:`ProjectionSpec` in one of its
modules and registering it under the entry point group ``casestream.projections``
(``"<name>" = "module:PROJECTION"`` in its ``pyproject.toml``;
:func:`casestream.service.discovery.projection_refs`). The spec
names the topics, the database, the live tables and the consumer that keeps them up to date,
and gives three functions that take *table names* (live or shadow):

- ``create_tables(conn, names)`` — create the tables ``names`` (live name → actual name) empty,
  with the projection's current DDL (so a changed handler's new column exists in the shadow);
  :func:`create_table_unless_exists` runs a table's DDL unless the table exists;
- ``registry(names, event_types)`` — a :class:`~casestream.handlers.HandlerRegistry` whose
  handlers write into ``names``; only ``PROJECTION`` handlers run in a replay;
- ``freshness(conn, names)`` — when the tables last changed (None if empty);
  :func:`max_applied_at` makes one for a table with an ``applied_at`` column.

Handover rule: every projection write must be idempotent per event (``ON CONFLICT
(event_id) DO NOTHING`` or an aggregate-version-guarded upsert), because after the swap the
live consumer re-reads the events between its own position and the rebuilt tables' end and
must change nothing for them.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg import pq, sql
from psycopg.types.uuid import UUIDBinaryDumper

from casestream.errors import ConfigError
from casestream.handlers.processing import ProcessingMode
from casestream.handlers.registry import HandlerKind, HandlerRegistry

TableNames = Mapping[str, str]


class ProjectionConfigError(ConfigError):
    """A projection's declaration does not fit its tables (e.g. a freshness table that is not
    one of the spec's tables)."""

# Writing a projection's batch statements: read their one JSON parameter as ``jsonb``; on
# ``json`` every ``r->>k`` re-parses the row's text (~40-55 vs ~28 µs per row,
# bench/README.md "Replay").

SHADOW_SUFFIX = "_shadow"

#: Attribute set (True) on the batch functions of :func:`insert_batch_registry`: their REPLAY
#: writes are a ``COPY``, which libpq refuses in pipeline mode, so the replay engine runs a
#: batch whose handlers all carry it outside a pipeline (``Replayer._write``).
WRITES_BY_COPY = "casestream_writes_by_copy"

log = logging.getLogger("casestream.replay")  # its COPY fallbacks happen in replays


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectionSpec:
    """A rebuildable read model.

    Attributes:
        name: projection name, e.g. ``"billing.ledger"``.
        description: one line for ``--list``.
        topics: topics its handlers read.
        live_consumer: consumer name (= Kafka group id) maintaining the live tables.
        tables: live table names, in swap order.
        dsn: settings-based database URL of the service owning the tables (no arguments).
        create_tables: ``fn(conn, names)`` creating ``names.values()`` empty.
        registry: ``fn(names, event_types) -> HandlerRegistry`` writing into ``names``.
        freshness: ``fn(conn, names) -> datetime | None``.
    """

    name: str
    description: str
    topics: tuple[str, ...]
    live_consumer: str
    tables: tuple[str, ...]
    dsn: Callable[[], str]
    create_tables: Callable[[Any, TableNames], None]
    registry: Callable[[TableNames, Iterable[str]], HandlerRegistry]
    freshness: Callable[[Any, TableNames], datetime | None]

    def live_names(self) -> dict[str, str]:
        """live name -> live name."""
        return {t: t for t in self.tables}

    def shadow_names(self) -> dict[str, str]:
        """live name -> shadow name (``<table>_shadow``)."""
        return {t: t + SHADOW_SUFFIX for t in self.tables}


def create_table_unless_exists(conn: Any, table: str, *statements: str) -> bool:
    """Run ``statements`` (DDL with the placeholder ``{t}`` for the table, e.g. ``CREATE
    TABLE {t} (...)`` then ``CREATE INDEX ON {t} (...)``) with ``{t}`` the quoted identifier
    ``table``, unless ``table`` exists (``to_regclass`` of the quoted name, on the connection's
    search path).
    True if it ran them. For a projection's ``create_tables(conn, names)`` with
    ``table=names[<live name>]``: an existing table is left alone, so a start or a replay
    takes no lock on it (bring an older table up to date with a service migration).

    Raises:
        psycopg.Error: a statement failed (the caller's transaction is then aborted).
    """
    if conn.execute("SELECT to_regclass(quote_ident(%s))", (table,)).fetchone()[0] is not None:
        return False
    for statement in statements:
        conn.execute(sql.SQL(statement).format(t=sql.Identifier(table)))
    return True


def max_applied_at(table: str, column: str = "applied_at") -> Callable[[Any, TableNames], datetime | None]:
    """A ``freshness`` function for :class:`ProjectionSpec`: ``SELECT max(<column>) FROM
    names[table]`` (both quoted as identifiers), so it reads the live or the shadow table.

    ``column`` holds when a row was last written (``timestamptz NOT NULL DEFAULT now()``,
    set to ``now()`` again by each upsert); the function returns that time (timezone-aware
    ``datetime``), or None when the table is empty. Use as
    ``ProjectionSpec(..., tables=("billing_ledger",), freshness=max_applied_at("billing_ledger"))``.

    Raises (when called):
        ProjectionConfigError: ``names`` has no entry for ``table`` (not one of the spec's tables).
        psycopg.errors.UndefinedTable / UndefinedColumn: the table or the column does not exist.
    """

    def freshness(conn: Any, names: TableNames) -> datetime | None:
        actual = names.get(table)
        if actual is None:
            raise ProjectionConfigError(f"freshness of table {table!r}: not among the projection's "
                                    f"tables ({', '.join(names) or 'none'})")
        row = conn.execute(sql.SQL("SELECT max({}) FROM {}").format(
            sql.Identifier(column), sql.Identifier(actual))).fetchone()
        return row[0] if row else None

    freshness.__qualname__ = f"max_applied_at({table!r})"
    return freshness


def json_batch_registry(name: str, statement: Any, rows_of: Callable[[Sequence[Any]], list[Any]],
                        event_types: Iterable[str]) -> HandlerRegistry:
    """PROJECTION batch handlers, one per type in ``event_types``, that run ``statement``
    (SQL with one parameter) once per batch of events with ``rows_of(events)`` as one JSON
    array (dates and datetimes in ISO 8601); a batch without rows runs nothing.

    One parameter keeps a batch one round trip (``json.dumps`` is C; psycopg's array
    adaptation is Python). ``name`` is the handler's qualified name in logs and errors.
    """

    def project(ctx: Any, events: Sequence[Any]) -> None:
        rows = rows_of(events)
        if rows:
            _execute_json(ctx.conn, statement, rows)

    return _batch_projections(name, project, event_types)


def _execute_json(conn: Any, statement: Any, rows: list[Any]) -> None:
    conn.execute(statement, (json.dumps(rows, default=_iso),))


def _batch_projections(name: str, project: Callable[[Any, Sequence[Any]], None],
                       event_types: Iterable[str]) -> HandlerRegistry:
    """``project`` as the PROJECTION batch handler of every type in ``event_types``, named ``name``."""
    project.__qualname__ = name
    registry = HandlerRegistry()
    for event_type in event_types:
        registry.add_batch(event_type, project, kind=HandlerKind.PROJECTION)
    return registry


def insert_batch_registry(name: str, table: str, columns: Sequence[tuple[str, str]],
                          rows_of: Callable[[Sequence[Any]], list[Sequence[Any]]],
                          event_types: Iterable[str], *,
                          key: Sequence[str] = ("event_id",)) -> HandlerRegistry:
    """PROJECTION batch handlers, one per type in ``event_types``, inserting ``rows_of(events)``
    into the insert-only table ``table`` (its actual name: ``names[<live name>]``), a row per
    tuple in ``columns`` order, rows already there (by the unique ``key`` columns) left alone.

    ``columns``: ``(column, PostgreSQL type)`` pairs, e.g. ``("event_id", "uuid")``,
    ``("occurred_at", "timestamptz")``; a row's values are ``str``, ``int``, ``float``, ``bool``,
    ``None``, ``uuid.UUID`` (or its text), ``date``, timezone-aware ``datetime``.

    How a batch is written:

    - in a replay (``ProcessingMode.REPLAY``, connection not in pipeline mode): one binary
      ``COPY <table> (<columns>) FROM STDIN`` inside a savepoint. If the table already holds a
      row of the batch (``unique_violation``: a merge replay, an event id twice in history) or
      a value does not fit its column's binary form, the savepoint is rolled back and the batch
      takes the statement below, so the rows written are the same either way;
    - otherwise (the live consumer, or a pipelined batch): one ``INSERT INTO <table> ...
      SELECT ... FROM jsonb_array_elements(%s::jsonb) ... ON CONFLICT (<key>) DO NOTHING``,
      rows as one JSON array (as :func:`json_batch_registry`).

    Why COPY: PostgreSQL inserts a COPY row without building and reading a ``jsonb`` array
    and without parsing text into timestamps; the client dumps values in C instead of
    ``json.dumps``. Both statements are idempotent per row (the handover rule of this
    module) because ``key`` is unique: the ``COPY`` refuses a duplicate, the fallback skips it.

    Raises:
        ValueError: ``columns`` or ``key`` empty, or a ``key`` column not among ``columns``.
    """
    if not columns or not key:
        raise ValueError(f"{name}: columns and key must not be empty")
    names = [c for c, _ in columns]
    missing = [k for k in key if k not in names]
    if missing:
        raise ValueError(f"{name}: key column(s) {', '.join(missing)} not among the columns")
    types = [t for _, t in columns]
    target = sql.Identifier(table)
    column_list = sql.SQL(", ").join(map(sql.Identifier, names))
    values = sql.SQL(", ").join(
        sql.SQL("r->>{}").format(sql.Literal(i)) if t == "text"
        else sql.SQL("(r->>{})::{}").format(sql.Literal(i), sql.SQL(t))
        for i, t in enumerate(types))
    insert = sql.SQL("INSERT INTO {t} ({c}) SELECT {v} FROM jsonb_array_elements(%s::jsonb) r"
                     " ON CONFLICT ({k}) DO NOTHING").format(
        t=target, c=column_list, v=values, k=sql.SQL(", ").join(map(sql.Identifier, key)))
    copy = sql.SQL("COPY {t} ({c}) FROM STDIN (FORMAT BINARY)").format(t=target, c=column_list)

    def project(ctx: Any, events: Sequence[Any]) -> None:
        rows = rows_of(events)
        if not rows:
            return
        conn = ctx.conn
        if (ctx.mode is ProcessingMode.REPLAY and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF
                and _copy_rows(conn, copy, types, rows, table)):
            return
        _execute_json(conn, insert, rows)

    setattr(project, WRITES_BY_COPY, True)
    return _batch_projections(name, project, event_types)


class _UUIDOrTextBinaryDumper(UUIDBinaryDumper):
    """Binary ``uuid`` from a ``uuid.UUID`` or its text (envelopes carry ids as text)."""

    def dump(self, obj: Any) -> bytes:
        return (obj if isinstance(obj, uuid.UUID) else uuid.UUID(obj)).bytes


_DUMP_ERRORS = (TypeError, ValueError, OverflowError, AttributeError, psycopg.DataError,
                psycopg.ProgrammingError)


def _copy_rows(conn: Any, statement: Any, types: list[str], rows: list[Sequence[Any]],
               table: str) -> bool:
    """COPY ``rows`` in a savepoint; False (savepoint rolled back) if PostgreSQL refused a
    duplicate key or a value did not dump as its column's type."""
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.adapters.register_dumper(None, _UUIDOrTextBinaryDumper)
            with cur.copy(statement) as copy:
                copy.set_types(types)
                write = copy.write_row
                for row in rows:
                    write(row)
        return True
    except psycopg.errors.UniqueViolation:
        log.debug("COPY into %s met an existing row; batch written by INSERT ... ON CONFLICT", table)
        return False
    except _DUMP_ERRORS as e:
        log.debug("COPY into %s: a value does not fit its column (%s); batch written by INSERT",
                  table, e)
        return False


def _iso(value: Any) -> str:
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")

