"""KeyScheduler: per-key order, committable offsets never past an unfinished event, cuts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from casestream.consumer.keyparallel import (
    KEY_QUEUE_HARD,
    FlowStep,
    KeyScheduler,
    PartitionOffsets,
    entry_key,
    key_queue_flow,
    key_queue_limit,
)
from casestream.consumer.records import Record

TP0 = ("t", 0)


def _entry(offset: int, agg: str, partition: int = 0):
    env = SimpleNamespace(aggregate_type="case", aggregate_id=agg)
    return (Record("t", partition, offset, agg.encode(), b"v"), env, None)


def _offsets(unit) -> list[int]:
    return [e[0].offset for e in unit.entries]


def _done(s: KeyScheduler, unit) -> None:
    commits = {}
    for rec, _e, _x in unit.entries:
        commits[rec.tp] = rec.offset + 1
    s.finish(unit, commits, {})


def test_one_aggregate_runs_in_one_unit_at_a_time_in_offset_order() -> None:
    s = KeyScheduler(concurrency=4, max_unit=1)
    s.add([_entry(0, "A"), _entry(1, "B"), _entry(2, "A"), _entry(3, "C")])
    units = [s.take(), s.take(), s.take()]
    assert [_offsets(u) for u in units] == [[0], [1], [3]]  # A's second waits for its first
    assert s.take() is None
    _done(s, units[0])
    nxt = s.take()
    assert _offsets(nxt) == [2]


def test_committable_offset_stops_at_the_lowest_unfinished_event() -> None:
    s = KeyScheduler(concurrency=4, max_unit=1)
    s.add([_entry(0, "A"), _entry(1, "B"), _entry(2, "C")])
    a, b, c = s.take(), s.take(), s.take()
    _done(s, b)
    _done(s, c)
    assert s.committable() == {TP0: 0}  # offset 0 (A) still running
    _done(s, a)
    assert s.committable() == {TP0: 3}


def test_uncommitted_names_what_a_stop_now_redelivers() -> None:
    s = KeyScheduler(concurrency=4, max_unit=1)
    s.add([_entry(0, "A"), _entry(1, "B"), _entry(2, "A"), _entry(5, "C", partition=1)])
    a, b, c = s.take(), s.take(), s.take()  # A@0, B@1, C@5 running; A@2 queued behind A@0
    _done(s, b)
    _done(s, c)
    # partition 0: A@0 running, B@1 applied after it, A@2 queued -> 0-2 redelivered;
    # partition 1: everything applied -> nothing
    assert s.uncommitted() == {TP0: (0, 3)}
    _done(s, a)
    assert s.uncommitted() == {TP0: (2, 3)}


def test_unit_size_is_queue_over_concurrency_and_keeps_fetch_order() -> None:
    s = KeyScheduler(concurrency=2, max_unit=100)
    s.add([_entry(i, f"K{i % 4}") for i in range(8)])
    u = s.take()
    assert len(u.entries) == 4
    assert _offsets(u) == sorted(_offsets(u))


def test_a_cut_drops_the_partition_from_the_cut_until_the_refetch_starts() -> None:
    s = KeyScheduler(concurrency=4, max_unit=1)
    s.add([_entry(0, "A"), _entry(1, "B"), _entry(2, "A"), _entry(3, "C")])
    a, b, c = s.take(), s.take(), s.take()  # A@0, B@1, C@3
    _done(s, a)
    s.finish(b, {TP0: 1}, {TP0: (1, 0.5)})  # B@1 failed retryably: cut at 1
    assert s.rewinds() == {TP0: (1, 0.5)}
    assert s.take() is None  # A@2 was dropped: it is fetched again
    _done(s, c)  # C@3 ran already: applied, it will come again as a duplicate
    assert s.committable() == {TP0: 1}
    assert s.add([_entry(4, "D")]) == 1  # fetched before the seek: dropped
    s.add([_entry(1, "B"), _entry(2, "A"), _entry(3, "C")])  # the re-fetch
    units = [s.take(), s.take(), s.take()]
    assert sorted(o for u in units for o in _offsets(u)) == [1, 2, 3]
    for u in units:
        _done(s, u)
    assert s.committable() == {TP0: 4}


def test_a_failed_unit_refetches_its_partitions_from_its_first_offsets() -> None:
    s = KeyScheduler(concurrency=1, max_unit=10)
    s.add([_entry(5, "A"), _entry(6, "B"), _entry(0, "C", partition=1)])
    u = s.take()
    s.failed(u, 2.0)
    assert s.rewinds() == {TP0: (5, 2.0), ("t", 1): (0, 2.0)}
    assert s.committable() == {TP0: 5, ("t", 1): 0}


def test_hold_and_forget() -> None:
    s = KeyScheduler(concurrency=2, max_unit=10)
    s.add([_entry(0, "A")])
    s.hold = True
    assert s.take() is None
    s.forget({TP0})
    s.hold = False
    assert s.take() is None and s.queued == 0 and s.committable() == {}


def test_offsets_ignore_a_late_copy_below_the_committable_offset() -> None:
    p = PartitionOffsets()
    for o in range(3):
        p.fetched(o)
    for o in range(3):
        p.applied(o)
    assert p.base() == 3
    p.applied(1)  # a re-fetched duplicate finishing late
    assert p.done == set() and p.base() == 3


def test_undecodable_records_are_ordered_by_their_kafka_key() -> None:
    rec = Record("t", 0, 0, b"k1", None)
    assert entry_key((rec, None, ValueError("bad"))) == ("", b"k1")


def test_key_concurrency_below_one_is_refused_naming_the_field() -> None:
    from casestream.consumer.settings import ConsumerSettings
    from casestream.errors import ConfigError

    with pytest.raises(ConfigError, match="key_concurrency must be >= 1, got 0"):
        ConsumerSettings(key_concurrency=0)


def test_a_pool_smaller_than_the_workers_is_refused_at_construction() -> None:
    from casestream.handlers.registry import HandlerRegistry
    from casestream.consumer.runtime import ConsumerRuntime
    from casestream.consumer.settings import ConsumerSettings
    from casestream.errors import ConfigError

    with pytest.raises(ConfigError, match=r"key_concurrency=8 needs a connection pool of "
                                          r"max_size >= 9.*max_size=4"):
        ConsumerRuntime("c.keys", ["t"], HandlerRegistry(), None, SimpleNamespace(max_size=4),
                        {"bootstrap.servers": "127.0.0.1:1"}, ConsumerSettings(key_concurrency=8))


def test_a_worker_thread_that_fails_outside_a_unit_is_reported_not_waited_for() -> None:
    import threading

    from casestream.consumer.keyworkers import KeyWorkers
    from casestream.retry import RetryPolicy

    class Broken:
        def forget(self, tps):  # noqa: ANN001, ANN201
            pass

        def close(self) -> None:
            pass

    workers = KeyWorkers("c.broken", None, Broken, concurrency=1, max_unit=10,
                         retry=RetryPolicy(max_attempts=2))
    workers.sched.finish = None  # a defect: reporting a unit raises TypeError
    workers.start()
    workers.add([_entry(0, "A")])  # the unit's process() fails (no pool), then finish raises
    for _ in range(1000):
        if workers.crashed is not None:
            break
        threading.Event().wait(0.01)
    assert isinstance(workers.crashed, TypeError)
    assert workers.inflight == 1  # the unit was never reported
    done = threading.Event()
    threading.Thread(target=lambda: (workers.quiesce(), done.set()), daemon=True).start()
    assert done.wait(10), "quiesce waited for a unit whose worker thread had died"


def test_a_group_pool_smaller_than_all_members_workers_is_refused() -> None:
    from casestream.consumer.group import ConsumerGroup
    from casestream.handlers.registry import HandlerRegistry
    from casestream.consumer.settings import ConsumerSettings
    from casestream.errors import ConfigError

    with pytest.raises(ConfigError, match=r"2 members with key_concurrency=4 need a connection "
                                          r"pool of max_size >= 10 .*max_size=6"):
        ConsumerGroup(2, "c.keys", ["t"], HandlerRegistry(), None, SimpleNamespace(max_size=6),
                      {"bootstrap.servers": "127.0.0.1:1"}, ConsumerSettings(key_concurrency=4))


def test_take_with_a_minimum_size_waits_for_it_then_fills_the_unit_to_it() -> None:
    s = KeyScheduler(concurrency=8, max_unit=100)
    s.add([_entry(i, f"K{i}") for i in range(10)])
    assert s.take(min_size=16) is None  # 10 queued: too few for a unit of 16
    s.add([_entry(i, f"K{i}") for i in range(10, 20)])
    u = s.take(min_size=16)
    assert len(u.entries) == 16  # not 20 / 8 = 3
    assert _offsets(u) == list(range(16))
    assert len(s.take().entries) == 1  # without a minimum: queue / concurrency


def test_workers_start_no_tiny_units_while_another_unit_runs() -> None:
    import threading

    from casestream.consumer.keyworkers import MIN_UNIT, KeyWorkers
    from casestream.retry import RetryPolicy

    release = threading.Event()
    sizes: list[int] = []
    lock = threading.Lock()

    class Slow:
        def close(self) -> None:
            pass

        def process(self, conn, decoded):  # noqa: ANN001, ANN201
            with lock:
                sizes.append(len(decoded.entries))
            release.wait(30)
            commits = {}
            for rec, _e, _x in decoded.entries:
                commits[rec.tp] = rec.offset + 1
            return SimpleNamespace(commits=commits, rewinds={})

        def forget(self, tps):  # noqa: ANN001, ANN201
            pass

    pool = SimpleNamespace(getconn=lambda: SimpleNamespace(autocommit=False, closed=False),
                           putconn=lambda conn: None)
    workers = KeyWorkers("c.units", pool, Slow, concurrency=4, max_unit=100,
                         retry=RetryPolicy(max_attempts=2))
    workers.start()
    try:
        workers.add([_entry(0, "A")])  # nothing running: a unit of one, at once
        for _ in range(1000):
            if workers.inflight == 1 and sizes:
                break
            threading.Event().wait(0.01)
        n = MIN_UNIT + 4  # n / 4 workers: units of n / 4 without a minimum
        workers.add([_entry(i, f"K{i}") for i in range(1, n + 1)])
        for _ in range(1000):
            if len(sizes) >= 2:
                break
            threading.Event().wait(0.01)
        assert sizes[0] == 1
        assert sizes[1] >= MIN_UNIT  # one unit of at least MIN_UNIT, not four of n / 4
    finally:
        release.set()
        workers.stop()


# ---------------------------------------------------------------- key queue back-pressure


def test_the_key_queue_limit_follows_batch_size_and_concurrency():
    assert key_queue_limit(500, 8) == 1000  # 2 x batch_size
    assert key_queue_limit(500, 64) == 2048  # 32 x key_concurrency


def test_a_full_key_queue_does_not_pause_the_partitions():
    # a pause purges librdkafka's prefetched records: at the limit the loop only slows down
    assert key_queue_flow(1000, 1000, paused=False) is None
    assert key_queue_flow(KEY_QUEUE_HARD * 1000 - 1, 1000, paused=False) is None


def test_partitions_pause_at_the_hard_bound_and_resume_below_the_limit():
    assert key_queue_flow(KEY_QUEUE_HARD * 1000, 1000, paused=False) is FlowStep.PAUSE
    assert key_queue_flow(KEY_QUEUE_HARD * 1000, 1000, paused=True) is None
    assert key_queue_flow(1000, 1000, paused=True) is None  # hysteresis: not at the limit yet
    assert key_queue_flow(999, 1000, paused=True) is FlowStep.RESUME
    assert key_queue_flow(0, 1000, paused=False) is None
