"""A consumer process SIGSTOPped past its session timeout (a zombie) and then resumed, while
another member took its partition over: the group has fenced its generation, so its offset
commit is refused or its partition is reported lost; what it had not committed is done again
by the new owner, and the inbox leaves one effect per event (no doubled effect, none lost).

Both members are ``python -m casestream.testing.consumer`` (a real ConsumerRuntime on the real
Kafka and PostgreSQL, session timeout 6 s, the broker's minimum).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from casestream.testing.consumer import Harness, committed, create_topic, produce_events, wait_until
from tests.support.events import case_returned

N = 40
SESSION_MS = 6000


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.zombie")


def _child(env: Harness, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "casestream.testing.consumer", "--name", env.name,
           "--topic", env.topic, "--dsn", env.dsn, "--bootstrap", env.bootstrap,
           "--table", env.projection.table, "--batch-size", "5",
           "--session-timeout-ms", str(SESSION_MS), *env.codec_args, *extra]
    # PGAPPNAME (libpq) names the children's sessions in pg_stat_activity
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PGAPPNAME=env.name))


def _waits_on_inbox(env: Harness) -> bool:
    import psycopg

    with psycopg.connect(env.dsn) as conn:
        return bool(conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock' "
            "AND query ~ '^\\s*INSERT INTO consumer_inbox'", (env.name,)).fetchone()[0])


def test_a_consumer_resumed_after_its_session_timeout_is_fenced_and_nothing_is_doubled(
        env: Harness) -> None:
    create_topic(env.bootstrap, env.topic, 1)
    events = [case_returned(f"Z{i % 4}", i // 4 + 1, seq=i) for i in range(N)]
    produce_events(env.bootstrap, env.topic, env.codec, events)
    # 100 ms per event: the zombie is stopped inside a batch, its transaction open.
    zombie = _child(env, "--handler-wait-ms", "100", "--idle-exit", "6")
    other: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: len(env.rows()) >= 7, 40, 0.05)
        os.kill(zombie.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        time.sleep(0.5)  # a COMMIT sent just before the stop lands
        done_by_zombie = len(env.rows())
        other = _child(env, "--idle-exit", "6")
        # Past the session timeout the group moves the partition to the other member: it
        # applies events, or its first batch waits for the stopped member's open transaction
        # (the inbox rows of the events it was handling).
        # (A starting member's schema check must not wait for the stopped one's transaction.)
        wait_until(lambda: len(env.rows()) > done_by_zombie or _waits_on_inbox(env), 30, 0.2)
        taken_after = time.monotonic() - stopped_at
        os.kill(zombie.pid, signal.SIGCONT)
        z_out, z_err = zombie.communicate(timeout=60)
        o_out, o_err = other.communicate(timeout=60)
    finally:
        for p in (zombie, other):
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
    assert zombie.returncode == 0, z_err[-3000:]
    assert other.returncode == 0, o_err[-3000:]
    z_stats, o_stats = json.loads(z_out.splitlines()[-1]), json.loads(o_out.splitlines()[-1])
    print(f"zombie {z_stats} ({done_by_zombie} effects when stopped), other {o_stats}; "
          f"taken over {taken_after:.1f} s after the stop")
    assert taken_after >= SESSION_MS / 1000 * 0.9
    assert o_stats["applied"] + o_stats["duplicates"] > 0, o_stats
    print("\n".join(line for line in z_err.splitlines() if "lost" in line or "commit" in line))
    # The resumed member learnt it had been fenced: a lost partition or a refused commit.
    assert ("partitions lost" in z_err or "offset commit failed" in z_err), z_err[-3000:]
    env.one_effect_each(e.event_id for e in events)
    assert z_stats["applied"] + o_stats["applied"] == N, (z_stats, o_stats)
    assert committed(env.bootstrap, env.name, env.topic) == {0: N}
