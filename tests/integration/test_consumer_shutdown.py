"""Graceful shutdown with a bound: a service process whose handler cannot finish gets SIGTERM.

The child is a real service process (``run_service`` + ``ServiceProcess``, one consumer runtime
on the real Kafka and PostgreSQL, ``shutdown_grace_s=2``). Its handler waits on a row lock the
test holds (lock), sleeps in an "external call" longer than the grace and then writes (late),
or sleeps far longer than the process may live (stuck: its thread must not be joined at
exit). Each time the process must exit within the grace plus a small bound, commit
neither the blocked event's effect nor its offset, say so in its log, and the next member
must apply that event exactly once.

Key-parallel (``key_concurrency=4``, lock): besides the blocked event, an event of another
aggregate is applied by another worker after it and one of the blocked aggregate waits queued
behind it; only the finished units' offsets may be committed (none past the blocked event),
the log names the running unit and the offsets redelivered, and the next member applies the
blocked and queued events once (the inbox skips the one already applied).
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

from casestream.testing.consumer import Harness, committed, create_topic, produce_events, wait_until
from tests.support.events import case_returned

GRACE_S = 2.0
EXIT_BOUND_S = GRACE_S + 8.0

CHILD = r'''
import sys, time
from starlette.applications import Starlette
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.handlers import HandlerKind, HandlerRegistry
from casestream.service.process import ServiceProcess, configure_logging, run_service
from casestream.testing.consumer import EffectsProjection, real_codec
from psycopg_pool import ConnectionPool

name, topic, dsn, bootstrap, table, registry_url, mode, lock_table, grace, keys = sys.argv[1:11]
projection = EffectsProjection(table)

def handle(ctx, event):
    if event.payload.get("reason") == "seq=1":
        print("BLOCKING", flush=True)
        if mode == "lock":
            ctx.conn.execute(f"SELECT 1 FROM {lock_table} WHERE id = 1 FOR UPDATE")
        elif mode == "stuck":
            time.sleep(600)  # an external call that never returns in time
        else:
            time.sleep(float(grace) + 1.0)  # an external call that returns after the grace
    projection.handle(ctx, event)

def build():
    configure_logging(name)
    registry = HandlerRegistry()
    registry.add("CaseReturned", handle, kind=HandlerKind.PROJECTION)
    pool = ConnectionPool(dsn, min_size=1, max_size=int(keys) + 2, open=True,
                          kwargs={"prepare_threshold": None})
    runtime = ConsumerRuntime(name, [topic], registry, real_codec(registry_url), pool,
                              {"bootstrap.servers": bootstrap, "session.timeout.ms": 6000,
                               "heartbeat.interval.ms": 1000},
                              ConsumerSettings(batch_size=10, shutdown_grace_s=float(grace),
                                               key_concurrency=int(keys)))
    return ServiceProcess(name=name, app=Starlette(), host="127.0.0.1", port=0, workers={"consumer": runtime.run},
                          closers=[pool.close, linger], shutdown_timeout_s=float(grace) + 10)

def linger():
    if mode == "late":
        time.sleep(2.0)  # the process lives on while the abandoned handler returns and writes

run_service(build)
'''


@pytest.fixture
def env(consumer_harness: Any) -> Harness:
    return consumer_harness("test.shutdown")


def _blocked(env: Harness, mode: str, keys: int = 1) -> tuple[str, float, list[str]]:
    """Run the child until seq=1 blocks, SIGTERM it; return (log, seconds to exit, ids).
    With ``keys`` > 1 (key-parallel) an event of aggregate S1 (seq=2, applied meanwhile)
    and S0's next one (seq=3, queued behind seq=1) follow the blocked event."""
    lock_table = env.projection.table + "_lock"
    create_topic(env.bootstrap, env.topic, 1)
    first = case_returned("S0", 1, seq=0)
    produce_events(env.bootstrap, env.topic, env.codec, [first])
    with psycopg.connect(env.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {lock_table} (id int PRIMARY KEY)")
        conn.execute(f"INSERT INTO {lock_table} VALUES (1)")
    holder = psycopg.connect(env.dsn)
    holder.execute(f"SELECT 1 FROM {lock_table} WHERE id = 1 FOR UPDATE")  # held until rollback
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, env.name, env.topic, env.dsn, env.bootstrap,
         env.projection.table, str(env.registry_url), mode, lock_table, str(GRACE_S), str(keys)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: len(env.rows()) == 1 or proc.poll() is not None, 60)
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        wait_until(lambda: committed(env.bootstrap, env.name, env.topic) == {0: 1}, 20)
        second = case_returned("S0", 2, seq=1)
        later = [case_returned("S1", 1, seq=2), case_returned("S0", 3, seq=3)] if keys > 1 else []
        produce_events(env.bootstrap, env.topic, env.codec, [second, *later])
        assert proc.stdout is not None
        for line in proc.stdout:
            if "BLOCKING" in line:
                break
        if later:  # S1's event applied by another worker while S0's is blocked
            wait_until(lambda: len(env.rows()) == 2, 20)
        time.sleep(0.5)  # inside the statement (or the call)
        proc.terminate()
        sent = time.monotonic()
        out, _ = proc.communicate(timeout=EXIT_BOUND_S + 30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        holder.rollback()
        holder.close()
    return out, took, [first.event_id, second.event_id, *(e.event_id for e in later)]


@pytest.mark.parametrize("mode", ["lock", "late", "stuck"])
def test_sigterm_with_a_blocked_handler_exits_within_the_grace_and_redelivers(
        env: Harness, mode: str) -> None:
    out, took, ids = _blocked(env, mode)
    print(f"{mode}: exited {took:.2f} s after SIGTERM (grace {GRACE_S} s)\n{out[-3000:]}")
    assert took <= EXIT_BOUND_S, f"exit took {took:.1f} s\n{out[-3000:]}"
    assert "did not finish within shutdown_grace_s" in out, out[-3000:]
    redone = out.index("did not finish within shutdown_grace_s")
    assert "@2" not in out[redone:], "an offset past the abandoned event was committed"
    assert [r[0] for r in env.rows()] == ids[:1], "the abandoned event's effect was committed"
    assert committed(env.bootstrap, env.name, env.topic) == {0: 1}
    # the next member applies it once
    again = subprocess.run(
        [sys.executable, "-m", "casestream.testing.consumer", "--name", env.name, "--topic", env.topic,
         "--dsn", env.dsn, "--bootstrap", env.bootstrap, "--table", env.projection.table,
         *env.codec_args, "--expect", "1", "--idle-exit", "10"],
        capture_output=True, text=True, timeout=90)
    assert again.returncode == 0, again.stderr[-2000:]
    env.one_effect_each(ids)
    assert committed(env.bootstrap, env.name, env.topic) == {0: 2}


def test_sigterm_in_key_parallel_mode_commits_only_finished_units_and_exits_within_the_grace(
        env: Harness) -> None:
    out, took, ids = _blocked(env, "lock", keys=4)
    print(f"key-parallel: exited {took:.2f} s after SIGTERM (grace {GRACE_S} s)\n{out[-3000:]}")
    assert took <= EXIT_BOUND_S, f"exit took {took:.1f} s\n{out[-3000:]}"
    assert "key-parallel units in flight" in out, out[-3000:]
    redone = out[out.index("key-parallel units in flight"):]
    assert f"{env.topic}[0]@1-1)" in redone, redone[:1000]  # the running unit: the blocked event
    assert f"redelivered to the next member: {env.topic}[0]@1-3" in redone, redone[:1000]
    assert "@2" not in redone and "@4" not in redone, "an offset past the blocked event was committed"
    assert sorted(r[0] for r in env.rows()) == sorted([ids[0], ids[2]]), \
        "only the first event and the other aggregate's may have been applied"
    assert committed(env.bootstrap, env.name, env.topic) == {0: 1}
    again = subprocess.run(
        [sys.executable, "-m", "casestream.testing.consumer", "--name", env.name, "--topic", env.topic,
         "--dsn", env.dsn, "--bootstrap", env.bootstrap, "--table", env.projection.table,
         *env.codec_args, "--expect", "3", "--idle-exit", "10"],
        capture_output=True, text=True, timeout=90)
    assert again.returncode == 0, again.stderr[-2000:]
    env.one_effect_each(ids)
    assert committed(env.bootstrap, env.name, env.topic) == {0: 4}
