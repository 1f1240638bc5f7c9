"""The event catalog as AsyncAPI 3.0: built from the installed entry points (the suite and the
team's watch service), checked against the official AsyncAPI JSON schema (npm @asyncapi/specs),
exported by ``casestream catalog asyncapi``; consumers' topics from ``ServiceSpec.subscriptions``."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from casestream.cli import main as cli_main
from casestream.errors import ConfigError
from casestream.events import load_catalog
from casestream.events.asyncapi import AVRO_SCHEMA_FORMAT, asyncapi_document
from casestream.service import ServiceSpec, TopicSpec, discovery
from casestream.service.eventcatalog import installed_asyncapi
from tests.support.asyncapi import asyncapi_errors


@pytest.fixture(scope="module")
def document() -> dict:
    return installed_asyncapi()


def test_the_installed_catalog_is_a_valid_asyncapi_3_document(document: dict) -> None:
    assert document["asyncapi"] == "3.0.0"
    assert asyncapi_errors(document) == []


def test_the_schema_check_sees_a_broken_document(document: dict) -> None:
    no_channel = copy.deepcopy(document)
    del no_channel["operations"]["watch.send.outbox.event.watch"]["channel"]  # required
    assert [e.partition(":")[0] for e in asyncapi_errors(no_channel)] == ["/operations/watch.send.outbox.event.watch"]
    not_avro = copy.deepcopy(document)  # the Avro schema object is checked too: a record needs fields
    not_avro["components"]["messages"]["WatchTriggered.v1"]["payload"]["schema"] = {"type": "record", "name": "X"}
    assert [e.partition(":")[0] for e in asyncapi_errors(not_avro)] == ["/components/messages/WatchTriggered.v1"]


def test_the_team_service_appears_beside_the_suite_with_its_schemas_producer_and_consumers(document: dict) -> None:
    assert set(document["x-casestream-services"]) >= {"audit", "case", "decision", "notification", "saga", "watch"}
    watch = document["channels"]["outbox.event.watch"]
    assert list(watch["messages"]) == ["WatchTriggered.v1", "WatchTriggered.v2"]
    assert watch["bindings"]["kafka"]["partitions"] == 6
    assert watch["bindings"]["kafka"]["topicConfiguration"]["retention.ms"] == 30 * 86_400_000
    send = document["operations"]["watch.send.outbox.event.watch"]
    assert send["action"] == "send" and send["channel"] == {"$ref": "#/channels/outbox.event.watch"}
    receive = document["operations"]["watch.triggers.receive.outbox.event.case"]
    assert receive["action"] == "receive"
    assert receive["bindings"]["kafka"]["groupId"] == {"type": "string", "enum": ["watch.triggers"]}
    assert {"$ref": "#/channels/outbox.event.case/messages/CaseClosed.v1"} in receive["messages"]
    # the suite's audit journal reads every suite topic, not the team's
    audit = {k for k in document["operations"] if k.startswith("audit.journal.receive.")}
    assert audit == {f"audit.journal.receive.outbox.event.{t}" for t in ("case", "decision", "notice", "saga")}


def test_messages_carry_each_version_s_avro_schema_and_upcaster_steps(document: dict) -> None:
    catalog = load_catalog(*discovery.schema_folders())
    messages = document["components"]["messages"]
    assert {m for m in messages if m.startswith("CaseOpened.")} == {"CaseOpened.v1", "CaseOpened.v2", "CaseOpened.v3"}
    for version in (1, 2, 3):
        payload = messages[f"CaseOpened.v{version}"]["payload"]
        assert payload["schemaFormat"] == AVRO_SCHEMA_FORMAT
        assert payload["schema"] == catalog.schema("CaseOpened", version)
    assert messages["CaseOpened.v3"]["x-casestream-newest"] is True
    assert messages["CaseOpened.v1"]["x-casestream-newest"] is False
    assert messages["WatchTriggered.v1"]["x-casestream-upcasters"] == [{"kind": "payload", "from": 1, "to": 2}]
    assert messages["WatchTriggered.v2"]["x-casestream-upcasters"] == []
    assert messages["WatchTriggered.v1"]["x-casestream-subject"] == "acme.watch.WatchTriggered"
    assert "watch.upcasters:chain" in document["info"]["x-casestream-upcasters"]


def _team_folder(tmp_path: Path) -> Path:
    root = tmp_path / "schemas"
    (root / "order").mkdir(parents=True)
    (root / "envelope.avsc").write_text(json.dumps({"type": "record", "name": "Envelope", "fields": [
        {"name": "event_id", "type": "string"}]}))
    (root / "order" / "OrderPlaced.v1.avsc").write_text(json.dumps({"type": "record", "name": "OrderPlaced",
                                                                    "fields": [{"name": "total", "type": "long"}]}))
    (root / "catalog.toml").write_text(
        '[catalog]\nnamespace = "shop"\n[subjects."shop.order.OrderPlaced"]\nevent_type = "OrderPlaced"\n'
        'aggregate_type = "order"\ntopic = "outbox.event.order"\nowner = "orders"\nsource = "orders"\n'
        'compatibility = "BACKWARD"\nversions = [1]\n')
    return root


def test_a_service_without_declared_subscriptions_is_listed_as_undeclared(tmp_path: Path) -> None:
    orders = ServiceSpec(name="orders", module="orders", settings="orders:S", build="orders:build",
                         consumers=("orders.billing",), topics=(TopicSpec("outbox.event.order", partitions=3),))
    doc = installed_asyncapi(folders=[_team_folder(tmp_path)], specs={"orders": orders})
    assert asyncapi_errors(doc) == []
    assert list(doc["operations"]) == ["orders.send.outbox.event.order"]
    assert doc["x-casestream-services"]["orders"]["undeclared"] == ["orders.billing"]


def test_a_topic_declared_by_two_services_is_refused(tmp_path: Path) -> None:
    def spec(name: str) -> ServiceSpec:
        return ServiceSpec(name=name, module=name, settings=f"{name}:S", build=f"{name}:b",
                           topics=(TopicSpec("outbox.event.order", partitions=1),))
    with pytest.raises(ConfigError, match="topic outbox.event.order is declared by services a and b"):
        asyncapi_document(load_catalog(_team_folder(tmp_path)), [spec("b"), spec("a")])


def test_subscriptions_name_only_the_service_s_consumers() -> None:
    with pytest.raises(ConfigError, match="subscriptions names 'other.group', not one of its consumers"):
        ServiceSpec(name="orders", module="orders", settings="orders:S", build="orders:b",
                    consumers=("orders.billing",), subscriptions={"other.group": ("t",)})
    with pytest.raises(ConfigError, match=r"subscriptions\['orders.billing'\] must be a non-empty tuple"):
        ServiceSpec(name="orders", module="orders", settings="orders:S", build="orders:b",
                    consumers=("orders.billing",), subscriptions={"orders.billing": ()})


def test_the_builder_refuses_a_consumer_reading_other_topics_than_its_spec_declares() -> None:
    from pydantic import Field

    from casestream.handlers import HandlerRegistry
    from casestream.service import ServiceBuilder, ServiceSettings, service_config

    class ProbeSettings(ServiceSettings):
        model_config = service_config("CASESTREAM_PROBE_")
        database: str = Field("probe", description="database")
        port: int = Field(1, description="port")

    spec = ServiceSpec(name="probe", module="probe", settings="probe:S", build="probe:build",
                       consumers=("probe.reader",), subscriptions={"probe.reader": ("outbox.event.case",)})
    b = ServiceBuilder.from_parts(spec, ProbeSettings(), catalog=load_catalog(discovery.schema_folder("suite")),
                                  codec=object(), pool=object())
    with pytest.raises(ConfigError, match="consumer probe.reader reads outbox.event.saga but ServiceSpec "
                                          "probe.subscriptions declares outbox.event.case"):
        b.consumer("probe.reader", ["outbox.event.saga"], HandlerRegistry())
    b.consumer("probe.reader", ["outbox.event.case"], HandlerRegistry())


def test_the_cli_writes_json_or_yaml_and_refuses_an_unknown_format(tmp_path: Path, document: dict) -> None:
    runner = CliRunner()
    out = runner.invoke(cli_main, ["catalog", "asyncapi"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == document
    target = tmp_path / "catalog.yaml"
    written = runner.invoke(cli_main, ["catalog", "asyncapi", "--output", str(target)])
    assert written.exit_code == 0, written.output
    assert yaml.safe_load(target.read_text()) == document
    bad = runner.invoke(cli_main, ["catalog", "asyncapi", "--format", "xml"])
    assert bad.exit_code == 2 and "'xml' is not one of 'json', 'yaml'" in bad.output
