"""The cursor that handlers share (``HandlerContext.cursor``). Driver module (psycopg).

psycopg makes a cursor per ``Connection.execute`` call; one cursor reused by the handlers of a
batch saves that (~20 µs of client CPU per statement in pipeline mode). In pipeline mode a
reused cursor needs one guard: results arrive in order but are attached to their cursor
whenever the connection reads, so a statement's ``execute`` may attach the still unread
result of an earlier statement on the same cursor, and psycopg's fetch, seeing a result
there, would return that one instead of fetching its own (``ProgrammingError: the last
operation didn't produce records``). :class:`PipelineReadCursor` fetches every outstanding
result of the pipeline before it reads, so the cursor holds the result of its last statement.
"""

from __future__ import annotations

from typing import Any

import psycopg


class PipelineReadCursor(psycopg.Cursor):  # type: ignore[type-arg]
    """A ``psycopg.Cursor`` whose fetches in pipeline mode first receive every result still
    outstanding on the connection (a flush request: one round trip, as psycopg's own fetch
    makes when the cursor holds no result yet). Outside pipeline mode it is a plain cursor."""

    __slots__ = ()

    def _fetch_pipeline(self) -> None:
        conn = self._conn
        pipeline = conn._pipeline
        if pipeline is not None and pipeline.result_queue:
            with conn.lock:
                conn.wait(pipeline._fetch_gen(flush=True))
        super()._fetch_pipeline()


class SharedCursor:
    """``shared(conn)`` -> one cursor per connection for handlers that run one after the
    other (``HandlerContext.shared_cursor``): the cursor made for the last connection asked,
    a new one for another connection or once it was closed. Not for concurrent callers.

    A psycopg connection whose ``cursor_factory`` is psycopg's ``Cursor`` (the default) gets a
    :class:`PipelineReadCursor`; one with another factory (e.g. ``ClientCursor``) gets a new
    ``conn.cursor()`` per call, not shared; any other object (a test double) gets its
    ``cursor()``, shared."""

    __slots__ = ("_conn", "_cursor")

    def __init__(self) -> None:
        self._conn: Any = None
        self._cursor: Any = None

    def __call__(self, conn: Any) -> Any:
        cur = self._cursor
        if cur is not None and self._conn is conn and not cur.closed:
            return cur
        factory = getattr(conn, "cursor_factory", None)
        if factory is psycopg.Cursor:
            cur = PipelineReadCursor(conn)
        elif factory is not None:
            return conn.cursor()
        else:
            cur = conn.cursor()
        self._conn, self._cursor = conn, cur
        return cur

    def clear(self) -> None:
        """Forget the cursor (and its connection)."""
        self._conn = self._cursor = None


__all__ = ["PipelineReadCursor", "SharedCursor"]
