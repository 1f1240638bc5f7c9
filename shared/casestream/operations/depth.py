"""The ``dead_letter_open{consumer}`` and ``dead_letter_group_open{consumer,failure_class,
fingerprint}`` gauges of a service process.

:class:`DeadLetterDepth` is a worker (``run(stop)``) that reads the open dead-letter depth
of each consumer of the process from its topics (:func:`load_dead_letter_state`) every
``interval_s`` seconds and publishes it through the process's metric sources. The figure
comes from the topics, so it is right after a restart (unlike ``dead_letter_total``, a
counter of this process). A consumer whose topics cannot be read keeps its last figure;
before the first read it has none (absent, not 0). The group gauge has one series per open
failure group (:mod:`casestream.operations.failuregroups`); a group closed is gone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from casestream import telemetry
from casestream.kafka.config import KafkaTarget
from casestream.operations.deadletters import load_dead_letter_state
from casestream.operations.failuregroups import failure_groups

log = logging.getLogger(__name__)

__all__ = ["DeadLetterDepth", "DEPTH_METRIC", "GROUP_METRIC"]

DEPTH_METRIC = "dead_letter_open"
GROUP_METRIC = "dead_letter_group_open"

# Process-wide: several services (or tests) in one process share the metric sources.
_DEPTHS: dict[str, int] = {}
_GROUPS: dict[str, dict[tuple[str, str], int]] = {}  # consumer -> (class, fingerprint) -> open
_DEPTHS_LOCK = threading.Lock()


def _samples() -> dict[tuple[tuple[str, str], ...], float]:
    with _DEPTHS_LOCK:
        return {(("consumer", c),): float(n) for c, n in _DEPTHS.items()}


def _group_samples() -> dict[tuple[tuple[str, str], ...], float]:
    with _DEPTHS_LOCK:
        return {(("consumer", c), ("failure_class", k), ("fingerprint", fp)): float(n)
                for c, groups in _GROUPS.items() for (k, fp), n in groups.items()}


class DeadLetterDepth:
    """Open dead-letter depth per consumer, refreshed every ``interval_s`` seconds."""

    def __init__(self, bootstrap: KafkaTarget, consumers: Sequence[str], *, interval_s: float = 30.0,
                 actions_topic: str | None = None) -> None:
        self._bootstrap = bootstrap
        self.consumers = tuple(dict.fromkeys(consumers))
        self.interval_s = interval_s
        self._actions_topic = actions_topic
        telemetry.sources().add_gauge(DEPTH_METRIC, _samples)
        telemetry.sources().add_gauge(GROUP_METRIC, _group_samples)

    def refresh(self) -> dict[str, int]:
        """Read every consumer's state once; returns the depths now known."""
        for consumer in self.consumers:
            try:
                state = load_dead_letter_state(self._bootstrap, consumer,
                                               actions_topic=self._actions_topic)
            except Exception as e:  # noqa: BLE001 - keep the last figure, try again later
                log.warning("dead-letter depth of %s not read: %s", consumer, e)
                continue
            groups = {(g.failure_class, g.fingerprint): g.count for g in failure_groups(state)}
            with _DEPTHS_LOCK:
                _DEPTHS[consumer] = state.depth
                _GROUPS[consumer] = groups
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
