"""Stuck-saga detection and the orchestrator's gauges: no saga is ever silently stuck.

A saga is *stuck* when it waits for a participant (an ACTIVE state) and made no progress
past its deadline plus a grace period — the deadline scheduler should have fired it by then
(scheduler down, database locks, a bug) — or, for a step without a deadline, when its last
change is older than the grace period. PARKED sagas (MANUAL_REVIEW) wait for an operator by
design and are reported by state, not as stuck; TERMINAL sagas are finished.

The gauges are computed from the database, so they are exact and survive restarts (the
counters of :mod:`.metrics` are per process). Prometheus gets the stuck count as the gauge
``saga_stuck_total`` at the service's ``GET /metrics`` (same rule, every tenant, not capped:
``services.saga.adapters.metrics_pg``); :func:`gauges` serves the per-tenant JSON view.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from services.saga.application.ports import SagaQueries
from services.saga.domain.definition import SagaDefinition, State, StateKind
from services.saga.domain.engine import SagaInstance

STUCK_LIMIT = 1000
"""Most stuck sagas listed (and counted by :func:`gauges`: the gauge saturates there)."""


Definitions = SagaDefinition | Iterable[SagaDefinition]
"""One saga definition, or the several an orchestrator runs."""


def states_of(definitions: Definitions) -> tuple[State, ...]:
    """The states of every definition, first declaration of each name kept (two sagas may
    both have e.g. ``COMPLETED``; the saga table stores the state by name)."""
    listed = (definitions,) if isinstance(definitions, SagaDefinition) else tuple(definitions)
    seen: dict[str, State] = {}
    for d in listed:
        for state in d.states:
            seen.setdefault(state.name, state)
    return tuple(seen.values())


def waiting_states(definitions: Definitions) -> frozenset[str]:
    """States in which a saga waits for a participant (ACTIVE)."""
    return frozenset(s.name for s in states_of(definitions) if s.kind is StateKind.ACTIVE)


def find_stuck(queries: SagaQueries, definition: Definitions, *, now: datetime,
               grace: timedelta, tenant_id: str | None,
               limit: int = STUCK_LIMIT) -> list[SagaInstance]:
    """Stuck sagas (see the module docstring) of ``tenant_id`` (None: every tenant),
    oldest deadline first, at most ``limit``.

    Args:
        now: timezone-aware current time.
        grace: tolerated delay past a deadline (>= 0).
    """
    return queries.stuck(tenant_id=tenant_id, states=waiting_states(definition),
                         older_than=now - grace, limit=min(limit, STUCK_LIMIT))


def gauges(queries: SagaQueries, definition: Definitions, *, now: datetime,
           grace: timedelta, tenant_id: str | None) -> Mapping[str, int]:
    """``{"sagas_stuck": n, "sagas_alerting": n, "sagas{state=X}": n, ...}``.

    ``sagas_alerting`` counts sagas in alerting states (COMPENSATION_FAILED); every
    declared state appears in the per-state gauges (0 if empty). Only sagas of
    ``tenant_id`` are counted (None: every tenant).
    """
    by_state = queries.count_by_state(tenant_id=tenant_id)
    states = states_of(definition)
    out: dict[str, int] = {
        "sagas_stuck": len(find_stuck(queries, definition, now=now, grace=grace,
                                      tenant_id=tenant_id)),
        "sagas_alerting": sum(by_state.get(s.name, 0) for s in states if s.alert),
        "sagas_parked": sum(by_state.get(s.name, 0) for s in states
                            if s.kind is StateKind.PARKED),
    }
    for s in states:
        out[f"sagas{{state={s.name}}}"] = by_state.get(s.name, 0)
    return out
