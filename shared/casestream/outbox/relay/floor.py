"""The claim floor's advance: when the relay may raise ``outbox_claim_floor`` and to what.

A row numbered ``seq`` may commit long after rows with larger numbers (its transaction drew
the number, then ran on), so the floor may pass ``seq`` only once every transaction that
could still commit such a row has ended. Two steps, at most one per ``interval_s``:

1. read the identity sequence's last value ``M``, then the transactions holding
   ``RowExclusiveLock`` on ``outbox`` (each took it before drawing a number and keeps it until
   it ends, so every row numbered up to ``M`` is committed, aborted, or theirs);
2. once none of them is running, raise the floor to the lowest pending ``seq <= M``
   (``M + 1`` if none) and start again at 1.

A snapshot held open elsewhere (the case this guards against: a report, ``pg_dump``, an idle
REPEATABLE READ session) takes no such lock, so it does not hold the floor back; a
transaction that wrote to the outbox and stays open does, and the claims then walk what they
walk without the floor. Several relays may advance it: the update is conditional on the row
they read (:func:`casestream.outbox.relay.store.advance_claim_floor`).
"""

from __future__ import annotations

from typing import Any

from casestream.outbox.relay import store

__all__ = ["ClaimFloor"]


class ClaimFloor:
    """One relay's progress through the two steps; :meth:`step` is called from the relay's
    loop (cheap when not due), ``value`` is the floor last seen (for metrics and tests)."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.value = 0
        self.advances = 0
        self._candidate: tuple[int, list[str]] | None = None  # (high water M, writers then)
        self._next = 0.0

    def step(self, conn: Any, now: float) -> None:
        """Run the step that is due (``conn``: the relay's autocommit psycopg connection;
        ``now``: monotonic seconds)."""
        if now < self._next:
            return
        self._next = now + self.interval_s
        if self._candidate is None:
            high_water = store.seq_high_water(conn)  # before the writers: see the module
            self._candidate = (high_water, store.outbox_writers(conn))
            return
        upto, writers = self._candidate
        if store.any_running(conn, writers):
            return
        self._candidate = None
        old = store.claim_floor(conn)
        new = store.advance_claim_floor(conn, old, upto)
        self.value = new if new is not None else store.claim_floor(conn)[0]
        self.advances += 1
