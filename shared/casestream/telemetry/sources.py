"""Where metric values come from: the stats objects the runtime already keeps.

Pure module (stdlib only). The consumer runtime (``ConsumerStats``), the outbox relay
(``RelayMetrics``), HTTP apps (``app.state.counters``) and service-specific callbacks (the
saga's states from its table) register here; the metrics layer reads them at scrape time,
so nothing is counted twice and the runtime modules need no OpenTelemetry code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

GaugeFn = Callable[[], Mapping[tuple[tuple[str, str], ...], float]]
"""Returns {sorted label pairs: value}; called at scrape time; may raise (then skipped)."""


@dataclass(slots=True)
class ConsumerLag:
    """Last observed lag of one consumer, per topic (summed over its partitions)."""

    seconds: dict[str, float] = field(default_factory=dict)
    messages: dict[str, float] = field(default_factory=dict)
    inflight: int = 0


@dataclass(slots=True)
class Sources:
    """Registered stats objects, by name. Thread-safe registration; reads copy the dicts."""

    consumers: dict[str, Any] = field(default_factory=dict)   # name -> ConsumerStats
    lags: dict[str, ConsumerLag] = field(default_factory=dict)
    relays: dict[str, Any] = field(default_factory=dict)      # name -> RelayMetrics
    counters: dict[str, Any] = field(default_factory=dict)    # app name -> counters object
    gauges: dict[str, GaugeFn] = field(default_factory=dict)  # metric name -> callback
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_consumer(self, name: str, stats: Any) -> ConsumerLag:
        """Register ``ConsumerStats`` of consumer ``name``; returns its lag record."""
        with self.lock:
            self.consumers[name] = stats
            return self.lags.setdefault(name, ConsumerLag())

    def add_relay(self, name: str, metrics: Any) -> None:
        """Register the ``RelayMetrics`` of relay ``name``."""
        with self.lock:
            self.relays[name] = metrics

    def add_counters(self, name: str, counters: Any) -> None:
        """Register an HTTP app's counters object (attributes read by name)."""
        with self.lock:
            self.counters[name] = counters

    def add_gauge(self, metric: str, fn: GaugeFn) -> None:
        """Register the callback that yields the samples of ``metric``."""
        with self.lock:
            self.gauges[metric] = fn
