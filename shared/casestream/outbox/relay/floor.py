"""The claim floor's advance: when the relay may raise ``outbox_claim_floor`` and to what.

A row numbered ``seq`` may commit long after rows with larger numbers (its transaction drew
the number, then ran on), so the floor may pass ``seq`` only once every transaction that
could still commit such a row has ended. Three steps, each at most once per ``interval_s``:

1. read the identity sequence's last value ``M`` (every row up to ``M`` has its number);
2. ``interval_s`` later, take ``X`` = ``pg_snapshot_xmax`` of a fresh snapshot: each of those
   rows' transactions has an id below ``X`` by then (the id is assigned when the row is
   written, right after its number is drawn);
3. once ``pg_snapshot_xmin`` of the current snapshot reaches ``X`` (all of them ended),
   raise the floor to the lowest pending ``seq <= M`` (``M + 1`` if none).

A read-only transaction holding ``xmin`` (the case this guards against) has no id, so it
does not hold the floor back; a writing transaction open for minutes does, and the claim then
walks what it walks without the floor. Several relays may advance it: the update is
conditional on the row they read (:func:`casestream.outbox.relay.store.advance_claim_floor`).
"""

from __future__ import annotations

from typing import Any

from casestream.outbox.relay import store

__all__ = ["ClaimFloor"]


class ClaimFloor:
    """One relay's progress through the three steps; :meth:`step` is called from the relay's
    loop (cheap when not due), ``value`` is the floor last seen (for metrics and tests)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.value = 0
        self.advances = 0
        self._high_water: int | None = None
        self._candidate: tuple[int, int] | None = None  # (high water M, xmax X)
        self._next = 0.0

    def step(self, conn: Any, now: float) -> None:
        """Run the step that is due (``conn``: the relay's autocommit psycopg connection;
        ``now``: monotonic seconds)."""
        if now < self._next:
            return
        self._next = now + self.interval_s
        if self._candidate is not None:
            upto, xmax = self._candidate
            if not store.horizon_passed(conn, xmax):
                return
            self._candidate = None
            old = store.claim_floor(conn)
            new = store.advance_claim_floor(conn, old, upto)
            self.value = new if new is not None else store.claim_floor(conn)[0]
            self.advances += 1
        elif self._high_water is not None:
            self._candidate = (self._high_water, store.xact_horizon(conn))
            self._high_water = None
        else:
            self._high_water = store.seq_high_water(conn)

    def reset(self) -> None:
        """Forget the steps in progress (a new connection: start again at step 1)."""
        self._high_water = None
        self._candidate = None
