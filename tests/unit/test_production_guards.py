"""CASESTREAM_ENV=production: the development key refused whatever its source, HMAC keys of
at least 256 bits, and every transport encrypted and authenticated unless
CASESTREAM_TRANSPORT_SECURITY=mesh says the network layer does it; one line per refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from casestream.auth import DEV_JWT_KEY, AuthSettings
from casestream.errors import ConfigError
from casestream.http.edge import edge_policy
from services.case.settings import CaseSettings

REAL_KEY = "q8Vf3LxN0aZr7TgW2mYc5HsK9pJd4EuB"  # 32 bytes


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(("CASESTREAM_KAFKA_PROP", "CASESTREAM_REGISTRY_PROP", "CASESTREAM_ENV",
                            "CASESTREAM_AUTH_", "CASESTREAM_PG_", "CASESTREAM_TRANSPORT",
                            "CASESTREAM_CASE_")):
            monkeypatch.delenv(name)


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def fit(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """Settings a production case service may start with."""
    return {"env": "production", "auto_register_schemas": False,
            "pg_url": "postgresql://app@db:5432?sslmode=verify-full",
            "pg_password_file": _file(tmp_path, "pg", "pw"),
            "kafka_properties": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                 "sasl.username": "case", "sasl.password": "pw"},
            "registry_url": "https://registry.example/apis/ccompat/v7",
            "registry_properties": {"basic.auth.user.info": "case:pw",
                                    "basic.auth.credentials.source": "USER_INFO"},
            "CASESTREAM_CASE_AUTH": AuthSettings(jwt_key=REAL_KEY), **overrides}


def test_fit_production_settings_pass(tmp_path: Path) -> None:
    assert CaseSettings(**fit(tmp_path)).production_problems() == []


@pytest.mark.parametrize("text", [DEV_JWT_KEY, DEV_JWT_KEY + "\n", f"  {DEV_JWT_KEY}\r\n", f"\t{DEV_JWT_KEY} "])
def test_the_development_key_is_refused_from_a_file_trimmed_or_not(tmp_path: Path, text: str) -> None:
    auth = AuthSettings(jwt_key_file=_file(tmp_path, "jwt-key", text))
    assert auth.uses_dev_key
    s = CaseSettings(**fit(tmp_path, CASESTREAM_CASE_AUTH=auth))
    assert s.production_problems() == [
        "CASESTREAM_AUTH_JWT_KEY_FILE holds the public development key: set a key of your own"]
    with pytest.raises(ConfigError, match="CASESTREAM_AUTH_JWT_KEY_FILE"):
        edge_policy(s, "case")


@pytest.mark.parametrize("text", [DEV_JWT_KEY + " ", "\n" + DEV_JWT_KEY])
def test_the_development_key_is_refused_from_the_variable_with_stray_blanks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv("CASESTREAM_AUTH_JWT_KEY", text)
    s = CaseSettings(**{k: v for k, v in fit(tmp_path).items() if k != "CASESTREAM_CASE_AUTH"})
    problems = s.production_problems()
    assert problems == ["CASESTREAM_AUTH_JWT_KEY holds the public development key: set a key of "
                        "your own"]


def test_an_hmac_key_shorter_than_256_bits_is_refused_even_padded(tmp_path: Path) -> None:
    # RFC 7518 §3.2: an HS256 key of at least the hash size, 256 bits
    padded = AuthSettings(jwt_key_file=_file(tmp_path, "k", "short-secret" + " " * 24 + "\n"))
    problems = CaseSettings(**fit(tmp_path, CASESTREAM_CASE_AUTH=padded)).production_problems()
    assert problems == ["CASESTREAM_AUTH_JWT_KEY_FILE is a 12-byte HS256 key: at least 32 bytes "
                        "(256 bits, RFC 7518 §3.2) are required"]


def test_every_plaintext_transport_is_refused_one_line_each_naming_the_setting(tmp_path: Path) -> None:
    s = CaseSettings(**fit(
        tmp_path, kafka_properties={}, registry_url="http://registry:8081/apis/ccompat/v7",
        registry_properties={}, pg_url="postgresql://app@db:5432?sslmode=prefer",
        CASESTREAM_CASE_AUTH=AuthSettings(jwt_algorithm="RS256",
                                          jwks_url="http://idp.example/jwks")))
    problems = s.production_problems()
    assert [p.split(" ", 1)[0] for p in problems] == [
        "CASESTREAM_AUTH_JWKS_URL", "CASESTREAM_KAFKA_PROP_SECURITY_PROTOCOL",
        "CASESTREAM_REGISTRY_URL", "CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO",
        "CASESTREAM_PG_URL"]
    assert all("\n" not in p for p in problems)
    assert "PLAINTEXT" in problems[1] and "sslmode=prefer" in problems[4]
    with pytest.raises(ConfigError) as info:
        s.require_production_ready("case")
    assert str(info.value).count("\n") == 5
    # a PostgreSQL URL without sslmode is refused as well (libpq's default is prefer)
    bare = CaseSettings(**fit(tmp_path, pg_url="postgresql://app@db:5432"))
    assert [p.split(" ", 1)[0] for p in bare.production_problems()] == ["CASESTREAM_PG_URL"]


def test_plain_ssl_kafka_and_bearer_registry_credentials_are_accepted(tmp_path: Path) -> None:
    s = CaseSettings(**fit(tmp_path, kafka_properties={"security.protocol": "ssl"},
                           registry_properties={"bearer.auth.credentials.source": "STATIC_TOKEN",
                                                "bearer.auth.token": "t"},
                           pg_url="host=db user=app sslmode=require"))
    assert s.production_problems() == []


def test_the_mesh_setting_accepts_plaintext_clients_and_nothing_else(tmp_path: Path) -> None:
    plain = fit(tmp_path, kafka_properties={}, registry_url="http://registry:8081",
                registry_properties={}, pg_url="postgresql://app@db:5432",
                transport_security="mesh",
                CASESTREAM_CASE_AUTH=AuthSettings(jwt_algorithm="RS256",
                                                  jwks_url="http://idp.mesh/jwks"))
    assert CaseSettings(**plain).production_problems() == []
    # the mesh encrypts the wire; it does not make the public key private
    dev = CaseSettings(**{**plain, "CASESTREAM_CASE_AUTH": AuthSettings()})
    assert [p.split(" ", 1)[0] for p in dev.production_problems()] == ["CASESTREAM_AUTH_JWT_KEY"]


def test_development_mode_checks_no_transport(tmp_path: Path) -> None:
    assert CaseSettings(**fit(tmp_path, env="development", kafka_properties={},
                              registry_url="http://r")).production_problems() == []


def test_transport_security_takes_two_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASESTREAM_TRANSPORT_SECURITY", "none")
    with pytest.raises(Exception, match="mesh"):
        CaseSettings()
