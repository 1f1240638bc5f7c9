"""Record sizes against the topic's ``max.message.bytes`` on real PostgreSQL and Kafka.

The broker rejects a whole record batch that is larger than the topic's limit and
librdkafka reports that error on every message of the batch. These tests fail if the relay
lets such a rejection mark rows that fit on their own (``failed`` with
``MSG_SIZE_TOO_LARGE``), if a row too large for the topic is not the only row failed, or if
a later event of the failed row's aggregate is published past it.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from casestream.outbox.relay import OutboxRelay
from casestream.testing.relay import create_topics, delete_topics, read_topics

from test_relay_support import (  # noqa: F401 - fixtures
    base_dsn, bootstrap, dsn, env, run_until_idle, settings, write,
)


def _rows(dsn: str) -> dict[tuple[str, int], tuple[str, str | None]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT aggregateid, aggregate_version, status, last_error FROM outbox").fetchall()
    return {(a, v): (s, e) for a, v, s, e in rows}


@pytest.fixture
def prefix(bootstrap: str):
    p = f"sz{uuid.uuid4().hex[:10]}.outbox.event."
    yield p
    delete_topics(bootstrap, [p + "case"])


@pytest.mark.parametrize("batch_size", [None, 100_000], ids=["default-batch", "small-batch"])
def test_a_row_too_large_for_the_topic_fails_alone_and_holds_its_aggregate(
        dsn: str, bootstrap: str, prefix: str, batch_size: int | None) -> None:
    # Writer and producer configured for 2 MB, so only the topic (max.message.bytes, 1 MiB by
    # default) can refuse the row: one 1.5 MB row, its aggregate's next event, and 60 small
    # rows of 60 other aggregates, all in one transaction.
    create_topics(bootstrap, [prefix + "case"], partitions=3)
    write(dsn, [env("big", 1, size=1_500_000), env("big", 2)]
          + [env(f"small-{i}", 1) for i in range(60)], max_message_bytes=2_000_000)
    config = {"bootstrap.servers": bootstrap, "message.max.bytes": 2_000_000}
    if batch_size is not None:
        config["batch.size"] = batch_size
    relay = OutboxRelay(dsn, config, settings(prefix), "sizes")
    try:
        run_until_idle(relay)
    finally:
        relay.close()
    rows = _rows(dsn)
    assert rows[("big", 1)][0] == "failed"
    reason = rows[("big", 1)][1] or ""
    assert "MSG_SIZE_TOO_LARGE" in reason and "max.message.bytes" in reason, reason
    assert rows[("big", 2)] == ("pending", None), rows[("big", 2)]
    assert {k: s for k, (s, _) in rows.items() if k[0] != "big"} == \
        {(f"small-{i}", 1): "published" for i in range(60)}
    recs = read_topics(bootstrap, [prefix + "case"], expected=60, timeout_s=20)
    assert sorted(r.key for r in recs) == sorted(f"small-{i}" for i in range(60))
    assert relay.metrics.failed_total == 1
    assert relay.metrics.order_breaches_total == 0


def test_many_small_rows_in_one_transaction_are_all_published_under_a_small_topic_limit(
        dsn: str, bootstrap: str, prefix: str) -> None:
    # 400 rows of 200 bytes: ~130 kB, many times the topic limit per partition batch.
    create_topics(bootstrap, [prefix + "case"], partitions=3, config={"max.message.bytes": "16384"})
    write(dsn, [env(f"many-{i}", 1, size=200) for i in range(400)])
    relay = OutboxRelay(dsn, {"bootstrap.servers": bootstrap}, settings(prefix), "sizes-many")
    try:
        run_until_idle(relay)
    finally:
        relay.close()
    statuses = [s for s, _ in _rows(dsn).values()]
    assert statuses.count("published") == 400, {s: statuses.count(s) for s in set(statuses)}
    assert relay.metrics.failed_total == 0
    assert len(read_topics(bootstrap, [prefix + "case"], expected=400, timeout_s=20)) == 400

