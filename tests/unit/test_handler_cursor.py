"""``HandlerContext.cursor``: the plain and batch handlers of one dispatcher share one cursor
per connection; a coroutine handler's calls, which interleave, get one each."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from casestream.consumer.batch_dispatch import Dispatcher
from casestream.consumer.batch_model import Item
from casestream.handlers.guard import FirstSeenPolicy
from casestream.handlers.registry import DiscardingOutbox, HandlerContext, HandlerKind, HandlerRegistry
from casestream.handlers.processing import ProcessingMode
from casestream.consumer.records import Record
from casestream.testing.consumer import make_event
from tests.support.events import case_returned


class FakeCursor:
    def __init__(self, conn: FakeConnection) -> None:
        self.conn = conn
        self.closed = False


class FakeConnection:
    """Stands in for a psycopg connection: counts the cursors made on it."""

    def __init__(self) -> None:
        self.made: list[FakeCursor] = []
        self.cursor_factory: Any = None  # not a psycopg connection

    def cursor(self) -> FakeCursor:
        self.made.append(FakeCursor(self))
        return self.made[-1]


def _dispatcher(registry: HandlerRegistry) -> Dispatcher:
    return Dispatcher(consumer="c", handlers=registry, mode=ProcessingMode.LIVE,
                      outbox=DiscardingOutbox(), first_seen=FirstSeenPolicy.STRICT,
                      strict_types=False, redrive_topic="c.redrive")


def _item(aggregate_id: str, version: int) -> Item:
    env = case_returned(aggregate_id, version)
    return Item(Record("t", 0, version, aggregate_id.encode(), b""), env)


def test_plain_handlers_share_one_cursor_per_connection_over_events() -> None:
    seen: list[tuple[str, Any]] = []
    registry = HandlerRegistry()
    registry.add("CaseReturned", lambda ctx, e: seen.append(("first", ctx.cursor)),
                 kind=HandlerKind.PROJECTION)
    registry.add("CaseReturned", lambda ctx, e: seen.append(("second", ctx.cursor)),
                 kind=HandlerKind.PROJECTION)
    dispatch = _dispatcher(registry)
    conn, other = FakeConnection(), FakeConnection()
    for v in (1, 2):
        it = _item("A", v)
        dispatch.run_item(conn, it)
    dispatch.run_item(other, _item("B", 1))
    assert len(conn.made) == 1 and len(other.made) == 1
    assert [c for _, c in seen] == [conn.made[0]] * 4 + [other.made[0]] * 2
    assert all(c.conn is conn for _, c in seen[:4])


def test_a_closed_shared_cursor_is_replaced() -> None:
    registry = HandlerRegistry()
    registry.add("CaseReturned", lambda ctx, e: ctx.cursor, kind=HandlerKind.PROJECTION)
    dispatch = _dispatcher(registry)
    conn = FakeConnection()
    dispatch.run_item(conn, _item("A", 1))
    conn.made[0].closed = True  # e.g. a handler's ``with ctx.cursor as cur:``
    dispatch.run_item(conn, _item("A", 2))
    assert len(conn.made) == 2
    assert dispatch.shared_cursor(conn) is conn.made[1]


def test_a_batch_handler_gets_the_shared_cursor() -> None:
    got: list[Any] = []
    registry = HandlerRegistry()

    @registry.on_batch("CaseReturned", kind=HandlerKind.PROJECTION)
    def many(ctx: HandlerContext, events: Any) -> None:
        got.append(ctx.cursor)

    dispatch = _dispatcher(registry)
    conn = FakeConnection()
    items = [_item("A", 1), _item("B", 1)]
    for run, hs in dispatch.runs(items):
        dispatch.run_batch(conn, run, hs)
    assert got == [dispatch.shared_cursor(conn)] and len(conn.made) == 1


def test_coroutine_handler_calls_get_a_cursor_each() -> None:
    got: list[Any] = []
    registry = HandlerRegistry()

    @registry.on("CaseReturned", kind=HandlerKind.PROJECTION)
    async def handle(ctx: HandlerContext, e: Any) -> None:
        cur = ctx.cursor
        await asyncio.sleep(0)
        assert ctx.cursor is cur  # stable within the call
        got.append(cur)

    dispatch = _dispatcher(registry)
    conn = FakeConnection()
    try:
        dispatch.run(dispatch.run_handlers_async(conn, _item("A", 1).rec, _item("A", 1).env))
        dispatch.run(dispatch.run_handlers_async(conn, _item("B", 1).rec, _item("B", 1).env))
    finally:
        dispatch.close()
    assert got == conn.made and len(got) == 2 and got[0] is not got[1]


def test_a_context_without_a_shared_cursor_makes_one_on_first_use() -> None:
    conn = FakeConnection()
    ctx = HandlerContext(conn=conn, outbox=DiscardingOutbox(), mode=ProcessingMode.LIVE,
                         consumer="c")
    assert conn.made == []  # nothing made until a handler asks
    assert ctx.cursor is ctx.cursor is conn.made[0]
    assert "_cursor=" not in repr(ctx)


def test_replay_handlers_share_one_cursor() -> None:
    from casestream.replay.applier import ReplayApplier
    from casestream.replay.progress import Progress

    got: list[Any] = []
    registry = HandlerRegistry()
    registry.add("CaseReturned", lambda ctx, e: got.append(ctx.cursor), kind=HandlerKind.PROJECTION)
    registry.add_batch("CaseOpened", lambda ctx, evs: got.append(ctx.cursor),
                       kind=HandlerKind.PROJECTION)
    applier = ReplayApplier(consumer="replay:x", handlers=registry)
    conn = FakeConnection()
    items = [(("t", 0, v), make_event("A", v, event_type="CaseReturned" if v % 2 else "CaseOpened"))
             for v in (1, 2, 3, 4)]
    applier.apply(conn, items[:2], Progress())
    applier.apply(conn, items[2:], Progress())
    assert len(got) == 4 and got == conn.made * 4


def test_a_connection_with_its_own_cursor_factory_gets_a_new_cursor_each_time() -> None:
    from casestream.handlers.cursors import SharedCursor

    conn = FakeConnection()
    conn.cursor_factory = object  # e.g. psycopg.ClientCursor: not made pipeline-safe here
    shared = SharedCursor()
    assert shared(conn) is not shared(conn) and len(conn.made) == 2
