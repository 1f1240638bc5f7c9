"""``insert_batch_registry`` against real PostgreSQL: a replay batch is one binary COPY; a
conflicting or ill-typed batch, the live consumer and a pipelined batch take ``INSERT ... ON
CONFLICT DO NOTHING``, with the same rows either way; the engine leaves the pipeline off for
COPY handlers only."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from casestream.handlers.registry import HandlerKind, HandlerRegistry
from casestream.handlers.processing import ProcessingMode
from casestream.handlers import insert_batch_registry, json_batch_registry
from casestream.replay.applier import Planned, ReplayApplier
from tests.support.databases import created_databases, require_server

COLUMNS = (("event_id", "uuid"), ("tenant_id", "text"), ("n", "bigint"),
           ("at", "timestamptz"), ("day", "date"))
DDL = ("CREATE TABLE facts (event_id uuid PRIMARY KEY, tenant_id text NOT NULL, n bigint,"
       " at timestamptz NOT NULL, day date NOT NULL)")
AT = datetime(2026, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)


class CopyRecordingCursor(psycopg.Cursor):
    """A real cursor that records the COPY statements it runs."""

    copies: list[str] = []

    def copy(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        CopyRecordingCursor.copies.append(statement.as_string(self) if hasattr(statement, "as_string")
                                          else str(statement))
        return super().copy(statement, *args, **kwargs)


@pytest.fixture(scope="module")
def dsn(pg_url: str) -> Iterator[str]:
    admin = require_server(pg_url)
    name = f"test_replay_copy_{uuid.uuid4().hex[:8]}"
    with created_databases(admin, [name]):
        yield admin.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(dsn, autocommit=True, cursor_factory=CopyRecordingCursor) as c:
        c.execute("DROP TABLE IF EXISTS facts")
        c.execute(DDL)
        CopyRecordingCursor.copies = []
        yield c


def _row(i: int, **over: Any) -> tuple[Any, ...]:
    r = {"event_id": str(uuid.UUID(int=i + 1)), "tenant_id": f"t{i % 3}", "n": i * 10, "at": AT,
         "day": date(2026, 3, 1)} | over
    return tuple(r[c] for c, _ in COLUMNS)


def _project(rows: list[tuple[Any, ...]]) -> Any:
    registry = insert_batch_registry("test.facts", "facts", COLUMNS, lambda events: rows, ["Fact"])
    return registry.handlers_for("Fact", ProcessingMode.REPLAY)[0]


def _call(conn: psycopg.Connection, handler: Any, mode: ProcessingMode) -> None:
    handler.fn(SimpleNamespace(conn=conn, mode=mode), [object()])


def _table(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT event_id::text, tenant_id, n, at, day FROM facts"
                        " ORDER BY event_id").fetchall()


def test_replay_batch_is_one_copy_with_the_values_as_given(conn: psycopg.Connection) -> None:
    rows = [_row(i) for i in range(3)] + [_row(3, event_id=uuid.UUID(int=99), n=None)]
    with conn.transaction():
        _call(conn, _project(rows), ProcessingMode.REPLAY)
    assert len(CopyRecordingCursor.copies) == 1 and "FORMAT BINARY" in CopyRecordingCursor.copies[0]
    assert _table(conn) == sorted((str(r[0]), *r[1:]) for r in rows)


def test_conflicting_batch_falls_back_to_insert_on_conflict(conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO facts VALUES (%s, 'kept', 7, %s, %s)", (_row(1)[0], AT, date(2020, 1, 1)))
    rows = [_row(0), _row(1), _row(2), _row(2)]  # an existing row, and one twice in the batch
    with conn.transaction():
        _call(conn, _project(rows), ProcessingMode.REPLAY)
        conn.execute("SELECT 1")  # the batch's transaction is still usable
    assert CopyRecordingCursor.copies  # tried, refused by the unique key
    got = {r[0]: r for r in _table(conn)}
    assert sorted(got) == sorted(str(r[0]) for r in rows[:3])
    assert got[_row(1)[0]][1:3] == ("kept", 7)  # ON CONFLICT DO NOTHING: the row stays


def test_value_without_a_binary_form_falls_back_to_insert(conn: psycopg.Connection) -> None:
    rows = [_row(0, at="2026-03-01T12:30:15.25+00:00", n="5")]  # text where COPY wants types
    with conn.transaction():
        _call(conn, _project(rows), ProcessingMode.REPLAY)
    assert _table(conn) == [(_row(0)[0], "t0", 5, AT, date(2026, 3, 1))]


@pytest.mark.parametrize("mode, pipelined", [(ProcessingMode.LIVE, False),
                                             (ProcessingMode.REPLAY, True)])
def test_live_or_pipelined_batch_is_an_insert(conn: psycopg.Connection, mode: ProcessingMode,
                                              pipelined: bool) -> None:
    handler = _project([_row(0), _row(1)])
    if pipelined:
        with conn.pipeline(), conn.transaction():
            _call(conn, handler, mode)
    else:
        with conn.transaction():
            _call(conn, handler, mode)
    assert CopyRecordingCursor.copies == []
    assert [r[0] for r in _table(conn)] == [_row(0)[0], _row(1)[0]]


def test_key_must_be_a_column() -> None:
    with pytest.raises(ValueError, match="key column.*nope"):
        insert_batch_registry("test.facts", "facts", COLUMNS, lambda e: [], ["Fact"], key=("nope",))


def test_engine_pipelines_unless_every_handler_copies() -> None:
    copying = _project([])
    plain = json_batch_registry("test.plain", "SELECT %s", lambda e: [], ["Fact"]).handlers_for(
        "Fact", ProcessingMode.REPLAY)[0]
    per_event = HandlerRegistry()
    per_event.add("Fact", lambda ctx, e: None, kind=HandlerKind.PROJECTION)
    one = per_event.handlers_for("Fact", ProcessingMode.REPLAY)[0]

    def planned(*hs: Any) -> Planned:
        return Planned(runs=[(tuple(hs), [])], changed={}, applied=0)

    assert ReplayApplier.writes_by_copy(planned(copying))
    assert not ReplayApplier.writes_by_copy(planned(copying, plain))
    assert not ReplayApplier.writes_by_copy(planned(one))
    assert not ReplayApplier.writes_by_copy(Planned(runs=[], changed={}, applied=0))
