"""Unit tests of the replay's reading and worker hand-back: ``KafkaSource.consume`` returns what
the client has fetched without waiting out the poll timeout, a bounded range asks the broker for
no high watermarks, and ``run_workers`` hands each forked worker's guard rows back to the parent
(pipes read while the workers run, so a guard larger than a pipe's buffer cannot block)."""

from __future__ import annotations

from typing import Any

import pytest

from casestream.replay import parallel
from casestream.replay.engine import ReplayOptions, Replayer
from casestream.replay.errors import ReplayError
from casestream.replay.progress import Progress
from casestream.replay.source import KafkaSource


class Msg:
    def __init__(self, offset: int, partition: int = 0) -> None:
        self._o, self._p = offset, partition

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


class FakeConsumer:
    """``confluent_kafka.Consumer.consume`` semantics: returns at n messages or at the timeout."""

    def __init__(self, queued: int, arriving: int = 0) -> None:
        self.queued = [Msg(i) for i in range(queued)]
        self.arriving = [Msg(queued + i) for i in range(arriving)]
        self.calls: list[tuple[int, float]] = []

    def consume(self, num_messages: int, timeout: float) -> list[Msg]:
        self.calls.append((num_messages, timeout))
        if not self.queued and timeout > 0:
            self.queued, self.arriving = self.arriving, []
        out, self.queued = self.queued[:num_messages], self.queued[num_messages:]
        return out


def _source(consumer: FakeConsumer) -> KafkaSource:
    # a real source (its clients connect to nothing before they are used), reading the fake
    source = KafkaSource("127.0.0.1:1", ["t"], client_id="replay-reading-test")
    source.close()
    source._consumer = consumer
    return source


def test_consume_returns_a_short_batch_without_waiting_for_the_timeout() -> None:
    consumer = FakeConsumer(queued=3)
    msgs = _source(consumer).consume(2000, 0.5)
    assert [m.offset() for m in msgs] == [0, 1, 2]
    assert all(timeout == 0 for _n, timeout in consumer.calls)  # never blocked


def test_consume_waits_only_when_nothing_is_fetched_and_takes_what_came_with_it() -> None:
    consumer = FakeConsumer(queued=0, arriving=5)
    msgs = _source(consumer).consume(4, 0.5)
    assert [m.offset() for m in msgs] == [0, 1, 2, 3]
    assert consumer.calls == [(4, 0), (1, 0.5), (3, 0)]
    assert _source(FakeConsumer(queued=0)).consume(4, 0.5) == []


class RangeSource:
    """A source over one partition holding ``n`` messages; counts broker watermark queries."""

    def __init__(self, n: int) -> None:
        self.n, self.at, self.asked = n, 0, 0

    def high_watermarks(self, tps: Any) -> dict[Any, int]:
        self.asked += 1
        return {tp: self.n for tp in tps}

    def consume(self, n: int, timeout_s: float) -> list[Msg]:
        out = [Msg(o) for o in range(self.at, min(self.n, self.at + n))]
        self.at += len(out)
        return out

    def pause(self, tps: Any) -> None:
        pass

    def watermarks(self, tp: Any, cached: bool = False) -> tuple[int, int]:
        return (0, self.n)


class Planned:
    changed: dict[Any, int] = {}


class Applier:
    def decide(self, items: Any, progress: Progress) -> Planned:
        return Planned()

    def commit(self, changed: Any) -> None:
        pass


def _replayer() -> Replayer:
    from casestream.events import load_catalog
    from services import schemas_dir
    from services.decision.adapters.statistics import PROJECTION

    r = Replayer(PROJECTION, codec=None, dsn="postgresql://127.0.0.1:1/none", bootstrap="127.0.0.1:1",
                 event_types=load_catalog(schemas_dir()).event_types)  # reads and connects nothing
    assert r.progress == Progress() and r.reporter is None
    r._decode = lambda msgs, positions, ends, new: [  # type: ignore[method-assign]
        new.__setitem__(("t", m.partition()), m.offset() + 1) for m in msgs]
    return r


def test_a_bounded_range_is_read_without_asking_for_high_watermarks() -> None:
    source, writes = RangeSource(10), []

    class Writer:
        def submit(self, fn: Any, *args: Any) -> Any:
            writes.append(args[-1])

            class Done:
                def result(self) -> None:
                    return None
            return Done()

    positions = {("t", 0): 0}
    _replayer()._read_loop(object(), source, Applier(), positions, {("t", 0): 10},  # type: ignore[arg-type]
                           ReplayOptions(batch_size=4), Writer(), [])  # type: ignore[arg-type]
    assert positions == {("t", 0): 10} and len(writes) == 3
    assert source.asked == 0


class ForkedBulk:
    """A replay's bulk as ``run_workers`` drives it; ``rebuild_partitions`` records
    ``per_partition`` aggregates per partition in the guard (as committed batches would)."""

    name = "p"

    def __init__(self, per_partition: int, fail: bool = False) -> None:
        self.per_partition, self.fail = per_partition, fail

    def rebuild_partitions(self, positions: dict[Any, int], ends: dict[Any, int],
                           guard: dict[Any, int]) -> tuple[Progress, dict[Any, int]]:
        if self.fail:
            raise RuntimeError("boom")
        p = Progress()
        for (_t, part), end in ends.items():
            for i in range(self.per_partition):
                guard[("case", f"{part}-{i}")] = 2
            p.read += end - positions[("t", part)]
        return p, guard


def test_workers_hand_back_the_guard_rows_they_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "_die_with_parent", lambda: None)
    start = {("case", "0-0"): 1, ("case", "elsewhere"): 7}  # the checkpoint's rows before
    positions = {("t", p): 0 for p in range(4)}
    ends = {("t", p): 10 for p in range(4)}
    # 30,000 rows per worker: far more than a pipe's buffer
    done, changed = parallel.run_workers(ForkedBulk(15_000), positions, ends, 2, start)
    assert done.read == 40
    assert len(changed) == 60_000 and changed[("case", "0-0")] == 2
    assert ("case", "elsewhere") not in changed  # unchanged rows are not sent back


def test_a_failing_worker_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "_die_with_parent", lambda: None)
    positions = {("t", p): 0 for p in range(2)}
    with pytest.raises(ReplayError, match="failed; rerun resumes"):
        parallel.run_workers(ForkedBulk(1, fail=True), positions, {("t", p): 1 for p in range(2)}, 2, {})
