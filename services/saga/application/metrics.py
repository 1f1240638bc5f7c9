"""In-process counters of the saga-orchestrator (metric-ready; pure, thread-safe).

Counters are monotonically increasing integers keyed by name (Prometheus style
``saga_<name>_total``), incremented by the orchestrator when a unit of work computes a
transition. A unit that is rolled back and retried may count twice: use the durable gauges
of :mod:`services.saga.application.stuck` (computed from the database) for exact numbers,
and these counters for rates and alerts.

Names:
    alerts_total{state}            sagas entering an alerting state (COMPENSATION_FAILED)
    late_replies_total{event_type} compensable successes after compensation began
    ignored_replies_total          replies not whitelisted in the saga's state
    transitions_total{to_state}    transitions taken (incl. starts)
"""

from __future__ import annotations

import threading
from collections import Counter


class SagaMetrics:
    """Thread-safe labelled counters; ``snapshot()`` returns ``{"name{label}": count}``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def inc(self, name: str, label: str | None = None, by: int = 1) -> None:
        """Add ``by`` to counter ``name`` (optionally labelled ``label``)."""
        key = name if label is None else f"{name}{{{label}}}"
        with self._lock:
            self._counts[key] += by

    def get(self, name: str, label: str | None = None) -> int:
        """Current value of counter ``name`` / ``label`` (0 if never incremented)."""
        key = name if label is None else f"{name}{{{label}}}"
        with self._lock:
            return self._counts[key]

    def snapshot(self) -> dict[str, int]:
        """Every counter, sorted by key."""
        with self._lock:
            return dict(sorted(self._counts.items()))
