"""Relays joining and leaving under a steady writer: shards change hands many times, no
instance crashes, and no row is published twice or lost.

A relay gives a shard away only between batches, after its last batch's bookkeeping has
committed; the next owner claims only rows that are still pending. The test fails if a
shard is released while a delivered batch is still being marked published (the new owner
would produce those rows again): a trigger makes each marking statement take 0.2 s, as on a
loaded database, so that window is wide enough to be hit within the run.
"""

from __future__ import annotations

import logging
import random
import re
import time

import psycopg
import pytest

from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import read_topics
from test_relay_support import (  # noqa: F401 - fixtures
    LoadWriter, RelayThread, base_dsn, bootstrap, check_order, count_status, dsn, settings, topic_prefix,
    wait_for,
)

LEASE_S = 3.0
CHURN_S = 24.0


def test_relays_joining_and_leaving_publish_every_row_once(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    rng = random.Random(37)
    cfg = {"bootstrap.servers": bootstrap}

    def start(n: int) -> RelayThread:
        return RelayThread(OutboxRelay(dsn, cfg, settings(topic_prefix, lease_s=LEASE_S, batch_size=100),
                                       f"handover-{n}"))

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION slow_marking() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN PERFORM pg_sleep(0.2); RETURN NULL; END $$")
        conn.execute("CREATE TRIGGER slow_marking AFTER UPDATE ON outbox "
                     "FOR EACH STATEMENT EXECUTE FUNCTION slow_marking()")
    writer = LoadWriter(dsn, per_txn=5, aggregates=200, prefix="h-", seed=37, pause_s=0.02)
    relays = [start(0), start(1)]
    started, stopped = 2, 0
    try:
        deadline = time.monotonic() + CHURN_S
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(1.0, 2.5))
            if len(relays) < 4 and (len(relays) <= 2 or rng.random() < 0.5):
                relays.append(start(started))
                started += 1
            else:
                relays.pop(rng.randrange(len(relays))).close()  # a clean stop, not a crash
                stopped += 1
        total = writer.close()
        wait_for(lambda: count_status(dsn) == {"published": total}, 40, "every row published")
    finally:
        writer.stop.set()
        for rt in relays:
            rt.close()
    expected = {(topic_prefix + "case", agg): ids for agg, ids in writer.written.items()}
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=total, timeout_s=30)
    stats = check_order(recs, expected, allow_duplicates=True)
    print(f"{started} relays started, {stopped} stopped; {total} rows; {stats}")
    assert stats["duplicates"] == 0, stats


def test_relays_closed_with_their_shutdown_budget_spent_say_how_many_rows_may_be_doubled(
        dsn: str, bootstrap: str, topic_prefix: str, caplog) -> None:
    """A relay stopped with ``shutdown_timeout_s`` too short for its delivery reports (here
    1 ms, under a backlog) records what was reported, purges what was not sent and logs how
    many rows were sent without a report: the next owner publishes those again, so the
    duplicates on the topic never exceed the sum of those counts; nothing is lost."""
    rng = random.Random(38)
    cfg = {"bootstrap.servers": bootstrap}
    caplog.set_level(logging.INFO, logger="casestream.relay")

    def start(n: int) -> RelayThread:
        return RelayThread(OutboxRelay(dsn, cfg, settings(topic_prefix, lease_s=LEASE_S, batch_size=500,
                                                          shutdown_timeout_s=0.001),
                                       f"budget-{n}"))

    writer = LoadWriter(dsn, per_txn=50, aggregates=300, prefix="b-", seed=38, pause_s=0.0)
    relay, closes = start(0), 0
    try:
        for n in range(1, 9):
            time.sleep(rng.uniform(0.4, 1.2))
            relay.close()  # a clean stop whose budget is spent at once
            closes += 1
            relay = start(n)
        total = writer.close()
        wait_for(lambda: count_status(dsn) == {"published": total}, 60, "every row published")
    finally:
        writer.stop.set()
        relay.close()
    said = [int(m.group(1)) for m in (re.search(r"ran out: (\d+) rows were sent without", r.getMessage())
                                      for r in caplog.records) if m]
    clean = sum("nothing will be published twice" in r.getMessage() for r in caplog.records)
    expected = {(topic_prefix + "case", agg): ids for agg, ids in writer.written.items()}
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=total, timeout_s=60)
    stats = check_order(recs, expected, allow_duplicates=True)
    print(f"{closes} closes with a 1 ms budget ({clean} clean); {total} rows; {stats}; rows the "
          f"log said may be doubled: {sum(said)} ({said})")
    assert len(said) + clean == closes + 1, "every close says whether rows may be doubled"
    assert stats["duplicates"] <= sum(said), stats
