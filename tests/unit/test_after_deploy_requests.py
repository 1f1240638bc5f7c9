"""The pieces of "re-drive after deploy" that need no broker: a consumer's build in its Kafka
client id, the requests still waiting, the action's params kept through JSON, and a service's
consumers carrying ``CASESTREAM_BUILD`` in their client id."""

from __future__ import annotations

import pytest

from casestream.kafka.builds import build_of, consumer_client_id
from casestream.operations import (
    ACTION_REDRIVE,
    ACTION_REDRIVE_AFTER_DEPLOY,
    OperatorAction,
    pending_after_deploy,
)


@pytest.mark.parametrize(("client_id", "build"), [
    ("audit.journal@1.4.2", "1.4.2"), ("audit.journal@1.4.2#0", "1.4.2"),
    ("a@b.c@sha-9f1e2d#12", "sha-9f1e2d"), ("audit.journal", None), ("audit.journal#0", None),
    ("rdkafka", None), ("", None), (None, None), ("x@#1", None),
])
def test_the_build_is_read_back_from_a_client_id(client_id: str | None, build: str | None) -> None:
    assert build_of(client_id) == build


def test_a_client_id_carries_the_build_when_there_is_one() -> None:
    assert consumer_client_id("audit.journal", "2.0.1") == "audit.journal@2.0.1"
    assert consumer_client_id("audit.journal", None) == "audit.journal"
    assert build_of(consumer_client_id("audit.journal", "2.0.1") + "#3") == "2.0.1"


def _request(action_id: str, target: str = "billing.ledger") -> OperatorAction:
    return OperatorAction(actor="carol", action=ACTION_REDRIVE_AFTER_DEPLOY, target=target, reason="fixed",
                          items=("0:1",), action_id=action_id, params={"fingerprint": "ab12cd34ef56",
                                                                       "builds": "1.0.0"})


def test_a_request_waits_until_a_successful_redrive_names_it() -> None:
    failed = OperatorAction(actor="carol", action=ACTION_REDRIVE, target="billing.ledger", reason="r",
                            outcome="failed", params={"request": "r1"})
    ok = OperatorAction(actor="carol", action=ACTION_REDRIVE, target="billing.ledger", reason="r",
                        params={"request": "r2"})
    actions = [_request("r1"), _request("r2"), _request("r3", target="other"), failed, ok]
    assert [a.action_id for a in pending_after_deploy(actions, "billing.ledger")] == ["r1"]
    assert [a.action_id for a in pending_after_deploy(actions)] == ["r1", "r3"]


def test_an_actions_params_survive_json_and_old_records_have_none() -> None:
    request = _request("r1")
    assert OperatorAction.from_json(request.to_json()) == request
    old = b'{"actor":"a","action":"dlq.redrive","target":"t","reason":"r","items":["0:1"]}'
    assert OperatorAction.from_json(old).params == {}


def test_a_service_consumer_joins_with_its_build_in_the_client_id() -> None:
    from pydantic import ValidationError

    from casestream.consumer.group import ConsumerGroup
    from casestream.handlers import HandlerRegistry
    from tests.unit.test_consumer_group_unit import _builder

    one = _builder(object(), build="2026.12.1-a1b2c3").consumer(
        "audit.journal", ["outbox.event.case"], HandlerRegistry())
    assert one._conf["client.id"] == "audit.journal@2026.12.1-a1b2c3"
    two = _builder(object(), build="7", consumer_concurrency=2).consumer(
        "audit.journal", ["outbox.event.case"], HandlerRegistry())
    assert isinstance(two, ConsumerGroup)
    assert [build_of(m._conf["client.id"]) for m in two.members] == ["7", "7"]
    with pytest.raises(ValidationError, match="build"):
        _builder(object(), build="has space")


def test_after_deploy_goes_with_a_group_and_is_refused_before_kafka_is_asked() -> None:
    from click.testing import CliRunner

    from casestream.cli.dlq import dlq

    result = CliRunner().invoke(dlq, ["--bootstrap", "127.0.0.1:1", "redrive", "billing.ledger", "--all",
                                      "--after-deploy"])
    assert result.exit_code == 2 and "--after-deploy goes with --group" in result.output
