"""Saga metrics read from the saga tables at scrape time, registered at bootstrap.

Durable numbers (not in-process counters, which a restart resets):
``saga_state_total{state}`` sagas by current state; ``compensation_total`` sagas that ever
entered COMPENSATING; ``timeouts_total{component="saga"}`` step deadlines that fired
(history entries triggered by ``@deadline``, ``services.saga.domain.definition.DEADLINE``);
``saga_stuck_total`` sagas *stuck* (none may be stuck silently): waiting for a
participant (an ACTIVE state of the definition) with no progress past their deadline plus
the grace period — or, for a step without a deadline, last changed longer than the grace
ago. The same rule as ``GET /sagas/stuck`` (:mod:`services.saga.application.stuck`,
``PgSagaQueries.stuck``), but an exact count over every tenant (no list limit) and measured
against the database clock. PARKED sagas (MANUAL_REVIEW) and finished ones never count.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from casestream.telemetry import observe_query
from services.saga.application.stuck import Definitions, waiting_states

QUERIES = {
    "saga_state_total": "SELECT state, count(*) FROM saga GROUP BY state",
    "compensation_total": ("SELECT count(DISTINCT saga_id) FROM saga_history "
                           "WHERE to_state = 'COMPENSATING'"),
    "timeouts_total": ("SELECT 'saga' AS component, count(*) FROM saga_history "
                       "WHERE trigger = '@deadline'"),
}

_STATE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def stuck_query(states: Iterable[str], grace: timedelta) -> str:
    """``SELECT count(*)`` of stuck sagas in ``states`` (one row, no label: the gauge is 0
    when nothing is stuck, never absent).

    The query runs without parameters (``observe_query``), so the state names and the grace
    are written into it: names must be identifiers (they come from the saga definition).

    Raises:
        ValueError: a state name is not an identifier, or ``grace`` is negative.
    """
    names = sorted(states)
    bad = [n for n in names if not _STATE_NAME.fullmatch(n)]
    if bad:
        raise ValueError(f"state names must be identifiers: {bad}")
    if grace < timedelta(0):
        raise ValueError("grace must be >= 0")
    listed = ", ".join(f"'{n}'" for n in names) or "NULL"
    cutoff = f"now() - make_interval(secs => {grace.total_seconds():.6f})"
    return ("SELECT count(*) FROM saga "
            f"WHERE active AND state IN ({listed}) "
            f"AND (deadline_at < {cutoff} OR (deadline_at IS NULL AND updated_at < {cutoff}))")


def register_saga_metrics(pool: Any, definition: Definitions, *,
                          stuck_grace: timedelta) -> None:
    """Serve the saga metrics above from ``pool`` (the saga database) at ``/metrics``.

    Args:
        definition: the saga definition(s) (their ACTIVE states are the ones that can be stuck).
        stuck_grace: tolerated delay past a deadline (``CASESTREAM_SAGA_STUCK_GRACE_S``).
    """
    for metric, query in QUERIES.items():
        observe_query(pool, metric, query)
    observe_query(pool, "saga_stuck_total", stuck_query(waiting_states(definition), stuck_grace))
