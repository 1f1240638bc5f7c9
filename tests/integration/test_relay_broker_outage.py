"""Broker outage under load: the relay recovers by itself, nothing lost, order kept.

The broker is a *private* single-node Kafka started by this module (same jars as
``deploy/infra.sh``, own ports and data directory), so stopping it does not disturb the
shared broker other tests use. Skipped when the jars have not been resolved yet
(``deploy/infra.sh up`` resolves them into ``.local/kafka/classpath.txt``).
"""

from __future__ import annotations

import time

import psycopg
import pytest

from casestream.outbox.relay import OutboxRelay
from casestream.retry import RetryPolicy
from casestream.testing.relay import PrivateKafka, create_topics, read_topics
from test_relay_support import (  # noqa: F401 - fixtures
    LoadWriter, RelayThread, base_dsn, check_order, count_status, dsn, env, settings, wait_for, write,
)

def _outage_run(dsn: str, broker: PrivateKafka, prefix: str, producer_extra: dict, outage_s: float,
                during_outage=None) -> tuple[RelayThread, dict, int]:
    topic = prefix + "case"
    create_topics(broker.bootstrap, [topic], partitions=6)
    relay = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": broker.bootstrap, **producer_extra},
                                    settings(prefix, batch_size=200), "outage"))
    load = LoadWriter(dsn, per_txn=5, aggregates=50, prefix="o-", seed=5, pause_s=5 / 200.0)
    try:
        wait_for(lambda: count_status(dsn).get("published", 0) > 300, 30, "traffic before the outage")
        broker.kill()
        t0 = time.monotonic()
        if during_outage is not None:
            during_outage()
        time.sleep(max(0.0, outage_s - (time.monotonic() - t0)))
        broker.start()
        time.sleep(3.0)  # load continues after the restart
        total = load.close()
        wait_for(lambda: count_status(dsn) == {"published": total}, 120, "recovery: all published")
    finally:
        load.stop.set()
        relay.close()
    expected = {(topic, agg): ids for agg, ids in load.written.items()}
    return relay, expected, total


def test_broker_down_ten_seconds_relay_recovers_in_order(dsn: str, private_kafka: PrivateKafka) -> None:
    prefix = f"outage{int(time.time())}.outbox.event."
    relay, expected, total = _outage_run(dsn, private_kafka, prefix, {}, outage_s=10.0)
    recs = read_topics(private_kafka.bootstrap, [prefix + "case"], expected=total, timeout_s=60)
    stats = check_order(recs, expected, allow_duplicates=True)
    assert relay.relay.metrics.order_breaches_total == 0
    print(f"outage 10 s: {total} events, {stats}, metrics {relay.relay.metrics.snapshot()}")


def test_delivery_timeouts_back_off_and_hold_back_only_their_aggregates(
        dsn: str, private_kafka: PrivateKafka, caplog: pytest.LogCaptureFixture) -> None:
    """With message.timeout.ms=1500 the outage surfaces as _MSG_TIMED_OUT: rows are
    rescheduled with backoff (attempts, next_attempt_at, last_error), later rows of the
    same aggregates wait, and after the broker returns everything goes out in order."""
    prefix = f"timeout{int(time.time())}.outbox.event."
    seen_backoff: list[int] = []
    caplog.set_level("WARNING", logger="casestream.relay")

    def check_backoff() -> None:
        def backing_off() -> bool:
            with psycopg.connect(dsn) as conn:
                n = conn.execute("SELECT count(*) FROM outbox WHERE status = 'pending' AND attempts > 0 "
                                 "AND next_attempt_at > now() AND last_error LIKE '%MSG_TIMED_OUT%'"
                                 ).fetchone()[0]
            seen_backoff.append(n)
            return n > 0
        wait_for(backing_off, 12, "rows backing off after delivery timeouts", step=0.5)

    relay, expected, total = _outage_run(
        dsn, private_kafka, prefix, {"message.timeout.ms": 1500}, outage_s=8.0,
        during_outage=check_backoff)
    assert max(seen_backoff) > 0
    m = relay.relay.metrics
    assert m.retried_total > 0 and m.delivery_errors_total > 0 and m.failed_total == 0
    rescheduled = [r.getMessage() for r in caplog.records if "rescheduled" in r.getMessage()]
    assert rescheduled and "after a delivery error (_MSG_TIMED_OUT" in rescheduled[0], rescheduled
    recs = read_topics(private_kafka.bootstrap, [prefix + "case"], expected=total, timeout_s=60)
    stats = check_order(recs, expected, allow_duplicates=True)
    print(f"timeouts: {total} events, {stats}, metrics {m.snapshot()}")


def test_a_retryable_error_has_a_bounded_number_of_attempts(
        dsn: str, private_kafka: PrivateKafka) -> None:
    """Broker down, message.timeout.ms=1000, max_attempts=2: each row in flight is tried
    twice, then marked failed ("gave up after 2 attempts (max_attempts)", the last error
    named) and counted in relay_gave_up_total — never retried without bound."""
    prefix = f"bounded{int(time.time())}.outbox.event."
    create_topics(private_kafka.bootstrap, [prefix + "case"], partitions=1)
    write(dsn, [env("bounded-a", 1), env("bounded-a", 2)])
    private_kafka.kill()
    retry = RetryPolicy(initial_delay_s=0.2, max_delay_s=0.5, jitter=0.0, max_attempts=2)
    relay = RelayThread(OutboxRelay(dsn, {"bootstrap.servers": private_kafka.bootstrap,
                                          "message.timeout.ms": 1000},
                                    settings(prefix, retry=retry), "bounded"))
    try:
        wait_for(lambda: count_status(dsn).get("failed", 0) == 2, 40, "both rows given up")
        time.sleep(1.0)  # no further attempt after giving up
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT aggregate_version, status, attempts, last_error FROM outbox "
                                "WHERE aggregateid = 'bounded-a' ORDER BY aggregate_version").fetchall()
    finally:
        relay.close()  # the broker stays down: the private_kafka fixture starts it for the next test
    assert [(v, status, attempts) for v, status, attempts, _ in rows] == \
        [(1, "failed", 2), (2, "failed", 2)], rows
    for *_, error in rows:
        assert "gave up after 2 attempts" in (error or "") and "MSG_TIMED_OUT" in error, error
    assert relay.relay.metrics.gave_up_total == 2
