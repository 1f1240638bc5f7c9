"""The builder's configuration is data: constructing one does no I/O, ``start()`` prepares the
parts not given, and ``build()`` refuses consumers and projections its spec does not declare."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field
from starlette.applications import Starlette

from casestream.handlers import HandlerRegistry
from casestream.errors import ConfigError
from casestream.events import load_catalog
from casestream.service import ServiceBuilder, ServiceSettings, ServiceSpec, service_config
from services import schemas_dir


class ProbeSettings(ServiceSettings):
    model_config = service_config("CASESTREAM_PROBE_")
    database: str = Field("probe", description="database")
    port: int = Field(1, description="port")


class Pool:  # what the builder, the projection and the readiness checks read of a pool
    conninfo = "postgresql://postgres@127.0.0.1:1/probe"
    max_size = 10

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Any]:
        yield object()


class Projection:  # what ServiceBuilder.projection reads of a ProjectionSpec
    topics = ("outbox.event.case",)

    def __init__(self, name: str):
        self.name = self.live_consumer = name

    def live_names(self) -> dict[str, str]:
        return {}

    def create_tables(self, conn: Any, names: dict[str, str]) -> None:
        pass

    def registry(self, names: dict[str, str], event_types: Any) -> HandlerRegistry:
        return HandlerRegistry()


def _spec(**fields: Any) -> ServiceSpec:
    return ServiceSpec(name="probe", module="probe", settings="probe:S", build="probe:build", **fields)


def _builder(spec: ServiceSpec) -> ServiceBuilder[ProbeSettings]:
    settings = ProbeSettings(kafka_bootstrap="127.0.0.1:1", gc_freeze=False,
                             inbox_retention_interval_s=0, dead_letter_depth_interval_s=0)
    return ServiceBuilder(spec, settings, catalog=load_catalog(schemas_dir()), codec=object(), pool=Pool()).start()


def test_constructing_a_builder_reads_nothing_and_its_parts_wait_for_start() -> None:
    # neither the module, the settings class, the migrations nor the schemas folder exist
    b = ServiceBuilder(_spec(), schemas=[Path("/nonexistent/schemas")], migrations=Path("/nonexistent"))
    assert b.name == "probe" and b.schemas == (Path("/nonexistent/schemas"),)
    with pytest.raises(ConfigError, match=r"^ServiceBuilder.pool of service probe: call start\(\) first$"):
        b.pool  # noqa: B018 - the read is the test
    with pytest.raises(AttributeError):
        b.no_such_attribute  # noqa: B018


def test_start_keeps_the_given_parts_and_build_starts_a_builder_not_started() -> None:
    pool, codec = Pool(), object()
    b = ServiceBuilder(_spec(), ProbeSettings(gc_freeze=False), catalog=load_catalog(schemas_dir()),
                       codec=codec, pool=pool)
    proc = b.build(app=Starlette(), ready_table="t", kafka=False)
    assert b.pool is pool and b.codec is codec and b.edge is None
    assert proc.closers == []  # given parts belong to the caller
    assert b.start() is b  # a second start does nothing


def test_build_refuses_a_consumer_the_spec_does_not_list() -> None:
    b = _builder(_spec(consumers=("probe.reader",)))
    b.consumer("probe.reader", ["outbox.event.case"], HandlerRegistry())
    b.consumer("probe.other", ["outbox.event.case"], HandlerRegistry())
    with pytest.raises(ConfigError, match=r"^probe: consumer probe.other is declared but not in "
                                          r"ServiceSpec probe.consumers \(probe.reader\)$"):
        b.build(app=Starlette(), ready_table="t")


def test_build_refuses_a_spec_consumer_never_declared_unless_no_consumer_runs() -> None:
    spec = _spec(consumers=("probe.reader", "probe.writer"))
    b = _builder(spec)
    b.consumer("probe.reader", ["outbox.event.case"], HandlerRegistry())
    with pytest.raises(ConfigError, match=r"^probe: ServiceSpec probe.consumers lists probe.writer but "
                                          r"the bootstrap never declares it"):
        b.build(app=Starlette(), ready_table="t")
    _builder(spec).build(app=Starlette(), ready_table="t", kafka=False)  # consumers switched off


def test_build_refuses_a_projection_the_spec_does_not_list() -> None:
    listed = _builder(_spec(consumers=("probe.view",), projections=("probe.view",)))
    listed.projection(Projection("probe.view"))
    listed.build(app=Starlette(), ready_table="t")
    b = _builder(_spec(consumers=("probe.view",)))
    b.projection(Projection("probe.view"))
    with pytest.raises(ConfigError, match=r"^probe: projection probe.view is declared but not in "
                                          r"ServiceSpec probe.projections \(none\)$"):
        b.build(app=Starlette(), ready_table="t")


def test_every_installed_service_declares_what_its_spec_lists() -> None:
    import services.case.adapters.dashboard as dashboard
    import services.case.adapters.workload as workload
    import services.decision.adapters.statistics as statistics
    from services.case import SERVICE as CASE
    from services.decision import SERVICE as DECISION

    assert set(CASE.projections) == {dashboard.PROJECTION.name, workload.PROJECTION.name}
    assert DECISION.projections == (statistics.PROJECTION.name,)
    for spec, projection in [(CASE, dashboard.PROJECTION), (DECISION, statistics.PROJECTION)]:
        assert projection.live_consumer in spec.consumers


def test_a_spec_refuses_projections_given_as_one_string() -> None:
    with pytest.raises(ConfigError, match="projections must be a tuple of names"):
        _spec(projections="probe.view")


def test_no_test_builds_an_object_through_dunder_new() -> None:
    # a constructor that needs bypassing in tests does I/O it should leave to start()
    tests, needle = Path(__file__).resolve().parents[1], "__new__" + "("
    found = [f"{p.relative_to(tests)}:{n}" for p in sorted(tests.rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if needle in line]
    assert found == []
