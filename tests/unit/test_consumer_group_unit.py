"""ConsumerGroup without Kafka: configuration, summed stats, stop and failure propagation."""

from __future__ import annotations

import threading

import pytest

from casestream.consumer import ConsumerGroup
from casestream.errors import ConfigError
from casestream.handlers.registry import HandlerRegistry


def _group(n: int) -> ConsumerGroup:
    return ConsumerGroup(n, "unit.group", ["t"], HandlerRegistry(), object(), object(),
                         {"bootstrap.servers": "127.0.0.1:1", "client.id": "svc"})


def test_concurrency_below_one_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="concurrency must be >= 1, got 0"):
        _group(0)


def test_members_have_their_own_client_id_and_stats_and_the_group_sums_them() -> None:
    g = _group(3)
    assert [m._conf["client.id"] for m in g.members] == ["svc#0", "svc#1", "svc#2"]
    assert {m._conf["group.id"] for m in g.members} == {"unit.group"}
    for i, m in enumerate(g.members):
        m.stats.applied = i + 1
        m.stats.count_reason("poison")
    assert g.stats.applied == 6
    assert g.stats.by_reason == {"poison": 3}
    with pytest.raises(AttributeError):
        g.stats.no_such_counter  # noqa: B018


def test_ready_only_when_every_member_has_an_assignment() -> None:
    g = _group(2)
    g.members[0].ready.set()
    assert not g.ready.is_set() and not g.ready.wait(0.05)
    g.members[1].ready.set()
    assert g.ready.is_set() and g.ready.wait(0)


def test_a_failing_member_stops_the_others_and_its_error_is_raised() -> None:
    g = _group(2)
    stopped = threading.Event()

    def healthy(stop: threading.Event) -> None:
        stop.wait(10)
        stopped.set()

    def broken(stop: threading.Event) -> None:
        raise RuntimeError("broker gone")

    g.members[0].run = healthy  # type: ignore[method-assign]
    g.members[1].run = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="broker gone"):
        g.run(threading.Event())
    assert stopped.is_set()


def test_stop_ends_every_member() -> None:
    g = _group(2)
    ended: list[int] = []
    for i, m in enumerate(g.members):
        def run(stop: threading.Event, i: int = i) -> None:
            stop.wait(10)
            ended.append(i)
        m.run = run  # type: ignore[method-assign]
    stop = threading.Event()
    t = threading.Thread(target=g.run, args=(stop,))
    t.start()
    stop.set()
    t.join(5)
    assert not t.is_alive() and sorted(ended) == [0, 1]


def _builder(pool: object, **settings: object):  # noqa: ANN202 - a ServiceBuilder over doubles
    from pydantic import Field

    from casestream.events import load_catalog
    from casestream.service import ServiceBuilder, ServiceSettings, ServiceSpec, service_config
    from services import schemas_dir

    class ProbeSettings(ServiceSettings):
        model_config = service_config("CASESTREAM_PROBE_")
        database: str = Field("probe", description="database")
        port: int = Field(1, description="port")

    spec = ServiceSpec(name="probe", module="probe", settings="probe:S", build="probe:build",
                       consumers=("audit.journal",))
    return ServiceBuilder(spec, ProbeSettings(**settings), catalog=load_catalog(schemas_dir()),
                          codec=object(), pool=pool).start()


def test_the_builder_runs_a_group_when_the_concurrency_setting_asks_for_it() -> None:
    from casestream.consumer import ConsumerRuntime

    one = _builder(object()).consumer("audit.journal", ["outbox.event.case"], HandlerRegistry())
    two = _builder(object(), consumer_concurrency=2).consumer(
        "audit.journal", ["outbox.event.case"], HandlerRegistry(), batch_size=100)
    assert isinstance(one, ConsumerRuntime)
    assert isinstance(two, ConsumerGroup) and len(two.members) == 2
    assert {m.settings.batch_size for m in two.members} == {100}
    assert [m._conf["client.id"] for m in two.members] == ["audit.journal#0", "audit.journal#1"]


def test_the_builder_refuses_members_that_would_take_every_pooled_connection() -> None:
    class Pool:  # what the builder reads of a psycopg_pool.ConnectionPool
        max_size = 5

    def with_consumers(n: int):  # noqa: ANN202
        b = _builder(Pool(), consumer_concurrency=2)
        for name, topic in [("case.saga-requests", "outbox.event.saga"),
                            ("case.dashboard", "outbox.event.case"),
                            ("case.extra", "outbox.event.case")][:n]:
            b.consumer(name, [topic], HandlerRegistry())
        return b

    with_consumers(2)._check_pool()  # 4 of 5: one left
    with pytest.raises(ConfigError, match=r"^CASESTREAM_CONSUMER_CONCURRENCY=2: the consumers of "
                                          r"this service hold 6 of its pool's 5 connections"):
        with_consumers(3)._check_pool()


def test_builder_consumers_run_handlers_in_pipeline_mode_unless_told_not_to() -> None:
    # pipeline mode hides cursor.rowcount (-1 until the sync): a handler written against
    # rowcount (not RETURNING + fetchone) is run with pipeline=False
    fast = _builder(object()).consumer("audit.journal", ["outbox.event.case"], HandlerRegistry())
    safe = _builder(object()).consumer("audit.journal", ["outbox.event.case"], HandlerRegistry(),
                                       pipeline=False)
    assert fast.settings.pipeline_handlers is True
    assert safe.settings.pipeline_handlers is False
