"""Plain counters of the HTTP edge (read by tests now, by metrics with the observability issue).

Incremented only on the event loop thread (middlewares run there), so no lock is needed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class EdgeCounters:
    """How often the edge answered instead of the application.

    Attributes:
        shed: 503s from load shedding (in-flight limit reached).
        rate_limited: 429s from the per-tenant / per-client token buckets.
        unauthorized: 401s (no, malformed, expired or foreign token).
    """

    shed: int = 0
    rate_limited: int = 0
    unauthorized: int = 0
