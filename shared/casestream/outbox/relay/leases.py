"""Shard leases: which relay instance publishes which of the 32 outbox shards.

Tables ``outbox_relay_lease(shard, locked_by, locked_until, epoch)`` and
``outbox_relay_member(owner, name, heartbeat_until)`` (see :mod:`casestream.outbox.writer`).

Every ``renew_interval_s`` an instance (1) refreshes its membership heartbeat,
(2) renews the leases it still holds (``locked_by = me``; a lease someone else took over
is gone), (3) computes its fair share ``ceil(32 / live members)``, releases leases above
it (only *between* batches, so a shard never has two producers in normal operation) and
acquires free or expired ones up to it (``FOR UPDATE SKIP LOCKED``: two instances never
take the same shard). A dead instance's leases expire ``lease_s`` after its last renewal
and are taken by the survivors at their next heartbeat. Taking a lease raises its ``epoch``:
the relay's bookkeeping of a batch is fenced by the ``(shard, epoch)`` pairs held when the
batch was claimed (``store.mark_outcomes``), so an instance that was paused past its lease
(SIGSTOP, a long GC or VM pause) cannot record outcomes for rows another instance now owns. All times use the database
clock (``now()``); the instance also keeps a local monotonic deadline and stops claiming
once it may have lost its leases (e.g. the database was unreachable).
"""

from __future__ import annotations

import math
import time

import psycopg

from casestream.outbox.writer import OUTBOX_SHARDS

__all__ = ["LeaseManager"]


class LeaseManager:
    """Lease bookkeeping of one relay instance (not thread-safe; used by the relay thread).

    Args:
        owner: unique id of this instance (``<name>/<random>``), written to ``locked_by``.
        name: human-readable relay name (shown by ``casestream outbox status``).
        lease_s: lease duration in seconds.
    """

    def __init__(self, owner: str, name: str, lease_s: float) -> None:
        self.owner = owner
        self.name = name
        self.lease_s = lease_s
        self.held: frozenset[int] = frozenset()
        self.epochs: dict[int, int] = {}  # shard -> epoch of the lease held
        self._valid_until = 0.0  # local monotonic deadline of the current leases

    def valid(self) -> bool:
        """True while the leases renewed last are certainly not expired (local clock)."""
        return bool(self.held) and time.monotonic() < self._valid_until

    def renew(self, conn: psycopg.Connection) -> frozenset[int]:
        """Renew held leases only (no rebalancing); safe while a batch is in flight."""
        started = time.monotonic()
        with conn.transaction():
            rows = conn.execute(
                "UPDATE outbox_relay_lease SET locked_until = now() + %s * interval '1 second' "
                "WHERE locked_by = %s RETURNING shard, epoch",
                (self.lease_s, self.owner),
            ).fetchall()
            conn.execute(
                "UPDATE outbox_relay_member SET heartbeat_until = now() + %s * interval '1 second' "
                "WHERE owner = %s",
                (self.lease_s, self.owner),
            )
        self._set_held(rows)
        self._valid_until = started + self.lease_s * 0.9
        return self.held

    def rebalance(self, conn: psycopg.Connection) -> frozenset[int]:
        """Heartbeat, renew, release above the fair share, acquire up to it; return held shards.

        Call only between batches (it may release a shard).
        """
        started = time.monotonic()
        lease = self.lease_s
        with conn.transaction():
            conn.execute(
                "INSERT INTO outbox_relay_member (owner, name, heartbeat_until) "
                "VALUES (%s, %s, now() + %s * interval '1 second') "
                "ON CONFLICT (owner) DO UPDATE SET heartbeat_until = EXCLUDED.heartbeat_until",
                (self.owner, self.name, lease),
            )
            live = conn.execute(
                "SELECT count(*) FROM outbox_relay_member WHERE heartbeat_until > now()"
            ).fetchone()[0]
            fair = math.ceil(OUTBOX_SHARDS / max(1, live))
            held = sorted(conn.execute(
                "UPDATE outbox_relay_lease SET locked_until = now() + %s * interval '1 second' "
                "WHERE locked_by = %s RETURNING shard, epoch",
                (lease, self.owner),
            ).fetchall())
            if len(held) > fair:
                extra = [shard for shard, _epoch in held[fair:]]
                conn.execute(
                    "UPDATE outbox_relay_lease SET locked_by = NULL, locked_until = '-infinity' "
                    "WHERE shard = ANY(%s) AND locked_by = %s",
                    (extra, self.owner),
                )
                held = held[:fair]
            elif len(held) < fair:
                got = conn.execute(
                    "UPDATE outbox_relay_lease SET locked_by = %(owner)s, "
                    "  locked_until = now() + %(lease)s * interval '1 second', epoch = epoch + 1 "
                    "WHERE shard IN (SELECT shard FROM outbox_relay_lease "
                    "                WHERE locked_by IS NULL OR locked_until < now() "
                    "                ORDER BY shard LIMIT %(n)s FOR UPDATE SKIP LOCKED) "
                    "RETURNING shard, epoch",
                    {"owner": self.owner, "lease": lease, "n": fair - len(held)},
                ).fetchall()
                held.extend(got)
        self._set_held(held)
        self._valid_until = started + lease * 0.9
        return self.held

    def release_all(self, conn: psycopg.Connection) -> None:
        """Give every lease back and leave the membership (clean shutdown: instant take-over)."""
        with conn.transaction():
            conn.execute(
                "UPDATE outbox_relay_lease SET locked_by = NULL, locked_until = '-infinity' "
                "WHERE locked_by = %s",
                (self.owner,),
            )
            conn.execute("DELETE FROM outbox_relay_member WHERE owner = %s", (self.owner,))
            conn.execute(
                "DELETE FROM outbox_relay_member WHERE heartbeat_until < now() - interval '1 hour'"
            )
        self._set_held([])
        self._valid_until = 0.0

    def fence(self) -> tuple[list[int], list[int]]:
        """``(shards, epochs)`` of the leases held now, for ``store.mark_outcomes``."""
        shards = sorted(self.epochs)
        return shards, [self.epochs[s] for s in shards]

    def _set_held(self, rows: list) -> None:
        self.epochs = {int(shard): int(epoch) for shard, epoch in rows}
        self.held = frozenset(self.epochs)
