"""Unit tests of ``casestream.auth.tokens``: token verification, claims, keys, minting, the CLI.

Each test names the rule it guards; every rule has a case that must be refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path

import jwt
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.utils import base64url_encode

from casestream.auth.tokens import (
    DEV_JWT_KEY, AccessDenied, AuthSettings, InvalidToken, Principal, TokenVerifier,
    bearer_headers, dev_token, mint_token,
)
from casestream.cli.token import token as token_command
from casestream.errors import ConfigError
from casestream.http.edge import edge_policy
from services.case.settings import CaseSettings

KEY = "k" * 40
SETTINGS = AuthSettings(jwt_key=KEY, jwt_issuer="iss-1", jwt_audience="aud-1", leeway_s=0)


def mint(**overrides: object) -> str:
    args: dict[str, object] = dict(tenant="tenant-a", roles=["officer"], subject="alice",
                                   key=KEY, issuer="iss-1", audience="aud-1")
    args.update(overrides)
    return mint_token(**args)  # type: ignore[arg-type]


def refused(token: str, settings: AuthSettings = SETTINGS) -> str:
    with pytest.raises(InvalidToken) as info:
        TokenVerifier(settings).verify(token)
    return info.value.reason


def pem_pair(private_key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> tuple[str, str]:
    private = private_key.private_bytes(serialization.Encoding.PEM,
                                        serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()).decode()
    public = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


class TestVerify:
    def test_valid_token_gives_the_principal(self) -> None:
        principal = TokenVerifier(SETTINGS).verify(mint(roles=["officer", "supervisor"]))
        assert principal == Principal(subject="alice", tenant_id="tenant-a", client_id="alice",
                                      roles=frozenset({"officer", "supervisor"}))

    def test_client_id_claim_then_azp_scope_the_client(self) -> None:
        v = TokenVerifier(SETTINGS)
        assert v.verify(mint(client_id="portal")).client_id == "portal"
        assert v.verify(mint(extra={"azp": "mobile"})).client_id == "mobile"

    def test_expired(self) -> None:
        assert refused(mint(now=time.time() - 7200, ttl_s=3600)) == "token expired"

    def test_leeway_tolerates_small_skew(self) -> None:
        skewed = mint(now=time.time() - 3610, ttl_s=3600)
        settings = AuthSettings(jwt_key=KEY, jwt_issuer="iss-1", jwt_audience="aud-1",
                                leeway_s=30)
        assert TokenVerifier(settings).verify(skewed).subject == "alice"

    def test_not_yet_valid(self) -> None:
        assert refused(mint(extra={"nbf": int(time.time()) + 600})) == "token not yet valid"

    def test_wrong_key(self) -> None:
        assert refused(mint(key="x" * 40)) == "token signature invalid"

    def test_wrong_issuer_and_audience(self) -> None:
        assert refused(mint(issuer="elsewhere")) == "token issuer not accepted"
        assert refused(mint(audience="other-api")) == "token audience not accepted"

    @pytest.mark.parametrize("claim", ["exp", "iat", "sub", "iss", "aud"])
    def test_registered_claims_are_required(self, claim: str) -> None:
        claims = jwt.decode(mint(), KEY, algorithms=["HS256"], audience="aud-1")
        del claims[claim]
        assert refused(jwt.encode(claims, KEY, algorithm="HS256")).startswith("token ")

    @pytest.mark.parametrize(("extra", "reason"), [
        ({"tenant": None}, "tenant"), ({"tenant": ""}, "tenant"),
        ({"tenant": "a b/c"}, "tenant"), ({"tenant": 7}, "tenant"),
        ({"roles": "officer"}, "roles"), ({"roles": [1]}, "roles"), ({"roles": None}, "roles"),
        ({"sub": ""}, "sub"), ({"client_id": "\u00e9"}, "client_id"),
    ])
    def test_suite_claims_are_checked(self, extra: dict[str, object], reason: str) -> None:
        assert reason in refused(mint(extra=extra))

    def test_garbage_and_unsigned_tokens(self) -> None:
        assert refused("not-a-jwt") == "token malformed"
        unsigned = jwt.encode(jwt.decode(mint(), KEY, algorithms=["HS256"], audience="aud-1"),
                              None, algorithm="none")
        assert refused(unsigned) == "token algorithm not accepted"

    def test_only_the_configured_algorithm(self) -> None:
        hs512 = jwt.encode(jwt.decode(mint(), KEY, algorithms=["HS256"], audience="aud-1"),
                           KEY * 2, algorithm="HS512")
        assert refused(hs512) == "token algorithm not accepted"


class TestPublicKeys:
    @pytest.mark.parametrize(("algorithm", "factory"), [
        ("RS256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ("ES256", lambda: ec.generate_private_key(ec.SECP256R1())),
    ])
    def test_sign_private_verify_public(self, algorithm: str, factory: object,
                                        tmp_path: Path) -> None:
        private, public = pem_pair(factory())  # type: ignore[operator]
        token = mint(key=private, algorithm=algorithm)
        inline = AuthSettings(jwt_key=public, jwt_algorithm=algorithm, jwt_issuer="iss-1",
                              jwt_audience="aud-1")
        assert TokenVerifier(inline).verify(token).tenant_id == "tenant-a"
        (tmp_path / "pub.pem").write_text(public)
        from_file = AuthSettings(jwt_key_file=tmp_path / "pub.pem", jwt_algorithm=algorithm,
                                 jwt_issuer="iss-1", jwt_audience="aud-1")
        assert TokenVerifier(from_file).verify(token).subject == "alice"
        # someone else's key pair is refused
        _, other_public = pem_pair(factory())  # type: ignore[operator]
        other = AuthSettings(jwt_key=other_public, jwt_algorithm=algorithm, jwt_issuer="iss-1",
                             jwt_audience="aud-1")
        assert refused(token, other) == "token signature invalid"

    def test_hs256_token_signed_with_the_public_key_is_refused(self) -> None:
        """Algorithm confusion: an HS256 token whose secret is the public PEM must not pass."""
        private, public = pem_pair(rsa.generate_private_key(public_exponent=65537, key_size=2048))
        settings = AuthSettings(jwt_key=public, jwt_algorithm="RS256", jwt_issuer="iss-1",
                                jwt_audience="aud-1")
        assert TokenVerifier(settings).verify(mint(key=private, algorithm="RS256"))
        claims = jwt.decode(mint(), KEY, algorithms=["HS256"], audience="aud-1")
        segments = [base64url_encode(json.dumps(part).encode())
                    for part in ({"alg": "HS256", "typ": "JWT"}, claims)]
        signing_input = b".".join(segments)
        signature = hmac.new(public.encode(), signing_input, hashlib.sha256).digest()
        forged = (signing_input + b"." + base64url_encode(signature)).decode()
        assert refused(forged, settings) == "token algorithm not accepted"


class TestKeysAtStartUp:
    def test_short_hmac_key_is_a_config_error(self) -> None:
        with pytest.raises(ConfigError, match="too weak"):
            TokenVerifier(AuthSettings(jwt_key="short-secret"))

    def test_unparseable_pem_is_a_config_error(self) -> None:
        with pytest.raises(ConfigError, match="RS256"):
            TokenVerifier(AuthSettings(jwt_key="not a pem", jwt_algorithm="RS256"))

    def test_missing_key_file_is_a_config_error(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="KEY_FILE"):
            TokenVerifier(AuthSettings(jwt_key_file=tmp_path / "nope.pem",
                                       jwt_algorithm="ES256"))

    def test_settings_come_from_the_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("CASESTREAM_AUTH_JWT_KEY", KEY)
        monkeypatch.setenv("CASESTREAM_AUTH_JWT_ISSUER", "env-iss")
        monkeypatch.setenv("CASESTREAM_AUTH_JWT_AUDIENCE", "env-aud")
        settings = CaseSettings().auth
        assert (settings.jwt_key, settings.jwt_issuer, settings.jwt_audience) == (
            KEY, "env-iss", "env-aud")
        assert not settings.uses_dev_key

    def test_dev_key_refused_in_production(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("CASESTREAM_AUTH_JWT_KEY", "CASESTREAM_AUTH_JWT_KEY_FILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("CASESTREAM_AUTO_REGISTER_SCHEMAS", "false")
        with pytest.raises(ConfigError, match="development key"):
            edge_policy(CaseSettings(), "case")
        monkeypatch.setenv("CASESTREAM_AUTH_JWT_KEY", KEY)
        assert edge_policy(CaseSettings(), "case").verifier.settings.jwt_key == KEY


class TestRolesAndHelpers:
    def test_require(self) -> None:
        officer = Principal(subject="a", tenant_id="t", client_id="a",
                            roles=frozenset({"officer", "auditor"}))
        officer.require("officer")
        officer.require("supervisor", "officer")
        with pytest.raises(AccessDenied, match="supervisor"):
            officer.require("supervisor")
        with pytest.raises(AccessDenied):
            Principal(subject="a", tenant_id="t", client_id="a", roles=frozenset()).require(
                "officer")

    def test_dev_token_and_bearer_headers_use_the_dev_key(self) -> None:
        verifier = TokenVerifier(AuthSettings(jwt_key=DEV_JWT_KEY))
        assert verifier.verify(dev_token("t1")).roles == {"officer"}
        header = bearer_headers("t2", ("supervisor",), subject="sam")["Authorization"]
        assert header.startswith("Bearer ")
        assert verifier.verify(header.removeprefix("Bearer ")).subject == "sam"


class TestTokenCommand:
    def test_mints_a_verifiable_token(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("CASESTREAM_AUTH_JWT_KEY", KEY)
        result = CliRunner().invoke(token_command, [
            "--tenant", "tenant-a", "--role", "officer", "--role", "supervisor",
            "--subject", "bob", "--ttl", "60"])
        assert result.exit_code == 0, result.output
        principal = TokenVerifier(AuthSettings()).verify(result.output.strip())
        assert principal.tenant_id == "tenant-a" and principal.subject == "bob"
        assert principal.roles == {"officer", "supervisor"}
        header = CliRunner().invoke(token_command, ["--tenant", "t", "--header"]).output
        assert header.startswith("Authorization: Bearer ")

    @pytest.mark.parametrize("args", [["--tenant", "bad tenant"],
                                      ["--tenant", "t", "--role", "admin"],
                                      ["--role", "officer"], ["--tenant", "t", "--subject", ""]])
    def test_bad_arguments(self, args: list[str]) -> None:
        assert CliRunner().invoke(token_command, args).exit_code == 2

    def test_public_key_algorithms_need_the_private_key(self, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
        private, public = pem_pair(ec.generate_private_key(ec.SECP256R1()))
        monkeypatch.setenv("CASESTREAM_AUTH_JWT_ALGORITHM", "ES256")
        monkeypatch.setenv("CASESTREAM_AUTH_JWT_KEY", public)
        assert CliRunner().invoke(token_command, ["--tenant", "t"]).exit_code == 2
        (tmp_path / "key.pem").write_text(private)
        result = CliRunner().invoke(token_command, ["--tenant", "t", "--private-key",
                                                    str(tmp_path / "key.pem")])
        assert result.exit_code == 0, result.output
        assert TokenVerifier(AuthSettings()).verify(result.output.strip()).tenant_id == "t"
