"""Plain counters of the case API (metrics wiring comes with the observability issue).

Incremented on the event loop thread only (route code after its ``await``), so no lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from casestream.http import EdgeCounters


@dataclass(slots=True)
class CaseApiCounters:
    """Counts of the case API, served nowhere yet; tests and operators read ``app.state.counters``.

    Attributes:
        edge: shed / rate-limited / unauthorized answers of the shared edge.
        idempotency_replays: stored responses sent again (``Idempotent-Replayed: true``).
        idempotency_conflicts: 409 ``idempotency_conflict`` (same key, different request).
        idempotency_in_flight: 409 ``request_in_flight`` (same key still being processed).
    """

    edge: EdgeCounters = field(default_factory=EdgeCounters)
    idempotency_replays: int = 0
    idempotency_conflicts: int = 0
    idempotency_in_flight: int = 0
