"""Saga metrics read from the saga tables at scrape time (issue 9), registered at bootstrap.

Durable numbers (not in-process counters, which a restart resets):
``saga_state_total{state}`` sagas by current state; ``compensation_total`` sagas that ever
entered COMPENSATING; ``timeouts_total{component="saga"}`` step deadlines that fired
(history entries triggered by ``@deadline``, ``services.saga.domain.definition.DEADLINE``).
"""

from __future__ import annotations

from typing import Any

from casestream.telemetry import observe_query

QUERIES = {
    "saga_state_total": "SELECT state, count(*) FROM saga GROUP BY state",
    "compensation_total": ("SELECT count(DISTINCT saga_id) FROM saga_history "
                           "WHERE to_state = 'COMPENSATING'"),
    "timeouts_total": ("SELECT 'saga' AS component, count(*) FROM saga_history "
                       "WHERE trigger = '@deadline'"),
}


def register_saga_metrics(pool: Any) -> None:
    """Serve the saga metrics above from ``pool`` (the saga database) at ``/metrics``."""
    for metric, query in QUERIES.items():
        observe_query(pool, metric, query)
