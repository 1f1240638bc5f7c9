"""One service instance with ``CASESTREAM_WORKERS=2`` on the real Kafka, PostgreSQL and registry.

The service (module ``wsvc``, written by the test into a temporary folder) is composed by
``ServiceBuilder`` like any service: migrations, catalog, registry codec, pool, a consumer
of CaseReturned events on a 4-partition topic (each applied event is one row naming the
worker's pid, no unique key: a doubled effect shows as two rows) and the outbox relay. It
runs through ``run_service(build, spec=SERVICE)`` on a free port. Checked: both workers are
members of the consumer group with the partitions split between them and each holds relay
shards; HTTP answers on the one port from both workers; a SIGKILLed worker is forked again
by the supervisor, and every event produced before, during and after is applied exactly
once in per-aggregate order; SIGTERM to the supervisor stops every worker within the bound
with status 0. And a pool or relay made before ``os.fork()`` refuses the forked process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from casestream.forks import ForkedClientError
from casestream.testing.consumer import create_topic, produce_events, wait_until
from casestream.testing.relay import free_port
from tests.support.databases import created_databases, require_server
from tests.support.events import case_returned

pytestmark = [pytest.mark.timeout(240)]

GRACE_S = 3.0
STOP_BOUND_S = GRACE_S + 25.0  # the supervisor's budget: grace + the workers' stop + drain

SERVICE_MODULE = r'''
import os
from pathlib import Path

from pydantic import Field
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from casestream.handlers import HandlerKind, HandlerRegistry
from casestream.service import ServiceBuilder, ServiceSettings, ServiceSpec, service_config
from services import schemas_dir

CONSUMER = os.environ["WSVC_CONSUMER"]
TOPIC = os.environ["WSVC_TOPIC"]
SERVICE = ServiceSpec(name="wsvc", module="wsvc", settings="wsvc:Settings", build="wsvc:build",
                      consumers=(CONSUMER,), subscriptions={CONSUMER: (TOPIC,)})


class Settings(ServiceSettings):
    model_config = service_config("CASESTREAM_WSVC_")
    database: str = Field(description="database")
    port: int = Field(0, description="HTTP port")


def handle(ctx, event):
    ctx.conn.execute("INSERT INTO effects (event_id, aggregate_id, aggregate_version, pid) "
                     "VALUES (%s, %s, %s, %s)",
                     (event.event_id, event.aggregate_id, event.aggregate_version, os.getpid()))


def build(settings=None):
    b = ServiceBuilder(SERVICE, settings, schemas=[schemas_dir()],
                       migrations=Path(__file__).parent / "wsvc_migrations").start()
    registry = HandlerRegistry()
    registry.add("CaseReturned", handle, kind=HandlerKind.PROJECTION)
    b.consumer(CONSUMER, [TOPIC], registry, pipeline=False)
    b.relay()

    async def whoami(_):
        return JSONResponse({"pid": os.getpid()})

    return b.build(app=Starlette(routes=[Route("/whoami", whoami)]), ready_table="effects")


if __name__ == "__main__":
    from casestream.service import run_service

    run_service(build, spec=SERVICE)
'''


@pytest.fixture
def service(tmp_path: Path, pg_url: str, kafka_bootstrap: str, registry_url: str) -> Iterator[dict[str, Any]]:
    suffix = uuid.uuid4().hex[:10]
    database = f"wsvc_{suffix}"
    (tmp_path / "wsvc.py").write_text(SERVICE_MODULE, encoding="utf-8")
    (tmp_path / "wsvc_migrations").mkdir()
    (tmp_path / "wsvc_migrations" / "001_effects.sql").write_text(
        "CREATE TABLE effects (event_id text NOT NULL, aggregate_id text NOT NULL, "
        "aggregate_version bigint NOT NULL, pid int NOT NULL, "
        "at timestamptz NOT NULL DEFAULT clock_timestamp());\n", encoding="utf-8")
    topic = f"test.workers.{suffix}"
    consumer = f"test.workers-{suffix}"
    port = free_port()
    create_topic(kafka_bootstrap, topic, 4)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "WSVC_CONSUMER": consumer, "WSVC_TOPIC": topic,
           "CASESTREAM_WORKERS": "2", "CASESTREAM_WSVC_PORT": str(port),
           "CASESTREAM_WSVC_DATABASE": database, "CASESTREAM_PG_URL": pg_url,
           "CASESTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap, "CASESTREAM_REGISTRY_URL": registry_url,
           "CASESTREAM_SHUTDOWN_GRACE_S": str(GRACE_S), "CASESTREAM_KAFKA_SESSION_TIMEOUT_MS": "6000",
           "CASESTREAM_TELEMETRY_LOG_FORMAT": "text", "CASESTREAM_WSVC_INBOX_RETENTION_INTERVAL_S": "0",
           "CASESTREAM_WSVC_DEAD_LETTER_DEPTH_INTERVAL_S": "0"}
    with created_databases(require_server(pg_url), [database]):
        log_path = tmp_path / "service.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "wsvc"], cwd=tmp_path, env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
        try:
            yield {"proc": proc, "port": port, "topic": topic, "consumer": consumer,
                   "dsn": f"{pg_url.rstrip('/')}/{database}", "log": log_path}
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
            from casestream.testing.relay import delete_topics

            delete_topics(kafka_bootstrap, (topic, f"{consumer}.dlq", f"{consumer}.redrive"))


def _workers(supervisor: int) -> set[int]:
    """Pids of the supervisor's live children."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "--ppid", str(supervisor)], capture_output=True,
                         text=True, check=False).stdout
    return {int(pid) for pid, stat in (line.split() for line in out.splitlines()) if not stat.startswith("Z")}


def _members(bootstrap: str, group: str, topic: str) -> dict[str, set[int]]:
    """member id -> its partitions of ``topic``, for each member of ``group``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return {m.member_id: {tp.partition for tp in m.assignment.topic_partitions if tp.topic == topic}
            for m in desc.members}


def _relay_owners(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute(
            "SELECT DISTINCT locked_by FROM outbox_relay_lease WHERE locked_until > now() AND locked_by IS NOT NULL")}


def _effects(dsn: str) -> list[tuple[str, str, int, int]]:
    with psycopg.connect(dsn) as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            "SELECT event_id, aggregate_id, aggregate_version, pid FROM effects ORDER BY at")]


def test_two_workers_share_the_group_the_relay_and_the_port(
        service: dict[str, Any], kafka_bootstrap: str, registry_codec: Any) -> None:
    proc, dsn, log = service["proc"], service["dsn"], service["log"]
    base = f"http://127.0.0.1:{service['port']}"

    def alive() -> None:
        assert proc.poll() is None, log.read_text()[-4000:]

    def two_members() -> dict[str, set[int]] | None:
        alive()
        members = _members(kafka_bootstrap, service["consumer"], service["topic"])
        parts = [p for ps in members.values() for p in ps]
        settled = len(members) == 2 and all(members.values()) and sorted(parts) == [0, 1, 2, 3]
        return members if settled else None

    members = wait_until(two_members, 90, 0.5)
    first, second = members.values()
    assert not first & second, members  # split: each holds some, none holds one twice
    workers = _workers(proc.pid)
    assert len(workers) == 2, workers
    owners = wait_until(lambda: (alive(), _relay_owners(dsn))[1] if len(_relay_owners(dsn)) == 2 else None, 30, 0.5)
    assert {int(o.split("/")[2]) for o in owners} == workers, owners  # each worker holds relay shards

    served: set[int] = set()

    def both_answer() -> bool:
        served.add(httpx.get(f"{base}/whoami", timeout=5).json()["pid"])  # a new connection each
        return served == workers

    wait_until(both_answer, 30, 0.02)

    events: list[Any] = []
    versions: dict[str, int] = {}

    def produce(n: int) -> None:
        batch = []
        for i in range(n):
            agg = f"W{(len(events) + i) % 16:02d}"
            versions[agg] = versions.get(agg, 0) + 1
            batch.append(case_returned(agg, versions[agg], seq=len(events) + i))
        produce_events(kafka_bootstrap, service["topic"], registry_codec, batch)
        events.extend(batch)

    produce(200)
    wait_until(lambda: (alive(), len({r[3] for r in _effects(dsn)}) == 2)[1], 60, 0.2)
    victim = sorted(workers)[0]
    produce(200)
    os.kill(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    produce(200)

    def replaced() -> set[int] | None:
        alive()
        now = _workers(proc.pid)
        return now if len(now) == 2 and victim not in now else None

    after = wait_until(replaced, 30, 0.1)
    print(f"worker {victim} replaced after {time.monotonic() - killed_at:.1f} s: {sorted(after)}")
    # the survivor keeps its member id: a settled group with another id holds the new worker
    wait_until(lambda: (m := two_members()) is not None and set(m) != set(members), 90, 0.5)
    produce(200)
    want = sorted(e.event_id for e in events)
    wait_until(lambda: (alive(), sorted(r[0] for r in _effects(dsn)) == want)[1], 120, 0.5)
    rows = _effects(dsn)
    assert sorted(r[0] for r in rows) == want, "an event lost or doubled"
    for agg in versions:
        assert [r[2] for r in rows if r[1] == agg] == list(range(1, versions[agg] + 1)), agg
    by_pid = {pid: sum(1 for r in rows if r[3] == pid) for pid in {r[3] for r in rows}}
    print(f"events applied per worker pid: {by_pid}")
    assert by_pid.get(min(after - workers), 0) > 0, by_pid  # the restarted worker consumed too
    text = log.read_text()
    assert f"worker 0 (pid {victim})" in text or f"worker 1 (pid {victim})" in text, text[-3000:]
    assert "restarting it in" in text

    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    code = proc.wait(STOP_BOUND_S + 10)
    took = time.monotonic() - sent
    print(f"stopped {took:.1f} s after SIGTERM, status {code}")
    assert code == 0, log.read_text()[-4000:]
    assert took <= STOP_BOUND_S
    assert not any(_alive(pid) for pid in after), "a worker outlived the supervisor"
    assert "every worker stopped" in log.read_text()


def _kill_and_reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_pool_and_a_relay_made_before_a_fork_refuse_the_forked_process(
        pg_url: str, kafka_bootstrap: str) -> None:
    from casestream.outbox.relay.core import OutboxRelay
    from casestream.service.builder import ProcessPool
    from casestream.testing.consumer import database_dsn

    pool = ProcessPool(database_dsn(pg_url), min_size=1, max_size=2, open=True, name="probe",
                       kwargs={"prepare_threshold": None})
    relay = OutboxRelay(pool, {"bootstrap.servers": kafka_bootstrap}, name="probe.relay")
    try:
        with pool.connection() as conn:  # the making process uses it freely
            assert conn.execute("SELECT 1").fetchone() == (1,)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not the parent's (pytest-timeout)
            signal.alarm(20)  # a child that got through would run the relay: never outlive the test
            said = []
            for use in (lambda: pool.connection().__enter__(), lambda: relay.run(__import__("threading").Event())):
                try:
                    use()
                    said.append("used")
                except ForkedClientError as e:
                    said.append(str(e))
                except BaseException as e:  # noqa: BLE001
                    said.append(f"other {type(e).__name__}: {e}")
            os.write(write, "\n".join(said).encode())
            os._exit(0)
        os.close(write)
        try:
            with os.fdopen(read) as f:
                pool_said, relay_said = f.read().split("\n")
        finally:
            _kill_and_reap(pid)
    finally:
        relay.close()
        pool.close()
    parent = os.getpid()
    assert pool_said.startswith(f"connection pool probe was created in process {parent} and is used "
                                f"in process {pid}, forked from it"), pool_said
    assert relay_said.startswith(f"outbox relay probe.relay was created in process {parent}"), relay_said
