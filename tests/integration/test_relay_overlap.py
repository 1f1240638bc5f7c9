"""Overlapped batches (``RelaySettings.max_open_batches``) on real PostgreSQL and Kafka.

While a batch awaits its delivery reports, a NOTIFY claims and produces the next batch at
once; that batch must skip the open batch's aggregates. The test fails if the claim stops
excluding them (the later event of the failing aggregate would reach the topic ahead of
its predecessor) or if the relay stops overlapping (the stage trace would show no second
claim before the first batch's reports were recorded).
"""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import create_topics, delete_topics, read_topics

from test_relay_support import (  # noqa: F401 - fixtures
    RelayThread, base_dsn, bootstrap, dsn, env, settings, topic_prefix, wait_for, write,
)


def _statuses(dsn: str) -> dict[tuple[str, int], str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT aggregateid, aggregate_version, status FROM outbox").fetchall()
    return {(a, v): s for a, v, s in rows}


def _lower_limit(bootstrap: str, topic: str, limit: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(limit),
                    incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(15)


def test_a_batch_claimed_while_another_awaits_reports_skips_its_aggregates(
        dsn: str, bootstrap: str) -> None:
    prefix = f"ov{uuid.uuid4().hex[:10]}.outbox.event."
    topic = prefix + "case"
    create_topics(bootstrap, [topic], partitions=3)
    stages: list[str] = []

    def hook(stage: str) -> None:
        stages.append(stage)
        if stage == "produced" and stages.count("produced") == 2:
            write(dsn, [env("ov-a", 2), env("ov-b", 1)])
            time.sleep(0.3)  # the NOTIFY is on the LISTEN socket before any report is served

    write(dsn, [env("ov-w", 1)])
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                        settings(prefix, max_open_batches=2), "overlap", fault_hook=hook)
    rt = RelayThread(relay)
    try:
        wait_for(lambda: _statuses(dsn).get(("ov-w", 1)) == "published", timeout_s=30,
                 what="ov-w v1 published")
        # The relay read the topic's limit (1 MiB) for ov-w; lowered now, only the broker,
        # not the relay's size check, rejects the first event, so its failure arrives in a
        # delivery report, after the next batch could be produced.
        _lower_limit(bootstrap, topic, 4000)
        write(dsn, [env("ov-a", 1, size=10_000)])
        wait_for(lambda: _statuses(dsn).get(("ov-b", 1)) == "published"
                 and _statuses(dsn).get(("ov-a", 1)) == "failed", timeout_s=30,
                 what="ov-a v1 failed and ov-b v1 published")
        time.sleep(1.0)  # several more claims: ov-a v2 must stay held back
        statuses = _statuses(dsn)
    finally:
        rt.close()
    try:
        assert stages[4:8] == ["claimed", "produced", "claimed", "produced"], stages
        assert statuses[("ov-a", 2)] == "pending", statuses
        recs = read_topics(bootstrap, [topic], expected=2, timeout_s=10)
        assert [r.key for r in recs if r.key != "ov-w"] == ["ov-b"]
    finally:
        delete_topics(bootstrap, [topic])


def test_a_later_event_held_back_by_an_open_batch_is_claimed_when_that_batch_settles(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """Its NOTIFY was consumed by the claim that had to skip it: the relay must claim again
    after settling, not sleep until the polling fallback (here 5 s)."""
    wrote: list[float] = []

    def hook(stage: str) -> None:
        if stage == "produced" and not wrote:
            write(dsn, [env("ov-late", 2)])
            wrote.append(time.monotonic())
            time.sleep(0.3)  # its NOTIFY is queued before the open batch's report is served

    write(dsn, [env("ov-late", 1)])
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                        settings(topic_prefix, poll_interval_s=5.0, lease_s=30.0), "late-next",
                        fault_hook=hook)
    rt = RelayThread(relay)
    try:
        wait_for(lambda: _statuses(dsn).get(("ov-late", 2)) == "published", timeout_s=20,
                 what="ov-late v2 published")
        took = time.monotonic() - wrote[0]
    finally:
        rt.close()
    assert took < 2.0, f"v2 waited {took:.2f} s: picked up by the polling fallback"
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=2, timeout_s=10)
    assert len(recs) == 2 and recs[0].partition == recs[1].partition
    ordered = sorted(recs, key=lambda r: r.offset)
    assert [json.loads(r.value)["v"] for r in ordered] == [1, 2]


def test_a_database_error_while_recording_keeps_the_batch_open_and_produces_nothing_twice(
        dsn: str, bootstrap: str, topic_prefix: str) -> None:
    """The bookkeeping of a fully delivered batch fails once (database error): the batch is
    recorded after the reconnect, and none of its rows is produced again."""
    failed: list[str] = []

    def hook(stage: str) -> None:
        if stage == "delivered" and not failed:
            failed.append(stage)
            raise psycopg.OperationalError("simulated: server closed the connection")

    envs = [env(f"ov-db-{i}", 1) for i in range(5)]
    write(dsn, envs)
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(topic_prefix),
                        "db-error", fault_hook=hook)
    rt = RelayThread(relay)
    try:
        wait_for(lambda: all(_statuses(dsn).get((e.aggregate_id, 1)) == "published" for e in envs),
                 timeout_s=30, what="all five published")
        time.sleep(1.0)  # a few more claims: nothing may be produced again
    finally:
        rt.close()
    assert failed and relay.metrics.db_errors_total == 1
    recs = read_topics(bootstrap, [topic_prefix + "case"], expected=5, timeout_s=10)
    assert sorted(r.headers["id"].decode() for r in recs) == sorted(e.event_id for e in envs)
