"""The ``dead_letter_open{consumer}`` gauge of a service process.

:class:`DeadLetterDepth` is a worker (``run(stop)``) that reads the open dead-letter depth
of each consumer of the process from its topics (:func:`load_dead_letter_state`) every
``interval_s`` seconds and publishes it through the process's metric sources. The figure
comes from the topics, so it is right after a restart (unlike ``dead_letter_total``, a
counter of this process). A consumer whose topics cannot be read keeps its last figure;
before the first read it has none (absent, not 0).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from casestream import telemetry
from casestream.kafka.config import KafkaTarget
from casestream.operations.deadletters import load_dead_letter_state

log = logging.getLogger(__name__)

__all__ = ["DeadLetterDepth", "DEPTH_METRIC"]

DEPTH_METRIC = "dead_letter_open"

# Process-wide: several services (or tests) in one process share the metric sources.
_DEPTHS: dict[str, int] = {}
_DEPTHS_LOCK = threading.Lock()


def _samples() -> dict[tuple[tuple[str, str], ...], float]:
    with _DEPTHS_LOCK:
        return {(("consumer", c),): float(n) for c, n in _DEPTHS.items()}


class DeadLetterDepth:
    """Open dead-letter depth per consumer, refreshed every ``interval_s`` seconds."""

    def __init__(self, bootstrap: KafkaTarget, consumers: Sequence[str], *, interval_s: float = 30.0,
                 actions_topic: str | None = None) -> None:
        self._bootstrap = bootstrap
        self.consumers = tuple(dict.fromkeys(consumers))
        self.interval_s = interval_s
        self._actions_topic = actions_topic
        telemetry.sources().add_gauge(DEPTH_METRIC, _samples)

    def refresh(self) -> dict[str, int]:
        """Read every consumer's state once; returns the depths now known."""
        for consumer in self.consumers:
            try:
                depth = load_dead_letter_state(self._bootstrap, consumer,
                                               actions_topic=self._actions_topic).depth
            except Exception as e:  # noqa: BLE001 - keep the last figure, try again later
                log.warning("dead-letter depth of %s not read: %s", consumer, e)
                continue
            with _DEPTHS_LOCK:
                _DEPTHS[consumer] = depth
        return self.depths()

    def depths(self) -> dict[str, int]:
        """The last depth read of each of this worker's consumers (absent: not read yet)."""
        with _DEPTHS_LOCK:
            return {c: _DEPTHS[c] for c in self.consumers if c in _DEPTHS}

    def run(self, stop: threading.Event) -> None:
        """Refresh now, then every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            self.refresh()
            stop.wait(self.interval_s)
