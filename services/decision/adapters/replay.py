"""Replay registration of the decision statistics (projection ``decision.statistics``).

The live projection (``services.decision.adapters.statistics``: table, fact rows, insert,
freshness) unchanged, with one difference for replays: the batch insert reads its rows
parameter as ``jsonb`` (:func:`casestream.replay.projection.jsonb_batch_sql`; PostgreSQL spent
~2x less per row), derived from the live statement text so both always write the same rows
(``ON CONFLICT (event_id) DO NOTHING`` included). If the live statement no longer has the
expected shape, the live registry is used as is.
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

from services.decision.adapters import statistics

_INSERT = jsonb_batch_sql(getattr(statistics, "_INSERT", ""))


def _iso(value: Any) -> str:
    """JSON for the dates in rows: ISO 8601 text (``datetime``/``date.isoformat``)."""
    if isinstance(value, date):  # datetime is a date
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def registry(names: TableNames, event_types: Iterable[str] = ()) -> HandlerRegistry:
    """PROJECTION batch handlers writing ``names[decision_statistics]``: ``statistics.fact`` of
    each event, one insert statement per run (the live registry's rows)."""
    if _INSERT is None:
        return statistics.registry(names, event_types)
    insert = sql.SQL(_INSERT).format(t=sql.Identifier(names[statistics.TABLE]))
    fact = statistics.fact

    def project(ctx: HandlerContext, events: Sequence[Envelope]) -> None:
        rows = [r for r in map(fact, events) if r is not None]
        if rows:
            ctx.conn.execute(insert, (json.dumps(rows, default=_iso),))

    project.__qualname__ = f"decision.statistics[{names[statistics.TABLE]}]"
    reg = HandlerRegistry()
    for event_type in statistics.OUTCOME_OF:
        reg.add_batch(event_type, project, kind=HandlerKind.PROJECTION)
    return reg


PROJECTION: ProjectionSpec = dataclasses.replace(statistics.PROJECTION, registry=registry)
