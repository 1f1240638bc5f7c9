"""The journeys bench's work counters: Kafka requests from ``ss`` output, statements from
PostgreSQL's log, and the per-journey budget (bench/journeys.py), without a suite."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import journeys  # noqa: E402

SS = """\
0      0      127.0.0.1:33310 127.0.0.1:19092 users:(("python",pid=11,fd=29))
\t bbr wscale:1,10 rto:204 bytes_sent:162 segs_out:10 segs_in:6 data_segs_out:4 data_segs_in:4 delivered:5
0      0      127.0.0.1:33312 127.0.0.1:19092 users:(("python",pid=11,fd=30))
\t bbr wscale:1,10 rto:204 bytes_sent:9162 segs_out:70 segs_in:60 data_segs_out:41 data_segs_in:40
0      0      127.0.0.1:33314 127.0.0.1:19092 users:(("python",pid=12,fd=9))
\t bbr wscale:1,10 rto:204 segs_out:1 segs_in:1
0      0      127.0.0.1:33316 127.0.0.1:19092 users:(("java",pid=13,fd=9))
\t bbr data_segs_out:7
"""


def test_segments_are_summed_per_process_over_its_connections() -> None:
    assert journeys.segments_by_pid(SS) == {11: 45, 13: 7}
    assert journeys.segments_by_pid("") == {}


def test_statements_are_counted_per_service_database_after_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "postgres.log"
    before = "2026-12-08 00:00:00.000 UTC [1] case_b LOG:  duration: 0.1 ms  statement: BEGIN\n"
    log.write_text(before + (
        "2026-12-08 00:00:01.000 UTC [1] case_b LOG:  duration: 0.1 ms  statement: BEGIN\n"
        "2026-12-08 00:00:01.001 UTC [1] case_b LOG:  duration: 0.2 ms  execute <unnamed>: "
        "SELECT  1 FROM cases   WHERE id = $1\n"
        "2026-12-08 00:00:01.002 UTC [1] case_b LOG:  duration: 0.1 ms  parse <unnamed>: SELECT 2\n"
        "2026-12-08 00:00:01.003 UTC [2] saga_b LOG:  duration: 0.3 ms  execute s1: "
        "SELECT 1 FROM saga\n"
        "2026-12-08 00:00:01.004 UTC [3] other LOG:  duration: 0.3 ms  statement: SELECT 3\n"
        "2026-12-08 00:00:01.005 UTC [1] case_b LOG:  duration: 0.1 ms  statement: BEGIN\n"))
    counts, end = journeys.statement_counts(log, len(before), {"case": "case_b", "saga": "saga_b"})
    assert counts == {"case": Counter({"BEGIN": 2, "SELECT 1 FROM cases WHERE id = $1": 1}),
                      "saga": Counter({"SELECT 1 FROM saga": 1})}
    assert end == log.stat().st_size


def test_budget_divides_each_counter_by_the_journeys() -> None:
    phase = journeys.Phase("saturation")
    phase.kafka_segs = {"case": 80, "saga": 40}
    phase.pg = {"case": {"xacts": 90, "rows_written": 400, "backend_cpu_ms": 100},
                "saga": {"xacts": 10, "rows_written": 200, "backend_cpu_ms": 50}}
    phase.cpu_s = {"case": 0.5, "saga": 0.2, "kafka": 3.0}
    rows = journeys.budget(phase, 10)
    assert rows["case"] == {"kafka_requests": 8.0, "pg_xacts": 9.0, "rows_written": 40.0,
                            "pg_backend_ms": 10.0, "cpu_ms": 50.0}
    assert rows["saga"]["cpu_ms"] == 20.0 and "kafka" not in rows
    assert journeys.budget(phase, 0) == {}
