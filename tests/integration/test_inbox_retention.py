"""Inbox retention against the real Kafka and PostgreSQL.

Inbox rows stand for records of a real topic; the group's committed offsets are real
commits and history is removed with ``DeleteRecords`` (what retention does to old
segments). Fails if a purge removes a row whose record is still in the log or at/after the
committed offset, if a topic kept forever lets anything go, if a second run deletes more,
or if nothing is ever purged once records are gone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from casestream.cli.inbox import inbox
from casestream.consumer.inbox import ensure_schema
from casestream.consumer.retention import InboxRetention, RetentionSettings
from casestream.testing.consumer import produce
from casestream.testing.relay import delete_topics, isolated_schema
from tests.integration.test_relay_support import test_database


@pytest.fixture
def dsn(pg_url: str) -> Iterator[str]:
    with isolated_schema(test_database(pg_url), prefix="inbox_t", migrate=False) as scoped:
        with psycopg.connect(scoped) as conn:
            ensure_schema(conn)
        yield scoped


def _topic(bootstrap: str, retention_ms: int) -> str:
    name = f"ret.{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config={"retention.ms": str(retention_ms)})])[name].result(15)
    return name


def _history(bootstrap: str, topic: str, dsn: str, consumer: str) -> list[str]:
    """Ten records in two bursts 1.5 s apart; one inbox row per record, processed 5 ms after
    its timestamp; the group commits offset 10 (all consumed). Returns the event ids."""
    ids = [str(uuid.uuid4()) for _ in range(10)]
    produce(bootstrap, topic, [(b"k", i.encode(), []) for i in ids[:5]])
    time.sleep(1.5)
    produce(bootstrap, topic, [(b"k", i.encode(), []) for i in ids[5:]])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": consumer, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        stamps = []
        deadline = time.monotonic() + 30  # a topic just created may take seconds to serve a fetch
        while len(stamps) < 10 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            assert m.error() is None, m.error()
            stamps.append(m.timestamp()[1])
        assert len(stamps) == 10, f"read {len(stamps)} of the 10 records within 30 s"
        c.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    finally:
        c.close()
    with psycopg.connect(dsn) as conn:
        for eid, ts in zip(ids, stamps):
            conn.execute(
                "INSERT INTO consumer_inbox (consumer, event_id, event_type, aggregate_type, aggregate_id,"
                " aggregate_version, processed_at) VALUES (%s, %s, 'T', 'case', 'k', 1, %s)",
                (consumer, eid, datetime.fromtimestamp(ts / 1000, tz=timezone.utc) + timedelta(milliseconds=5)))
    return ids


def _left(dsn: str, consumer: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM consumer_inbox WHERE consumer = %s", (consumer,)).fetchone()[0]


def test_rows_go_only_once_their_records_left_the_log_and_a_rerun_deletes_nothing(
        dsn: str, kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap, retention_ms=1000)
    consumer = f"ret-{uuid.uuid4().hex[:8]}"
    try:
        _history(kafka_bootstrap, topic, dsn, consumer)
        time.sleep(1.2)  # older than retention.ms, but still in the log (segments not deleted)
        job = InboxRetention(dsn, kafka_bootstrap, {consumer: ((topic,), False)},
                             RetentionSettings(min_age_s=0, margin_s=0))
        first = job.run_once()[0]
        assert first.purged == 0 and "oldest record" in first.cutoff.reason, first.cutoff
        # retention removes the first burst
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for f in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
            f.result(15)
        second = job.run_once()[0]
        assert second.purged == 5 and _left(dsn, consumer) == 5
        assert job.run_once()[0].purged == 0  # idempotent
        assert job.stats[consumer].purged == 5 and job.stats[consumer].cutoff_age_s > 0
        # the group moves its committed offset back into the second burst: those rows stay
        c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": consumer})
        c.commit(offsets=[TopicPartition(topic, 0, 6)], asynchronous=False)
        c.close()
        admin.delete_records([TopicPartition(topic, 0, 9)])[TopicPartition(topic, 0, 9)].result(15)
        third = job.run_once()[0]
        assert third.cutoff.at is None and "below its low watermark" in third.cutoff.reason
        assert _left(dsn, consumer) == 5
    finally:
        delete_topics(kafka_bootstrap, [topic])


def test_a_topic_kept_forever_keeps_every_row_and_the_cli_says_why(
        dsn: str, kafka_bootstrap: str, registry_url: str) -> None:
    topic = _topic(kafka_bootstrap, retention_ms=-1)
    consumer = f"ret-{uuid.uuid4().hex[:8]}"
    try:
        _history(kafka_bootstrap, topic, dsn, consumer)
        env = {"CASESTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap, "CASESTREAM_REGISTRY_URL": registry_url}
        r = CliRunner().invoke(inbox, ["purge", "--dsn", dsn, "--consumer", consumer, "--topic", topic,
                                       "--min-age-s", "0", "--margin-s", "0"], env=env)
        assert r.exit_code == 0, r.output
        assert f"nothing may be purged: topic {topic} keeps its history forever" in r.output
        assert _left(dsn, consumer) == 10
        bad = CliRunner().invoke(inbox, ["purge", "--consumer", consumer, "--topic", topic], env=env)
        assert bad.exit_code == 2
    finally:
        delete_topics(kafka_bootstrap, [topic])
