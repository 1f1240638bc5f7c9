"""The registry client against an Apicurio Registry that demands authentication.

One registry serves every test of the module: the project's own (``deploy/infra.sh up registry``)
started beside the suite's with ``CASESTREAM_REGISTRY_NAME=auth-test``, in-memory storage, its
own ports, ``CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE`` (bearer JWTs verified locally with a key
pair made here) and ``CASESTREAM_REGISTRY_USERS_FILE`` (HTTP basic). The client is configured the
way a deployment configures it: ``CASESTREAM_REGISTRY_PROP_*`` variables, secrets from files.

Ports: ``CASESTREAM_REGISTRY_AUTH_TEST_PORT`` (default CASESTREAM_REGISTRY_PORT + 700), its
management port one above.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from casestream.errors import RegistryAuthError
from casestream.service.settings import CommonSettings

pytestmark = pytest.mark.secured

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "deploy" / "infra.sh"
SCHEMA = {"type": "record", "name": "AuthProbe", "namespace": "test.auth",
          "fields": [{"name": "id", "type": "string"}]}


def _key_pair() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public


def _token(private_pem: bytes, *, lifetime_s: int = 300) -> str:
    now = int(time.time())
    return jwt.encode({"sub": "ci-pipeline", "preferred_username": "ci-pipeline", "iss": "casestream-test",
                       "iat": now, "exp": now + lifetime_s}, private_pem, algorithm="RS256")


@dataclass
class SecuredRegistry:
    url: str
    folder: Path
    private_pem: bytes
    password: str

    def secret(self, name: str, value: str) -> Path:
        path = self.folder / name
        path.write_text(value, encoding="utf-8")
        path.chmod(0o600)
        return path

    def bearer_env(self, token: str) -> dict[str, str]:
        """A deployment's registry settings for a static bearer token read from a file."""
        return {"CASESTREAM_REGISTRY_URL": self.url,
                "CASESTREAM_REGISTRY_PROP_BEARER_AUTH_CREDENTIALS_SOURCE": "STATIC_TOKEN",
                "CASESTREAM_REGISTRY_PROP_BEARER_AUTH_TOKEN_FILE": str(self.secret(f"t{uuid.uuid4().hex}", token)),
                # required by confluent-kafka's client for a static token (Confluent Cloud values)
                "CASESTREAM_REGISTRY_PROP_BEARER_AUTH_LOGICAL_CLUSTER": "-",
                "CASESTREAM_REGISTRY_PROP_BEARER_AUTH_IDENTITY_POOL_ID": "-"}

    def basic_env(self, user_info: str) -> dict[str, str]:
        return {"CASESTREAM_REGISTRY_URL": self.url,
                "CASESTREAM_REGISTRY_PROP_BASIC_AUTH_USER_INFO_FILE":
                    str(self.secret(f"u{uuid.uuid4().hex}", user_info))}


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredRegistry]:
    folder = tmp_path_factory.mktemp("registry-auth")
    private_pem, public_pem = _key_pair()
    (folder / "jwt-public.pem").write_bytes(public_pem)
    password = uuid.uuid4().hex
    users = folder / "users"
    users.write_text(f"schema-admin={password}\n", encoding="utf-8")
    users.chmod(0o600)
    port = int(os.environ.get("CASESTREAM_REGISTRY_AUTH_TEST_PORT")
               or int(os.environ.get("CASESTREAM_REGISTRY_PORT", "18081")) + 700)
    env = {**os.environ, "CASESTREAM_REGISTRY_NAME": "auth-test", "CASESTREAM_REGISTRY_STORAGE": "memory",
           "CASESTREAM_REGISTRY_PORT": str(port), "CASESTREAM_REGISTRY_MGMT_PORT": str(port + 1),
           "CASESTREAM_REGISTRY_JWT_PUBLIC_KEY_FILE": str(folder / "jwt-public.pem"),
           "CASESTREAM_REGISTRY_USERS_FILE": str(users)}

    def infra(*args: str) -> None:
        done = subprocess.run([str(INFRA), *args, "registry"], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"deploy/infra.sh {args[0]} registry failed:\n{done.stderr[-3000:]}"

    started = time.monotonic()
    try:
        infra("up")
        print(f"registry-auth: the secured registry answered in {time.monotonic() - started:.1f} s")
        yield SecuredRegistry(url=f"http://127.0.0.1:{port}/apis/ccompat/v7", folder=folder,
                              private_pem=private_pem, password=password)
    finally:
        infra("down")


def _settings(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> CommonSettings:
    for name in [n for n in os.environ if n.startswith("CASESTREAM_REGISTRY_PROP")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return CommonSettings()


def test_a_valid_bearer_token_registers_and_reads_a_schema(registry: SecuredRegistry,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    subject = f"auth-bearer-{uuid.uuid4().hex[:8]}-value"
    with _settings(monkeypatch, registry.bearer_env(_token(registry.private_pem))).schema_registry(
            max_retries=0) as reg:
        schema_id = reg.register(subject, SCHEMA)
        assert reg.get_schema(schema_id) == SCHEMA
        assert reg.lookup(subject, SCHEMA) == schema_id
        assert subject in reg.subjects()


@pytest.mark.parametrize("case", ["no credentials", "foreign key", "expired", "garbage"])
def test_a_missing_or_bad_token_is_refused_with_a_named_error(registry: SecuredRegistry, case: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if case == "no credentials":
        env = {"CASESTREAM_REGISTRY_URL": registry.url}
    else:
        token = {"foreign key": lambda: _token(_key_pair()[0]),
                 "expired": lambda: _token(registry.private_pem, lifetime_s=-600),
                 "garbage": lambda: "not-a-jwt"}[case]()
        env = registry.bearer_env(token)
    with _settings(monkeypatch, env).schema_registry(max_retries=0) as reg:
        with pytest.raises(RegistryAuthError, match="HTTP 401.*refused the credentials"):
            reg.register(f"auth-refused-{uuid.uuid4().hex[:8]}-value", SCHEMA)
        with pytest.raises(RegistryAuthError, match="HTTP 401"):
            reg.subjects()  # reads need authentication too


def test_basic_auth_registers_with_the_right_password_and_is_refused_with_a_wrong_one(
        registry: SecuredRegistry, monkeypatch: pytest.MonkeyPatch) -> None:
    subject = f"auth-basic-{uuid.uuid4().hex[:8]}-value"
    with _settings(monkeypatch, registry.basic_env(f"schema-admin:{registry.password}")).schema_registry(
            max_retries=0) as reg:
        schema_id = reg.register(subject, SCHEMA)
        assert reg.get_schema(schema_id) == SCHEMA
    with _settings(monkeypatch, registry.basic_env("schema-admin:wrong")).schema_registry(max_retries=0) as reg:
        with pytest.raises(RegistryAuthError, match="HTTP 401"):
            reg.get_schema(schema_id)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {n: v for n, v in os.environ.items() if not n.startswith("CASESTREAM_REGISTRY_PROP")}
    return subprocess.run([sys.executable, "-m", "casestream", *args], env={**clean, **env},
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_the_cli_registers_with_a_token_and_names_the_refusal_without_one(registry: SecuredRegistry) -> None:
    args = ["schemas", "register", "--registry", registry.url, "--subject", "casestream.case.CaseOpened"]
    refused = _cli(args, {})
    assert refused.returncode == 2, refused
    assert "HTTP 401" in refused.stderr and "refused the credentials" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr + refused.stdout
    done = _cli(args, registry.bearer_env(_token(registry.private_pem)))
    assert done.returncode == 0, done.stderr
    assert "casestream.case.CaseOpened" in done.stdout
