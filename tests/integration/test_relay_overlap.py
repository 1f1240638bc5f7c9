"""Overlapped batches (``RelaySettings.max_open_batches``) on real PostgreSQL and Kafka.

While a batch awaits its delivery reports, a NOTIFY claims and produces the next batch at
once; that batch must skip the open batch's aggregates. The test fails if the claim stops
excluding them (the later event of the failing aggregate would reach the topic ahead of
its predecessor) or if the relay stops overlapping (the stage trace would show no second
claim before the first batch's reports were recorded).
"""

from __future__ import annotations

import time
import uuid

import psycopg

from casestream.relay import OutboxRelay
from casestream.relay.testing import create_topics, delete_topics, read_topics

from test_relay_support import (  # noqa: F401 - fixtures
    RelayThread, base_dsn, bootstrap, dsn, env, settings, wait_for, write,
)


def _statuses(dsn: str) -> dict[tuple[str, int], str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT aggregateid, aggregate_version, status FROM outbox").fetchall()
    return {(a, v): s for a, v, s in rows}


def test_a_batch_claimed_while_another_awaits_reports_skips_its_aggregates(
        dsn: str, bootstrap: str) -> None:
    prefix = f"ov{uuid.uuid4().hex[:10]}.outbox.event."
    topic = prefix + "case"
    # The broker, not the client, rejects the first event (topic max.message.bytes), so
    # its failure arrives in a delivery report, after the next batch could be produced.
    create_topics(bootstrap, [topic], partitions=3, config={"max.message.bytes": "4000"})
    stages: list[str] = []

    def hook(stage: str) -> None:
        stages.append(stage)
        if stage == "produced" and stages.count("produced") == 1:
            write(dsn, [env("ov-a", 2), env("ov-b", 1)])
            time.sleep(0.3)  # the NOTIFY is on the LISTEN socket before any report is served

    write(dsn, [env("ov-a", 1, size=10_000)])
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap},
                        settings(prefix, max_open_batches=2), "overlap", fault_hook=hook)
    rt = RelayThread(relay)
    try:
        wait_for(lambda: _statuses(dsn).get(("ov-b", 1)) == "published"
                 and _statuses(dsn).get(("ov-a", 1)) == "failed", timeout_s=30,
                 what="ov-a v1 failed and ov-b v1 published")
        time.sleep(1.0)  # several more claims: ov-a v2 must stay held back
        statuses = _statuses(dsn)
    finally:
        rt.close()
    try:
        assert stages[:4] == ["claimed", "produced", "claimed", "produced"], stages
        assert statuses[("ov-a", 2)] == "pending", statuses
        recs = read_topics(bootstrap, [topic], expected=1, timeout_s=10)
        assert [r.key for r in recs] == ["ov-b"]
    finally:
        delete_topics(bootstrap, [topic])
