"""End-to-end: the example service ``examples/watch`` next to the suite, on the real Kafka,
PostgreSQL and registry.

The case, saga, decision and notification services and the watch service run as processes.
Officers watch cases before submitting them; the cases travel the real journey (decision,
notice, close or return through the saga); then:

- the watch projection ``watch_cases`` shows each case's final state and last aggregate
  version (consumer ``watch.cases``: inbox + aggregate-version guard);
- one ``WatchTriggered`` per watch appears on ``outbox.event.watch`` (consumer
  ``watch.triggers`` -> outbox -> relay), registered in the registry, decodable by the
  registry's schema alone and by a codec over the watch catalog;
- re-delivering a case event verbatim (inbox) and a stale copy under a new id (version
  guard) changes neither the projection nor the triggers;
- ``casestream replay watch.cases`` rebuilds the projection to the same rows;
- ``casestream status`` / ``outbox status`` / ``replay --list`` / ``dlq list`` name the
  watch service, its consumers or its projection.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import httpx
import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from casestream.auth import ROLE_OFFICER, dev_token
from casestream.events import Envelope, EnvelopeCodec, load_catalog, open_codec, schema_id_of
from casestream.service import ServiceStack
from casestream.testing.relay import free_port
from services import schemas_dir
from services.demo import FINAL_CASE_STATES, CaseRun, case_mix, case_status, case_url, headers
from watch import SCHEMAS

SUITE = ["case", "saga", "decision", "notification"]
CASE_TOPIC = "outbox.event.case"
WATCH_TOPIC = "outbox.event.watch"
WATCHERS = ("officer-1", "officer-2")


def _free_port() -> str:
    return str(free_port())


#: Ports of this module's stack: free ones, away from the defaults another stack on the shared
#: infrastructure may hold (``services.demo.case_url`` reads them from the environment too).
PORTS = {f"CASESTREAM_{name.upper()}_PORT": _free_port() for name in [*SUITE, "audit", "watch"]}


def watch_url(path: str = "") -> str:
    return f"http://127.0.0.1:{PORTS['CASESTREAM_WATCH_PORT']}{path}"


def officer(tenant: str, subject: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {dev_token(tenant, (ROLE_OFFICER,), subject=subject)}"}


def ensure_database(pg_url: str, name: str) -> None:
    """Create database ``name`` unless it exists (deploy creates it at `up`; the shared
    infrastructure may predate that)."""
    with psycopg.connect(f"{pg_url}/postgres", autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


def start_watch(stack: ServiceStack, env: dict[str, str], log_dir: Path) -> subprocess.Popen[bytes] | None:
    """Start the watch service through the stack (discovered: ``python -m watch``); a stack
    that only knows the suite's five (``SERVICE_PORTS``) raises KeyError, and then it is
    started as a plain process. Returns that process, or None when the stack owns it."""
    try:
        stack.start("watch")
        stack.wait_ready(["watch"])
        return None
    except KeyError:
        pass
    log = open(log_dir / "watch.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen([sys.executable, "-m", "watch"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"watch exited: {(log_dir / 'watch.log').read_text()[-3000:]}"
        try:
            if all(httpx.get(watch_url(path), timeout=2).status_code == 200  # commands, consumers
                   for path in ("/readyz", "/readyz/consumers")):
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise AssertionError("watch not ready in 90 s")


@pytest.fixture(scope="module")
def env(infra_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The infrastructure's environment with this module's ports (also set in os.environ)."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in PORTS.items():
            mp.setenv(name, value)
        yield {**infra_env, **PORTS}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str],
          pg_url: str) -> Iterator[ServiceStack]:
    ensure_database(pg_url, "watch")
    log_dir = tmp_path_factory.mktemp("watch-e2e") / "logs"
    log_dir.mkdir(parents=True)
    services = ServiceStack(env=env, log_dir=log_dir)
    own: subprocess.Popen[bytes] | None = None
    try:
        services.start_all(SUITE)
        own = start_watch(services, env, log_dir)
        yield services
    finally:
        if own is not None:
            own.terminate()
            own.wait(30)
        services.stop_all()


@dataclasses.dataclass
class Journey:
    runs: list[CaseRun]
    watched: dict[str, tuple[str, ...]]  # case id -> watchers


@pytest.fixture(scope="module")
def journey(stack: ServiceStack) -> Journey:
    """Three cases (violation, no violation, decision failure), watched before submission,
    driven to their final states."""
    specs = [s for s in case_mix(5) if s.expected == "decision_failed"][:1] + \
            [s for s in case_mix(5) if s.expected == "violation"][:1] + \
            [s for s in case_mix(5) if s.expected == "no_violation"][:1]
    runs, watched = [], {}
    with httpx.Client(timeout=10.0) as client:
        for spec in specs:
            opened = client.post(case_url("/cases"), json=spec.body(), headers=headers(spec.tenant))
            opened.raise_for_status()
            case_id = opened.json()["id"]
            for watcher in WATCHERS:
                put = client.put(watch_url(f"/watch/cases/{case_id}"),
                                 headers=officer(spec.tenant, watcher))
                assert put.status_code == 201, put.text
                assert put.json()["watch_id"] == f"{case_id}/{watcher}"
            again = client.put(watch_url(f"/watch/cases/{case_id}"),
                               headers=officer(spec.tenant, WATCHERS[0]))
            assert again.status_code == 200
            submitted = client.post(case_url(f"/cases/{case_id}/submit"), json={},
                                    headers=headers(spec.tenant,
                                                    **{"Idempotency-Key": str(uuid.uuid4())}))
            submitted.raise_for_status()
            runs.append(CaseRun(spec, case_id))
            watched[case_id] = WATCHERS

        def all_final() -> None:
            # the case status alone: services.demo.wait_final also waits for each audit trail
            # to be complete, and this stack runs no audit service
            for run in runs:
                run.status = case_status(client, run)
            assert {r.status for r in runs} <= FINAL_CASE_STATES, [(r.case_id, r.status)
                                                                   for r in runs]

        wait_for(all_final, 180)
    return Journey(runs, watched)


# -- Kafka / registry helpers ---------------------------------------------------------------

def read_topic(bootstrap: str, topic: str, keys: set[str]) -> list[Any]:
    """Every message of ``topic`` up to its current end whose key (or the part before
    ``/``: a watch id) is in ``keys``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watch-e2e-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in partitions}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        found, deadline = [], time.monotonic() + 60
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            if msg.offset() >= ends[msg.partition()] - 1:
                pending.discard(msg.partition())
            if msg.offset() < ends[msg.partition()]:
                key = (msg.key() or b"").decode()
                if key in keys or key.split("/")[0] in keys:
                    found.append(msg)
        assert not pending, f"{topic}: partitions {sorted(pending)} not read to the end in 60 s"
    finally:
        consumer.close()
    return found


def produce(bootstrap: str, topic: str, key: bytes, value: bytes,
            headers: list[tuple[str, bytes]]) -> tuple[int, int]:
    """Produce one message; returns its (partition, offset)."""
    where: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "partitioner": "murmur2_random"})
    producer.produce(topic, key=key, value=value, headers=headers,
                     on_delivery=lambda err, m: where.append((m.partition(), m.offset())))
    assert producer.flush(30) == 0 and where
    return where[0]


def wait_committed(bootstrap: str, group: str, topic: str, partition: int, offset: int,
                   timeout_s: float = 60.0) -> None:
    """Wait until consumer ``group`` committed past ``offset`` on ``topic[partition]``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            (tp,) = consumer.committed([TopicPartition(topic, partition)], timeout=10)
            if tp.offset > offset:
                return
            time.sleep(0.5)
    finally:
        consumer.close()
    raise AssertionError(f"{group} did not commit past {topic}[{partition}]@{offset}")


def suite_codec(registry_url: str) -> EnvelopeCodec:
    """A codec over the suite's catalog (the case team's events), ids looked up."""
    return open_codec(load_catalog(schemas_dir()), registry_url, auto_register=False)


def watch_codec(registry_url: str) -> EnvelopeCodec:
    """A codec over the watch team's catalog alone, ids looked up (registered by the service)."""
    return open_codec(load_catalog(SCHEMAS), registry_url, auto_register=False)


def projection_rows(pg_url: str, case_ids: set[str]) -> dict[str, tuple[Any, ...]]:
    with psycopg.connect(f"{pg_url}/watch") as conn:
        rows = conn.execute("SELECT case_id, tenant_id, state, title, last_version, updated_at "
                            "FROM watch_cases WHERE case_id = ANY(%s)", (list(case_ids),))
        return {r[0]: r for r in rows.fetchall()}


def wait_for(check: Any, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def cli(env: dict[str, str], *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "casestream", *args], env=env,
                          capture_output=True, text=True, timeout=timeout_s)


# -- the journey ----------------------------------------------------------------------------

def expected_state(run: CaseRun) -> str:
    return "returned" if run.spec.expected == "decision_failed" else "closed"


def test_projection_follows_the_cases(journey: Journey, kafka_bootstrap: str,
                                      registry_url: str, pg_url: str) -> None:
    ids = {r.case_id for r in journey.runs}
    last_version: dict[str, int] = {}
    with suite_codec(registry_url) as codec:
        for msg in read_topic(kafka_bootstrap, CASE_TOPIC, ids):
            e = codec.decode(msg.value())
            last_version[e.aggregate_id] = max(last_version.get(e.aggregate_id, 0),
                                               e.aggregate_version)
    with httpx.Client(timeout=10.0) as client:
        for run in journey.runs:
            def check() -> dict[str, Any]:
                got = client.get(watch_url(f"/watch/cases/{run.case_id}"),
                                 headers=officer(run.spec.tenant, "someone"))
                assert got.status_code == 200, got.text
                body = got.json()
                assert body["case"] is not None and body["case"]["state"] == expected_state(run)
                return body

            body = wait_for(check)
            assert body["watchers"] == sorted(WATCHERS)
            assert body["case"]["title"] == run.spec.title
            assert body["case"]["aggregate_version"] == last_version[run.case_id]
        other_tenant = client.get(watch_url(f"/watch/cases/{journey.runs[0].case_id}"),
                                  headers=officer("tenant-zz", "someone"))
        assert other_tenant.status_code == 404
    rows = projection_rows(pg_url, ids)
    assert {cid: (r[2], r[4]) for cid, r in rows.items()} == {
        r.case_id: (expected_state(r), last_version[r.case_id]) for r in journey.runs}


def watch_events(kafka_bootstrap: str, registry_url: str, ids: set[str]) -> list[Envelope]:
    with watch_codec(registry_url) as codec:
        return [codec.decode(m.value()) for m in read_topic(kafka_bootstrap, WATCH_TOPIC, ids)]


def test_one_watch_event_per_watch_decodable_from_the_registry(
        journey: Journey, kafka_bootstrap: str, registry_url: str) -> None:
    ids = {r.case_id for r in journey.runs}

    def all_there() -> list[Any]:
        msgs = read_topic(kafka_bootstrap, WATCH_TOPIC, ids)
        assert len(msgs) >= len(ids) * len(WATCHERS), len(msgs)
        return msgs

    msgs = wait_for(all_there, timeout_s=60)
    # the registry alone (no casestream code) reads each message: schema by id, generic Avro
    for msg in msgs:
        schema_id = schema_id_of(msg.value())
        answer = httpx.get(f"{registry_url}/schemas/ids/{schema_id}", timeout=10)
        answer.raise_for_status()
        schema = fastavro.parse_schema(json.loads(answer.json()["schema"]))
        assert schema["name"] == "acme.watch.WatchTriggered"  # the subject (full name)
        record = fastavro.schemaless_reader(io.BytesIO(msg.value()[5:]), schema)
        assert record["event_type"] == "WatchTriggered" and record["event_version"] == 2
    with suite_codec(registry_url) as codec:
        case_events = [codec.decode(m.value())
                       for m in read_topic(kafka_bootstrap, CASE_TOPIC, ids)]
    triggering = {e.aggregate_id: e for e in case_events
                  if e.event_type in ("CaseClosed", "CaseReturned")}
    events = watch_events(kafka_bootstrap, registry_url, ids)
    by_watch = {(e.payload["case_id"], e.payload["watcher_id"]): e for e in events}
    assert len(by_watch) == len(events) == len(ids) * len(WATCHERS)
    for run in journey.runs:
        for watcher in WATCHERS:
            e = by_watch[(run.case_id, watcher)]
            assert (e.aggregate_type, e.aggregate_id, e.aggregate_version) == (
                "watch", f"{run.case_id}/{watcher}", 1)
            closed = run.spec.expected != "decision_failed"
            assert e.payload["trigger"] == ("CaseClosed" if closed else "CaseReturned")
            assert e.payload["final"] is closed
            if closed:
                assert e.payload["detail"] == run.spec.expected
            cause = triggering[run.case_id]
            assert (e.causation_id, e.correlation_id, e.tenant_id) == (
                cause.event_id, cause.correlation_id, cause.tenant_id)


def test_redelivered_and_stale_case_events_change_nothing(
        journey: Journey, kafka_bootstrap: str, registry_url: str, pg_url: str) -> None:
    run = next(r for r in journey.runs if r.spec.expected == "violation")
    ids = {run.case_id}
    before_rows = projection_rows(pg_url, ids)
    before_events = watch_events(kafka_bootstrap, registry_url, ids)
    msgs = read_topic(kafka_bootstrap, CASE_TOPIC, ids)
    closed = next(m for m in msgs if dict(m.headers() or [])["type"] == b"CaseClosed")
    opened = next(m for m in msgs if dict(m.headers() or [])["type"] == b"CaseOpened")

    # the same message again: the inbox drops it
    where = produce(kafka_bootstrap, CASE_TOPIC, closed.key(), closed.value(),
                    list(closed.headers() or []))
    # an old version under a new event id: the inbox lets it in, the version guard drops it
    with suite_codec(registry_url) as codec:
        old = codec.decode(opened.value())
        stale = dataclasses.replace(old, event_id=str(uuid.uuid4()), event_version=None,
                                    published_at=None)
        headers = [(k, stale.event_id.encode() if k == "id" else v)
                   for k, v in (opened.headers() or [])]
        where_stale = produce(kafka_bootstrap, CASE_TOPIC, opened.key(), codec.encode(stale),
                              headers)
    for group in ("watch.cases", "watch.triggers"):
        wait_committed(kafka_bootstrap, group, CASE_TOPIC, *where)
        wait_committed(kafka_bootstrap, group, CASE_TOPIC, *where_stale)
    assert projection_rows(pg_url, ids) == before_rows
    after = watch_events(kafka_bootstrap, registry_url, ids)
    assert sorted(e.event_id for e in after) == sorted(e.event_id for e in before_events)
    with psycopg.connect(f"{pg_url}/watch") as conn:
        versions = conn.execute("SELECT watcher_id, version FROM watches WHERE case_id = %s "
                                "ORDER BY watcher_id", (run.case_id,)).fetchall()
    assert versions == [(w, 1) for w in WATCHERS]


def test_replay_rebuilds_the_same_rows(journey: Journey, env: dict[str, str],
                                       pg_url: str) -> None:
    ids = {r.case_id for r in journey.runs}
    before = projection_rows(pg_url, ids)
    assert len(before) == len(ids)
    done = cli(env, "replay", "watch.cases", "--workers", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert projection_rows(pg_url, ids) == before


# -- the platform's own tools know the watch service ----------------------------------------

def test_status_names_the_watch_service(stack: ServiceStack, env: dict[str, str]) -> None:
    done = cli(env, "status")
    assert "watch" in done.stdout, done.stdout + done.stderr
    assert "watch.triggers" in done.stdout or "watch.cases" in done.stdout, done.stdout


def test_outbox_status_includes_the_watch_database(stack: ServiceStack,
                                                   env: dict[str, str]) -> None:
    done = cli(env, "outbox", "status", "--service", "watch")
    assert done.returncode == 0, done.stdout + done.stderr
    everything = cli(env, "outbox", "status")
    assert "watch" in everything.stdout, everything.stdout + everything.stderr


def test_replay_list_names_the_projection(stack: ServiceStack, env: dict[str, str]) -> None:
    done = cli(env, "replay", "--list")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "watch.cases" in done.stdout


def test_dlq_list_names_the_consumers(stack: ServiceStack, env: dict[str, str]) -> None:
    one = cli(env, "dlq", "list", "watch.triggers")
    assert one.returncode == 0, one.stdout + one.stderr
    done = cli(env, "dlq", "list")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "watch.cases" in done.stdout and "watch.triggers" in done.stdout, done.stdout
