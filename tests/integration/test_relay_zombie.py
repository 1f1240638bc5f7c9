"""A relay paused past its lease (a zombie: SIGSTOP, a VM or GC pause) and then resumed, while
another instance took its shards over: its stale claim is not produced and its stale
bookkeeping is refused by the lease epoch (``outbox_relay_lease.epoch``, ``store.Fence``).

The pause is the relay thread blocked in its fault hook, at a chosen stage, on the real
PostgreSQL and Kafka; the relay's local monotonic clock runs on as it does through a SIGSTOP.
"""

from __future__ import annotations

import threading

import psycopg

from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import read_topics
from test_relay_support import (  # noqa: F401 - fixtures
    RelayThread, base_dsn, bootstrap, check_order, count_status, dsn, env, settings, topic_prefix,
    wait_for, write,
)

N = 60
LEASE_S = 2.0


class Pause:
    """A fault hook that blocks the relay thread the first time it reaches ``stage``."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.reached = threading.Event()
        self.resume = threading.Event()

    def __call__(self, stage: str) -> None:
        if stage == self.stage and not self.reached.is_set():
            self.reached.set()
            assert self.resume.wait(60), "never resumed"


def _events(dsn: str) -> dict[tuple[str, str], list[str]]:
    envs = [env(f"z-{i % 12}", i // 12 + 1) for i in range(N)]
    write(dsn, envs)
    expected: dict[tuple[str, str], list[str]] = {}
    for e in envs:
        expected.setdefault(("case", e.aggregate_id), []).append(e.event_id)
    return expected


def _owners(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT split_part(locked_by, '/', 1), count(*) FROM outbox_relay_lease "
                                 "WHERE locked_until > now() GROUP BY 1").fetchall())


def test_a_relay_resumed_after_its_lease_does_not_produce_its_stale_claim(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    expected = {(topic_prefix + t, k): ids for (t, k), ids in _events(dsn).items()}
    pause = Pause("claimed")
    zombie = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                     settings(topic_prefix, lease_s=LEASE_S), "zombie", fault_hook=pause))
    other = None
    try:
        assert pause.reached.wait(20), "the zombie never claimed"
        other = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                        settings(topic_prefix, lease_s=LEASE_S), "other"))
        wait_for(lambda: _owners(dsn).get("other") == 32, 4 * LEASE_S + 5, "the take-over")
        wait_for(lambda: count_status(dsn).get("published") == N, 20, "the new owner to publish")
        pause.resume.set()
        m = zombie.relay.metrics
        wait_for(lambda: m.stale_claims_dropped_total or m.published_total, 10, "the zombie to go on")
        assert m.stale_claims_dropped_total == 1
    finally:
        pause.resume.set()
        zombie.close()
        if other is not None:
            other.close()
    records = read_topics(bootstrap, [topic_prefix + "case"], expected=N, settle_s=2.0)
    got = check_order(records, expected, allow_duplicates=True)
    assert got["duplicates"] == 0, got  # nothing produced by the zombie after the take-over
    assert zombie.relay.metrics.published_total == 0


def test_a_relay_resumed_after_its_lease_cannot_record_outcomes_for_rows_it_lost(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    expected = {(topic_prefix + t, k): ids for (t, k), ids in _events(dsn).items()}
    zombie_pause, other_pause = Pause("delivered"), Pause("delivered")
    zombie = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                     settings(topic_prefix, lease_s=LEASE_S), "zombie",
                                     fault_hook=zombie_pause))
    other = None
    try:
        # The zombie's records are on the topic; it stops before recording them.
        assert zombie_pause.reached.wait(20), "the zombie never had its reports"
        # The new owner's lease outlives this test: the resumed zombie wins no shard back.
        other = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                        settings(topic_prefix, lease_s=60.0, renew_interval_s=1.0),
                                        "other", fault_hook=other_pause))
        assert other_pause.reached.wait(4 * LEASE_S + 10), "the new owner never produced the rows"
        zombie_pause.resume.set()
        # Its bookkeeping is refused: the rows are the new owner's, whose outcome is pending.
        m = zombie.relay.metrics
        wait_for(lambda: m.fenced_total == N or count_status(dsn) != {"pending": N}, 10,
                 "the zombie's bookkeeping")
        assert count_status(dsn) == {"pending": N}
        assert m.fenced_total == N
        zombie.close()
        other_pause.resume.set()
        wait_for(lambda: count_status(dsn).get("published") == N, 20, "the new owner's marks")
    finally:
        zombie_pause.resume.set()
        other_pause.resume.set()
        zombie.close()
        if other is not None:
            other.close()
    records = read_topics(bootstrap, [topic_prefix + "case"], expected=2 * N, settle_s=2.0)
    got = check_order(records, expected, allow_duplicates=True)
    # Delivered but never recorded by the zombie: produced again by the new owner (at least once).
    assert got["duplicates"] == N, got
    # The recorded offsets are the new owner's copies (the later of each id's two records).
    last = {r.headers["id"].decode(): (r.partition, r.offset) for r in sorted(records, key=lambda r: r.offset)}
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id::text, kafka_partition, kafka_offset FROM outbox").fetchall()
    assert {i: (p, o) for i, p, o in rows} == last


def test_a_relay_slow_past_its_lease_that_nobody_took_over_publishes_its_claim(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    # A slow step between claim and produce (e.g. a metadata request timing out) outlives the
    # local lease deadline while no other relay runs: the leases are still this relay's at the
    # same epochs, so the claim is produced, not dropped.
    expected = {(topic_prefix + t, k): ids for (t, k), ids in _events(dsn).items()}
    pause = Pause("claimed")
    slow = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                   settings(topic_prefix, lease_s=LEASE_S), "slow", fault_hook=pause))
    try:
        assert pause.reached.wait(20), "the relay never claimed"
        threading.Event().wait(2 * LEASE_S)
        pause.resume.set()
        wait_for(lambda: count_status(dsn).get("published") == N, 20, "the claim to be published")
        assert slow.relay.metrics.stale_claims_dropped_total == 0
    finally:
        pause.resume.set()
        slow.close()
    records = read_topics(bootstrap, [topic_prefix + "case"], expected=N, settle_s=1.0)
    assert check_order(records, expected, allow_duplicates=True)["duplicates"] == 0
