"""Secured Kafka clients against the real local broker's secured listeners.

``deploy/infra.sh`` (``CASESTREAM_KAFKA_SECURE=1``, the default) runs an SSL listener (TLS,
test CA of ``deploy/kafka/tls.sh``) and a SASL_SSL listener (SCRAM-SHA-512, user
``casestream``; OAUTHBEARER with Kafka's unsecured-JWT validator, scope ``casestream.clients``
required); ``deploy/infra.sh env`` names them. Every client here is configured only
through the settings a deployment uses: ``CASESTREAM_KAFKA_PROP_*`` variables (the password
from a file) or ``CASESTREAM_KAFKA_PROPERTIES_FILE``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from casestream.cli.main import main
from casestream.kafka import producer_config
from casestream.outbox.relay import OutboxRelay
from casestream.service.settings import CommonSettings
from casestream.telemetry.readiness import DependencyDown, kafka_check
from casestream.testing.consumer import Harness, produce_events
from casestream.testing.relay import create_topics, delete_topics, read_topics
from test_relay_support import base_dsn, dsn, env, run_until_idle, settings, write  # noqa: F401 - fixtures
from tests.support.events import case_returned

_HOW = ("the secured listeners come with `deploy/infra.sh up` (CASESTREAM_KAFKA_SECURE=1, the "
        "default; restart Kafka if it was started before: deploy/infra.sh down kafka && "
        "deploy/infra.sh up kafka) and `eval \"$(deploy/infra.sh env)\"`")


def _env(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        pytest.fail(f"{name} is not set: {_HOW}", pytrace=False)
    return value


@pytest.fixture(scope="module")
def secured() -> dict[str, str]:
    return {name: _env(f"CASESTREAM_KAFKA_{name}") for name in
            ("SSL_BOOTSTRAP", "SASL_BOOTSTRAP", "TLS_CA", "SCRAM_USER", "SCRAM_PASSWORD_FILE")}


@pytest.fixture
def scram_env(secured: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> CommonSettings:
    """The settings of a deployment on SASL_SSL + SCRAM-SHA-512, read from the environment."""
    for name, value in {
        "CASESTREAM_KAFKA_BOOTSTRAP": secured["SASL_BOOTSTRAP"],
        "CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL": "SASL_SSL",
        "CASESTREAM_KAFKA_PROP_SASL_MECHANISM": "SCRAM-SHA-512",
        "CASESTREAM_KAFKA_PROP_SASL_USERNAME": secured["SCRAM_USER"],
        "CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE": secured["SCRAM_PASSWORD_FILE"],
        "CASESTREAM_KAFKA_PROP_SSL_CA_LOCATION": secured["TLS_CA"],
    }.items():
        monkeypatch.setenv(name, value)
    return CommonSettings()


@pytest.fixture
def tls_settings(secured: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CommonSettings:
    """The settings of a deployment on TLS only, from a properties file."""
    props = tmp_path / "client.properties"
    props.write_text(f"# TLS, server certificate checked against the test CA\nsecurity.protocol=SSL\n"
                     f"ssl.ca.location={secured['TLS_CA']}\n", encoding="utf-8")
    monkeypatch.setenv("CASESTREAM_KAFKA_BOOTSTRAP", secured["SSL_BOOTSTRAP"])
    monkeypatch.setenv("CASESTREAM_KAFKA_PROPERTIES_FILE", str(props))
    return CommonSettings()


@pytest.fixture
def harness(tls_settings: CommonSettings, pg_url: str) -> Iterator[Harness]:
    h = Harness.create(tls_settings.kafka_client(), pg_url, prefix="test.secured")
    create_topics(h.bootstrap, [h.topic], partitions=3)
    try:
        yield h
    finally:
        h.close()


def _relay_round_trip(secured_settings: CommonSettings, dsn: str, name: str, events: int) -> None:  # noqa: F811
    """``events`` outbox rows published by a relay configured from ``secured_settings`` alone,
    then read back over the same secured connection: every event id arrives."""
    prefix = f"{name}{uuid.uuid4().hex[:8]}.outbox.event."
    topic = prefix + "case"
    client = secured_settings.kafka_client()
    create_topics(client, [topic], partitions=3)
    try:
        envs = [env(f"{name}-{i % 5}", i // 5 + 1) for i in range(events)]
        write(dsn, envs)
        relay = OutboxRelay(dsn, producer_config(secured_settings.kafka_bootstrap, client_id=f"{name}.relay",
                                                 overrides=secured_settings.kafka_properties),
                            settings(prefix), name)
        try:
            assert run_until_idle(relay) == events
        finally:
            relay.close()
        records = read_topics(client, [topic], expected=events, timeout_s=30)
        assert sorted(r.headers["id"].decode() for r in records) == sorted(str(e.event_id) for e in envs)
        kafka_check(client, timeout_s=5)()  # the readiness probe authenticates the same way
    finally:
        delete_topics(client, [topic])


def test_relay_publishes_over_sasl_ssl_scram_configured_by_variables(
        scram_env: CommonSettings, dsn: str) -> None:  # noqa: F811 - fixture
    client = scram_env.kafka_client()
    assert client["sasl.password"] == Path(os.environ["CASESTREAM_KAFKA_SCRAM_PASSWORD_FILE"]).read_text().strip()
    _relay_round_trip(scram_env, dsn, "secured", 30)


def test_a_wrong_scram_password_is_refused_by_the_broker(
        scram_env: CommonSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n", encoding="utf-8")
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE", str(wrong))
    with pytest.raises(DependencyDown):
        kafka_check(CommonSettings().kafka_client(), timeout_s=3)()


def test_tls_without_the_ca_fails_and_the_cli_lists_over_tls(
        tls_settings: CommonSettings, secured: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    # the system trust store does not know the test CA: the handshake fails
    with pytest.raises(DependencyDown):
        kafka_check({"bootstrap.servers": secured["SSL_BOOTSTRAP"], "security.protocol": "SSL"},
                    timeout_s=3)()
    result = CliRunner().invoke(main, ["dlq", "list"])  # CASESTREAM_KAFKA_PROPERTIES_FILE from the env
    assert result.exit_code == 0, result.output


def test_consumer_runtime_and_its_dead_letters_over_tls(harness: Harness) -> None:
    """The runtime consumes over TLS, and its dead-letter producer and admin client use the
    same connection: a poison message lands on <consumer>.dlq."""
    events = [case_returned(f"agg-{i}", 1) for i in range(10)]
    produce_events(harness.bootstrap, harness.topic, harness.codec, events)
    from casestream.testing.consumer import produce

    produce(harness.bootstrap, harness.topic, [(b"poison", b"not an envelope", [])])
    harness.start(harness.runtime())
    from casestream.testing.consumer import wait_until

    wait_until(lambda: len(harness.rows()) == 10, timeout_s=30)
    harness.one_effect_each(str(e.event_id) for e in events)
    assert len(harness.dead_letters(1, timeout_s=30)) == 1


def _oauth_settings(secured: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                    config: str) -> CommonSettings:
    """SASL_SSL + OAUTHBEARER with librdkafka's unsecured JWT (``enable.sasl.oauthbearer.
    unsecure.jwt``, ``sasl.oauthbearer.config``), the broker's unsecured validator checking it."""
    for name, value in {
        "CASESTREAM_KAFKA_BOOTSTRAP": secured["SASL_BOOTSTRAP"],
        "CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL": "SASL_SSL",
        "CASESTREAM_KAFKA_PROP_SASL_MECHANISM": "OAUTHBEARER",
        "CASESTREAM_KAFKA_PROP_ENABLE_SASL_OAUTHBEARER_UNSECURE_JWT": "true",
        "CASESTREAM_KAFKA_PROP_SASL_OAUTHBEARER_CONFIG": config,
        "CASESTREAM_KAFKA_PROP_SSL_CA_LOCATION": secured["TLS_CA"],
    }.items():
        monkeypatch.setenv(name, value)
    return CommonSettings()


def test_relay_publishes_over_sasl_ssl_oauthbearer_configured_by_variables(
        secured: dict[str, str], monkeypatch: pytest.MonkeyPatch, dsn: str) -> None:  # noqa: F811
    oauth = _oauth_settings(secured, monkeypatch,
                            "principal=casestream-relay scope=casestream.clients lifeSeconds=600")
    assert oauth.kafka_client()["sasl.mechanism"] == "OAUTHBEARER"
    _relay_round_trip(oauth, dsn, "oauth", 12)


def test_an_oauthbearer_token_without_the_required_scope_is_refused_by_the_broker(
        secured: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The listener's validator requires scope ``casestream.clients`` (deploy/lib/kafka.sh):
    the same token without it fails authentication, so the broker really checks the token."""
    oauth = _oauth_settings(secured, monkeypatch, "principal=casestream-relay lifeSeconds=600")
    with pytest.raises(DependencyDown):
        kafka_check(oauth.kafka_client(), timeout_s=5)()
