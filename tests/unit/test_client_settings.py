"""Client settings of a deployment: Kafka and registry properties from variables and files,
PostgreSQL connection strings that keep every parameter, and CASESTREAM_ENV=production."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from casestream.auth import DEV_JWT_KEY, AuthSettings
from casestream.errors import ConfigError, RegistryUnavailable
from casestream.events.registry import ConfluentSchemaRegistry
from casestream.http.edge import edge_policy
from casestream.kafka import environ_properties, producer_config, read_properties_file, redact
from casestream.service.settings import CommonSettings, shown_conninfo
from services.case.settings import CaseSettings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("CASESTREAM_KAFKA_PROP", "CASESTREAM_REGISTRY_PROP", "CASESTREAM_ENV",
                            "CASESTREAM_AUTH_", "CASESTREAM_PG_PASSWORD_FILE")):
            monkeypatch.delenv(name)


def _secret(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# -- Kafka client properties -----------------------------------------------------------------

def test_kafka_prop_variables_become_librdkafka_properties_with_secrets_from_files(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_USERNAME", "svc")
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE", _secret(tmp_path, "pw", "s3cret\n"))
    s = CommonSettings(kafka_bootstrap="b1:9093,b2:9093")
    want = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "svc", "sasl.password": "s3cret"}
    assert s.kafka_properties == want
    assert s.kafka_client() == {**want, "bootstrap.servers": "b1:9093,b2:9093"}
    consumer = s.consumer_config()
    assert {k: consumer[k] for k in want} == want and consumer["bootstrap.servers"] == "b1:9093,b2:9093"
    producer = producer_config(s.kafka_bootstrap, overrides=s.kafka_properties)
    assert producer["sasl.password"] == "s3cret" and producer["acks"] == "all"
    assert redact(s.kafka_client())["sasl.password"] == "***"


def test_the_properties_file_lies_beneath_the_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    props = _secret(tmp_path, "client.properties",
                    "# Kafka client.properties\n! also a comment\n\nsecurity.protocol = SSL\n"
                    "ssl.ca.location: /etc/ssl/certs/ca-certificates.crt\nsasl.mechanism=PLAIN\n")
    monkeypatch.setenv("CASESTREAM_KAFKA_PROPERTIES_FILE", props)
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_MECHANISM", "OAUTHBEARER")
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL", "SASL_SSL")
    assert CommonSettings().kafka_properties == {
        "security.protocol": "SASL_SSL", "ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt",
        "sasl.mechanism": "OAUTHBEARER"}


@pytest.mark.parametrize("name, value, message", [
    ("CASESTREAM_KAFKA_PROP_ACKS", "1", "acks is not settable here"),
    ("CASESTREAM_KAFKA_PROP_BOOTSTRAP_SERVERS", "x:1", "set CASESTREAM_KAFKA_BOOTSTRAP"),
    ("CASESTREAM_KAFKA_PROP_ENABLE_AUTO_COMMIT", "true", "enable.auto.commit is not settable"),
    ("CASESTREAM_KAFKA_PROP_NO_SUCH_THING", "1", "No such configuration property"),
    ("CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL", "TELEPATHY", "security.protocol"),
])
def test_bad_kafka_properties_are_refused_at_start_naming_them(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        CommonSettings()


def test_an_unreadable_ca_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SSL_CA_LOCATION", "/nonexistent/ca.pem")
    with pytest.raises(ConfigError, match="ssl.ca.location failed"):
        CommonSettings()


def test_secret_file_problems_name_the_variable_never_the_value(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE=.*cannot read"):
        CommonSettings()
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE", _secret(tmp_path, "pw", "a"))
    monkeypatch.setenv("CASESTREAM_KAFKA_PROP_SASL_PASSWORD", "b")
    with pytest.raises(ConfigError, match="both set property sasl.password"):
        CommonSettings()
    bad = _secret(tmp_path, "bad.properties", "sasl.password=hunter2\njust words\n")
    with pytest.raises(ConfigError, match="line 2: not a key=value line") as info:
        read_properties_file(Path(bad), variable="CASESTREAM_KAFKA_PROPERTIES_FILE")
    assert "hunter2" not in str(info.value)


# -- registry client properties --------------------------------------------------------------

def test_registry_properties_reach_the_registry_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO_FILE", _secret(tmp_path, "ui", "u:p\n"))
    s = CommonSettings()
    assert s.registry_properties == {"basic.auth.user.info": "u:p"}
    with s.schema_registry() as reg:
        rest = reg._client._rest_client
        assert rest.auth == ("u", "p")
    assert environ_properties("registry", {"CASESTREAM_REGISTRY_PROP_BEARER_AUTH_TOKEN": "t"}) == {
        "bearer.auth.token": "t"}


def test_a_registry_ca_that_cannot_be_read_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RegistryUnavailable, match="invalid registry URL or settings"):
        ConfluentSchemaRegistry("https://registry.invalid", options={"ssl.ca.location": str(tmp_path / "no.pem")})
    with pytest.raises(ConfigError, match="CASESTREAM_REGISTRY_URL"):
        CommonSettings(registry_properties={"url": "http://x"})


# -- PostgreSQL URLs -------------------------------------------------------------------------

def test_database_url_keeps_every_parameter_of_pg_url() -> None:
    s = CommonSettings(pg_url="postgresql://postgres@127.0.0.1:15432?sslmode=disable&connect_timeout=3")
    assert conninfo_to_dict(s.database_url("case")) == {
        "user": "postgres", "host": "127.0.0.1", "port": "15432", "sslmode": "disable",
        "connect_timeout": "3", "dbname": "case"}
    # a database already on the URL is replaced; key=value strings work too
    assert conninfo_to_dict(CommonSettings(pg_url="postgresql://u@h/postgres").database_url("audit"))["dbname"] == "audit"
    assert conninfo_to_dict(CommonSettings(pg_url="host=h sslmode=verify-full").database_url("saga")) == {
        "host": "h", "sslmode": "verify-full", "dbname": "saga"}


def test_the_password_file_wins_and_is_never_shown(tmp_path: Path) -> None:
    s = CommonSettings(pg_url="postgresql://app:old@db:5432", pg_password_file=_secret(tmp_path, "pg", "n3w\n"))
    dsn = s.database_url("case")
    assert conninfo_to_dict(dsn)["password"] == "n3w"
    assert "n3w" not in shown_conninfo(dsn) and "password=***" in shown_conninfo(dsn)


# -- CASESTREAM_ENV=production ---------------------------------------------------------------

def test_production_refuses_the_dev_key_auto_registration_and_trust_urls_one_line_each() -> None:
    s = CaseSettings(env="production", pg_url="postgresql://postgres@db:5432",
                     transport_security="mesh")  # transports: tests/unit/test_production_guards.py
    problems = s.production_problems()
    assert len(problems) == 3
    assert problems[0].startswith("CASESTREAM_AUTH_JWT_KEY holds the public development key")
    assert problems[1].startswith("CASESTREAM_AUTO_REGISTER_SCHEMAS is true")
    assert problems[2].startswith("CASESTREAM_PG_URL carries no credential")
    with pytest.raises(ConfigError) as info:
        s.require_production_ready("case")
    assert str(info.value).count("\n") == 3
    assert CaseSettings(pg_url="postgresql://postgres@db:5432").production_problems() == []


def test_production_settings_that_are_fit_pass(tmp_path: Path) -> None:
    s = CaseSettings(env="production", auto_register_schemas=False, transport_security="mesh",
                     pg_url="postgresql://app@db:5432?sslmode=verify-full",
                     pg_password_file=_secret(tmp_path, "pg", "pw"),
                     CASESTREAM_CASE_AUTH=AuthSettings(jwt_key="k" * 40))
    assert s.production_problems() == []
    assert CaseSettings(env="production", auto_register_schemas=False, transport_security="mesh",
                        CASESTREAM_CASE_AUTH=AuthSettings(jwt_key="k" * 40),
                        pg_url="postgresql://app:pw@db/x").production_problems() == []


def test_the_edge_refuses_the_dev_key_in_production_even_with_auto_registration() -> None:
    with pytest.raises(ConfigError, match="public development key"):
        edge_policy(CaseSettings(env="production", CASESTREAM_CASE_AUTH=AuthSettings(jwt_key=DEV_JWT_KEY)), "case")
    edge_policy(CaseSettings(), "case")  # development: a warning only


def test_env_takes_two_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASESTREAM_ENV", "prod")
    with pytest.raises(Exception, match="development"):
        CommonSettings()
