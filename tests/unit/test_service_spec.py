"""ServiceSpec validation and entry-point discovery (casestream.service.spec / discovery)."""

from __future__ import annotations

import pytest

from casestream.errors import ConfigError
from casestream.service import ServiceSpec, discovery, resolve

SPEC = ServiceSpec(name="fake", module="tests.unit", settings="mod:Cls", build="mod:build",
                   consumers=("fake.events",))


def test_the_suite_registers_its_services_projections_and_commands() -> None:
    found = discovery.services()
    assert {"case", "decision", "audit", "notification", "saga"} <= set(found)
    assert found["audit"].outbox is False and found["case"].consumers[0] == "case.saga-requests"
    assert {"audit.timeline", "case.dashboard", "decision.statistics"} <= set(discovery.projection_refs())
    assert "reconcile" in discovery.command_refs()


def test_discovery_loads_a_spec_from_a_reference() -> None:
    assert discovery.services({"fake": f"{__name__}:SPEC"}) == {"fake": SPEC}


@pytest.mark.parametrize(("refs", "message"), [
    ({"other": f"{__name__}:SPEC"}, "the spec is named 'fake'"),
    ({"fake": f"{__name__}:pytest"}, "not a ServiceSpec"),  # a module, not a spec
    ({"fake": f"{__name__}:MISSING"}, "has no attribute MISSING"),
    ({"fake": "no_such_module_xyz:SPEC"}, "does not import"),
])
def test_a_bad_reference_is_one_config_error(refs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        discovery.services(refs)


@pytest.mark.parametrize("name", ["Case", "1case", "", "a-b", "x" * 32])
def test_a_bad_service_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="service name"):
        ServiceSpec(name=name, module="m", settings="m:S", build="m:b")


def test_references_must_be_module_colon_attribute() -> None:
    with pytest.raises(ConfigError, match="build='m.b'"):
        ServiceSpec(name="ok", module="m", settings="m:S", build="m.b")
    assert resolve("casestream.errors:ConfigError") is ConfigError
