"""The pure parts of the benches: journey statistics, CPU per process tree, py-spy profile
shares (bench/journeys.py), and the side-by-side of a --fast pair (bench/common.py)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402
import journeys  # noqa: E402


def test_percentile_nearest_rank_and_unfinished_journeys_count_as_infinite():
    values = [float(i) for i in range(1, 101)]
    assert journeys.percentile(values, 50) == 50.0
    assert journeys.percentile(values, 99) == 99.0
    assert journeys.percentile(values, 100) == 100.0
    # two journeys of 100 never ended: p99 must not hide them
    assert math.isinf(journeys.percentile([*values[:98], math.inf, math.inf], 99))
    assert journeys.percentile([*values[:98], math.inf, math.inf], 95) == 95.0
    assert math.isnan(journeys.percentile([], 50))
    with pytest.raises(ValueError, match="within 0..100"):
        journeys.percentile(values, 101)


def test_summary_ms_converts_seconds():
    s = journeys.summary_ms([0.010, 0.020, 0.030, 0.040])
    assert s == {"n": 4, "p50": 20.0, "p95": 40.0, "p99": 40.0, "max": 40.0}


def test_sustained_rate_leaves_out_the_warm_up_and_what_ended_after_the_clock():
    # clock 0..10 s, warm-up 20%: the window is 2..10 s (8 s)
    ends = [1.0, 1.5, *[2.0 + i * 0.1 for i in range(80)], 10.5, 11.0]
    assert journeys.sustained_rate(ends, 0.0, 10.0) == pytest.approx(80 / 8)
    with pytest.raises(ValueError, match="start < stop"):
        journeys.sustained_rate(ends, 5.0, 5.0)


def test_journey_report_latency_from_the_saga_end_and_unfinished_ones():
    phase = journeys.Phase("rate 2/s", t0=100.0, t1=110.0)
    phase.started = [journeys.Started("a", 101.0, 101.01), journeys.Started("b", 103.0, 103.02),
                     journeys.Started("c", 105.0, 105.03)]
    ends = {"a": 101.5, "b": 104.0}  # c never ended
    rep = journeys.journey_report(phase, ends, {"a": 101.005, "b": 103.01})
    assert rep["started"] == 3 and rep["ended"] == 2
    assert rep["journey_ms"]["p50"] == pytest.approx(1000.0)
    assert math.isinf(rep["journey_ms"]["p99"])
    assert rep["submitted_to_end_ms"]["n"] == 2
    assert rep["submit_http_ms"]["max"] == pytest.approx(30.0)
    assert rep["per_s"] == pytest.approx(1 / 8)  # a ended in the warm-up (before 102 s)


def test_tree_cpu_sums_a_process_and_its_descendants_only():
    table = {1: (0, 5.0), 10: (1, 1.0), 11: (10, 2.0), 12: (11, 0.5), 20: (1, 7.0)}
    assert journeys.tree_cpu({"svc": 10, "other": 20, "gone": 99}, table) == {
        "svc": 3.5, "other": 7.0, "gone": 0.0}


def test_tree_cpu_counts_a_named_descendant_under_its_own_name_only():
    # the bench (1) started the services (10, 20) as its children: the bench's figure is its
    # own client's CPU, each service's (with its own children) is the service's
    table = {1: (0, 0.5), 10: (1, 3.0), 11: (10, 1.0), 20: (1, 2.0), 30: (1, 0.25)}
    assert journeys.tree_cpu({"bench": 1, "case": 10, "saga": 20}, table) == {
        "bench": 0.75, "case": 4.0, "saga": 2.0}


def test_tree_cpu_reads_this_process_from_proc():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        got = journeys.tree_cpu({"me": journeys.os.getpid()})
        assert got["me"] > 0.0
        table = journeys._proc_table()
        assert table[child.pid][0] == journeys.os.getpid()
    finally:
        child.kill()
        child.wait()


def test_profile_shares_leaf_and_inclusive_frames():
    raw = "\n".join([
        "process 1;thread (0x1);run (casestream/consumer/runtime.py:10);wait (psycopg/conn.py:5) 6",
        "process 1;thread (0x1);run (casestream/consumer/runtime.py:10);decode (fastavro/x.py:1) 3",
        "process 1;thread (0x2);serve (services/case/app.py:3) 1",
        "garbage line",
    ])
    leaves, inclusive = journeys.profile_shares(raw)
    assert leaves[0] == ("wait (psycopg/conn.py:5)", 0.6)
    assert dict(inclusive)["run (casestream/consumer/runtime.py:10)"] == pytest.approx(0.9)
    assert "wait (psycopg/conn.py:5)" not in dict(inclusive)  # not our code
    assert journeys.profile_shares("") == ([], [])


def test_busiest_names_a_service_not_the_infrastructure():
    assert journeys.busiest({"postgres": 30.0, "case": 9.0, "saga": 12.0, "bench": 40.0}) == "saga"


def test_parse_args_refuses_bad_rates():
    with pytest.raises(SystemExit):
        journeys.parse_args(["--rates", "25,abc"])
    with pytest.raises(SystemExit):
        journeys.parse_args(["--rates", "0"])
    assert journeys.parse_args(["--rates", "10, 20"]).rates == [10.0, 20.0]
    assert journeys.parse_args(["--rates", ""]).rates == []


def test_numeric_fields_of_a_bench_record():
    rec = {"bench": "consumer", "at": "2026-12-01T00:00:00+00:00", "loadavg": [1.0, 2.0, 3.0],
           "events": 100, "rates": {"b4": [4948, 4421]}, "ok": True, "durability": "on"}
    assert common.numeric_fields(rec) == {"events": 100.0, "rates.b4.0": 4948.0,
                                          "rates.b4.1": 4421.0}


def test_fast_runs_the_bench_twice_and_prints_both_figures(tmp_path, monkeypatch):
    """A bench calling ``durability(fast=True)`` runs itself with synchronous_commit=on and
    then off, and prints both BENCH figures side by side."""
    script = tmp_path / "fakebench.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(BENCH)!r})\n"
        "from common import durability, json_record\n"
        "fast = '--fast' in sys.argv\n"
        "label = durability(fast)\n"
        "mode = os.environ['PGOPTIONS'].split('=')[-1]\n"
        "json_record('fake', events_s=100 if mode == 'on' else 250, argv=sys.argv[1:])\n")
    monkeypatch.delenv(common.PAIR_CHILD, raising=False)
    monkeypatch.delenv("PGOPTIONS", raising=False)
    out = subprocess.run([sys.executable, str(script), "--x", "1", "--fast"], text=True,
                         capture_output=True, check=True).stdout
    lines = out.splitlines()
    on = next(line for line in lines if line.startswith("[sync on] BENCH"))
    fast = next(line for line in lines if line.startswith("[--fast]  BENCH"))
    assert '"events_s": 100' in on and '"--fast"' not in on
    assert '"events_s": 250' in fast and '"--fast"' in fast
    row = next(line for line in lines if line.strip().startswith("events_s"))
    assert "on          100" in row and "fast          250" in row and "2.50 ×" in row
    assert lines[-1].startswith("BENCH ") and '"pair"' in lines[-1]


def test_cpu_per_journey_divides_by_the_journeys_in_the_clock_without_the_bench():
    per = journeys.cpu_per_journey({"kafka": 6.0, "case": 4.5, "bench": 9.0}, per_s=25.0, span_s=12.0)
    assert per == pytest.approx({"kafka": 20.0, "case": 15.0, "total": 35.0})  # 300 journeys
    assert journeys.cpu_per_journey({"kafka": 1.0}, per_s=0.0, span_s=10.0) == {}
    assert journeys.journeys_ceiling(80.0, 2) == pytest.approx(25.0)
    assert math.isinf(journeys.journeys_ceiling(0.0, 2))
