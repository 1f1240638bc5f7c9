"""A relay process killed with SIGKILL under load: another instance takes over its shards
within the lease, nothing is lost, per-key order holds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import read_topics
from test_relay_support import (  # noqa: F401 - fixtures
    LoadWriter, RelayThread, base_dsn, bootstrap, check_order, count_status, dsn, settings, topic_prefix,
    wait_for,
)

LEASE_S = 3.0


def _leases(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT split_part(locked_by, '/', 1), count(*) FROM outbox_relay_lease "
                            "WHERE locked_until > now() GROUP BY 1").fetchall()
    return dict(rows)


def test_sigkilled_relay_is_taken_over_within_the_lease(
        dsn: str, bootstrap: str, topic_prefix: str, tmp_path: Path) -> None:
    log = open(tmp_path / "relay-a.log", "wb")  # noqa: SIM115
    env_vars = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "casestream.outbox.relay", "--dsn", dsn, "--bootstrap", bootstrap,
         "--name", "victim", "--lease-s", str(LEASE_S), "--batch-size", "200",
         "--poll-interval-s", "0.2", "--topic-prefix", topic_prefix],
        stdout=log, stderr=subprocess.STDOUT, env=env_vars)
    writer = LoadWriter(dsn, per_txn=10, aggregates=100, prefix="f-", seed=11, pause_s=0.01)
    survivor: RelayThread | None = None
    try:
        wait_for(lambda: _leases(dsn).get("victim") == 32, 20, "the victim to lease all shards")
        wait_for(lambda: count_status(dsn).get("published", 0) > 200, 20, "the victim to publish")
        survivor = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                                           settings(topic_prefix, lease_s=LEASE_S, batch_size=200),
                                           "survivor"))
        wait_for(lambda: _leases(dsn).get("survivor", 0) == 16, 20, "the shards to be shared")
        time.sleep(1.0)  # both busy under load
        assert proc.poll() is None, (tmp_path / "relay-a.log").read_text()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait(10)
        wait_for(lambda: _leases(dsn).get("survivor", 0) == 32, LEASE_S + 5, "the take-over")
        takeover_s = time.monotonic() - killed_at
        # Expired leases are found at the survivor's next heartbeat (every lease_s / 3).
        assert takeover_s <= LEASE_S + LEASE_S / 3 + 1.0, takeover_s
        time.sleep(1.0)
        total = writer.close()
        wait_for(lambda: count_status(dsn) == {"published": total}, 60, "every row published")
    finally:
        writer.stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if survivor is not None:
            survivor.close()
        log.close()
    expected = {(topic_prefix + "case", agg): ids for agg, ids in writer.written.items()}
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=total, timeout_s=60)
    stats = check_order(recs, expected, allow_duplicates=True)
    # Duplicates only from the victim's last, unmarked batch (<= batch_size), same ids.
    assert stats["duplicates"] <= 200, stats
    print(f"take-over after {takeover_s:.2f} s; {stats}")
