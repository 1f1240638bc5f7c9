"""Plain counters of the HTTP edge (exported on ``/metrics`` by ``ServiceProcess``).

Incremented only on the event loop thread (middlewares run there), so no lock is needed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class EdgeCounters:
    """How often the edge answered instead of the application.

    Attributes:
        shed: 503s from load shedding (in-flight or pending-body limit reached).
        rate_limited: 429s from the per-tenant / per-client token buckets.
        unauthorized: 401s (no, malformed, expired or foreign token).
        body_timeouts: 408s: a request body did not arrive within its read timeout.
        client_disconnects: clients gone before their answer (not errors).
        internal_errors: 500s from the error boundary (logged with their traceback).
    """

    shed: int = 0
    rate_limited: int = 0
    unauthorized: int = 0
    body_timeouts: int = 0
    client_disconnects: int = 0
    internal_errors: int = 0
