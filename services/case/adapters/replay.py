"""Replay registration of the case dashboard (projection ``case.dashboard``).

The live projection (``services.case.adapters.dashboard``: tables, fold, upsert, freshness)
unchanged, with one difference for replays: the batch upsert reads its rows parameter as
``jsonb`` (:func:`casestream.replay.projection.jsonb_batch_sql`; PostgreSQL spent ~2x less per
row), derived from the live statement text so both always write the same rows. If the live
statement no longer has the expected shape, the live registry is used as is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from datetime import date
from typing import Any

from psycopg import sql

from casestream.envelope import Envelope
from casestream.handlers import HandlerContext, HandlerKind, HandlerRegistry
from casestream.replay.projection import ProjectionSpec, TableNames, jsonb_batch_sql

from services.case.adapters import dashboard

_UPSERT = jsonb_batch_sql(getattr(dashboard, "_UPSERT", ""))


def _iso(value: Any) -> str:
    """JSON for the dates in rows: ISO 8601 text (``datetime``/``date.isoformat``)."""
    if isinstance(value, date):  # datetime is a date
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def registry(names: TableNames, event_types: Iterable[str] = ()) -> HandlerRegistry:
    """PROJECTION batch handlers writing ``names[case_dashboard]``: ``dashboard.fold`` of each run
    of events, one upsert statement per run (the live registry's rows)."""
    if _UPSERT is None:
        return dashboard.registry(names, event_types)
    upsert = sql.SQL(_UPSERT).format(t=sql.Identifier(names[dashboard.TABLE]))
    fold = dashboard.fold

    def project(ctx: HandlerContext, events: Sequence[Envelope]) -> None:
        rows = fold(events)
        if rows:
            ctx.conn.execute(upsert, (json.dumps(rows, default=_iso),))

    project.__qualname__ = f"case.dashboard[{names[dashboard.TABLE]}]"
    reg = HandlerRegistry()
    for event_type in dashboard.STATUS_OF:
        reg.add_batch(event_type, project, kind=HandlerKind.PROJECTION)
    return reg


PROJECTION: ProjectionSpec = dataclasses.replace(dashboard.PROJECTION, registry=registry)
