"""bench/peers.py without infrastructure: its arguments (groups, --quick sizes) and the checks
a variant's result must pass before its figure counts."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import peers  # noqa: E402


def test_default_runs_every_group_and_quick_shrinks_the_sizes():
    args = peers.parse_args([])
    assert args.groups == ["consumer", "keyed", "relay", "replay", "debezium"]
    assert (args.events, args.aggregates, args.rounds, args.levels) == (40_000, 4_000, 3, [8, 16, 32, 64])
    quick = peers.parse_args(["--quick"])
    assert quick.groups == ["consumer", "keyed"]  # Debezium needs Kafka Connect: only when asked
    assert (quick.events, quick.rounds, quick.levels) == (6_000, 1, [8, 32])
    assert quick.events % quick.aggregates == 0


def test_only_and_skip_select_groups_and_unknown_names_are_refused(capsys):
    assert peers.parse_args(["--only", "debezium,consumer"]).groups == ["consumer", "debezium"]
    assert peers.parse_args(["--skip", "keyed,relay,replay,debezium"]).groups == ["consumer"]
    assert peers.parse_args(["--quick", "--only", "debezium"]).groups == ["debezium"]
    with pytest.raises(SystemExit) as exc:
        peers.parse_args(["--only", "kafka_streams"])
    assert exc.value.code == 2
    assert "unknown group(s) kafka_streams" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        peers.parse_args(["--variants", "hand,kafka_streams"])
    with pytest.raises(SystemExit):
        peers.parse_args(["--events", "1001", "--aggregates", "10"])


def _state(**kw):
    base = dict(projection_rows=100, projection_max_version=10, inbox_rows=1000, guard_rows=100,
                off_last_version=0)
    return peers.ConsumerState(**{**base, **kw})


def test_check_consumer_passes_the_state_of_every_event_applied_once():
    peers.check_consumer(_state(), events=1000, aggregates=100, full=True)


@pytest.mark.parametrize(("change", "message"), [
    ({"projection_rows": 99}, "projection has 99 rows"),
    ({"projection_max_version": 9}, "up to version 9"),
    ({"inbox_rows": 999}, "inbox holds 999"),
    ({"guard_rows": 98}, "98 guard rows"),
    ({"off_last_version": 3}, "3 projection rows not at their last version"),
])
def test_check_consumer_refuses_a_lost_doubled_or_out_of_order_result(change, message):
    with pytest.raises(peers.ResultError, match=message):
        peers.check_consumer(_state(**change), events=1000, aggregates=100, full=True)


def test_check_consumer_of_a_partial_run_checks_order_and_inbox_not_the_row_count():
    peers.check_consumer(_state(projection_rows=40, guard_rows=40, inbox_rows=50,
                                projection_max_version=2), events=50, aggregates=100, full=False)
    with pytest.raises(peers.ResultError, match="not at their last version"):
        peers.check_consumer(_state(projection_rows=40, guard_rows=40, inbox_rows=50,
                                    off_last_version=1), events=50, aggregates=100, full=False)


def test_check_order_wants_every_key_at_1_2_3_and_the_count():
    peers.check_order({"a": [1, 2, 3], "b": [1]}, events=4)
    with pytest.raises(peers.ResultError, match="key a"):
        peers.check_order({"a": [1, 3, 2], "b": [1]}, events=4)
    with pytest.raises(peers.ResultError, match="key a"):
        peers.check_order({"a": [1, 1, 2]}, events=3)  # one delivered twice
    with pytest.raises(peers.ResultError, match="2 events handled, want 3"):
        peers.check_order({"a": [1, 2]}, events=3)


def _ev(agg: str, version: int, eid: str) -> SimpleNamespace:
    return SimpleNamespace(aggregate_id=agg, aggregate_version=version, event_id=eid)


def test_the_hand_written_guard_applies_claimed_events_above_the_stored_version_in_order():
    evs = [_ev("a", 3, "e1"), _ev("a", 4, "e2"), _ev("b", 1, "e3"), _ev("a", 4, "e4"),
           _ev("c", 2, "e5")]
    # e3 was claimed before (a replay), the guard of a holds 3
    apply, last = peers._to_apply(evs, {"e1", "e2", "e4", "e5"}, {"a": 3})
    assert [e.event_id for e in apply] == ["e2", "e5"]
    assert last == {"a": 4, "c": 2}


def _rows(rate, x_b4=None, cpu=50.0):
    return [{"events_per_s": rate, "x_b4": x_b4, "cpu_us_per_event": cpu, "load": "1.0 1.0 1.0"}]


def test_floors_from_one_runs_figures():
    results = {
        "consumer": {"b4": _rows(10_000, 1.0), "cs_batch": _rows(7_600, 0.76),
                     "hand": _rows(7_700, 0.77), "fs_batch": _rows(5_000, 0.5)},
        "keyed": {"cs_thread": {"8": {"events_per_s": 1_200, "x_ideal": 0.75}},
                  "cs_coro": {"8": {"events_per_s": 1_000, "x_ideal": 0.62}},
                  "pyr": {"8": {"events_per_s": 1_100, "x_ideal": 0.69}}},
        "relay": {"relay_vs_b5": 0.91, "latency": {"p99_ms": 21.5}},
        "replay": {"case.dashboard": {"ratio_b2": 0.6}, "audit.timeline": {"ratio_b2": 0.59}},
    }
    got = {name: met for name, _figure, met in peers.floors(results)}
    assert got == {
        "consumer, batch handler >= 0.75 x B4": True,
        "consumer, batch handler >= the best peer (hand)": False,  # 7,600 < 7,700
        "key-parallel cs_thread, C = 8: >= 0.7 x ideal": True,
        "key-parallel cs_thread, C = 8: >= Pyrallel": True,
        "key-parallel cs_coro, C = 8: >= 0.7 x ideal": False,
        "key-parallel cs_coro, C = 8: >= Pyrallel": False,  # 1,000 < 1,100
        "relay >= 0.9 x B5": True,
        "commit -> topic p99 <= 20 ms at 1,000 events/s": False,
        "replay case.dashboard >= 0.6 x B2": True,
        "replay audit.timeline >= 0.6 x B2": False,
    }
    assert peers.floors({}) == []
