"""Bearer tokens verified with the keys of a JWKS endpoint (a real HTTP server on loopback):
the key chosen by ``kid``, the key set cached, refetched when an unknown ``kid`` arrives (a
rotated key), at most once per cooldown."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from casestream.auth import AuthSettings, InvalidToken, TokenVerifier, mint_token
from casestream.errors import ConfigError


def _key() -> tuple[str, dict[str, Any]]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return pem, json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))


class Idp:
    """A JWKS endpoint serving ``keys`` (kid -> public JWK) and counting its requests."""

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}
        self.fetches = 0
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                idp.fetches += 1
                body = json.dumps({"keys": [{**k, "kid": kid, "use": "sig", "alg": "RS256"}
                                            for kid, k in idp.keys.items()]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def idp() -> Iterator[Idp]:
    server = Idp()
    yield server
    server.close()


def _token(pem: str, kid: str) -> str:
    """A token with the suite's claims (:func:`mint_token`), re-signed with a ``kid`` header."""
    claims = jwt.decode(mint_token(tenant="t1", roles=["officer"], subject="u1", key=pem, algorithm="RS256"),
                        options={"verify_signature": False})
    return jwt.encode(claims, pem, algorithm="RS256", headers={"kid": kid})


def test_keys_come_from_the_jwks_cached_and_refetched_for_a_rotated_kid(idp: Idp) -> None:
    pem_a, jwk_a = _key()
    pem_b, jwk_b = _key()
    idp.keys = {"a": jwk_a}
    verifier = TokenVerifier(AuthSettings(jwt_algorithm="RS256", jwks_url=idp.url,
                                          jwks_refresh_cooldown_s=0))
    assert verifier.verify(_token(pem_a, "a")).subject == "u1"
    assert verifier.verify(_token(pem_a, "a")).tenant_id == "t1"
    assert idp.fetches == 1  # the key set is cached
    idp.keys = {"a": jwk_a, "b": jwk_b}  # the provider rotates in key b
    assert verifier.verify(_token(pem_b, "b")).subject == "u1"
    assert idp.fetches == 2  # an unknown kid refetched the set once
    with pytest.raises(InvalidToken, match="token key id unknown"):
        verifier.verify(_token(pem_b, "nope"))
    # a token signed by another key under a known kid is a bad signature, not a refetch
    with pytest.raises(InvalidToken, match="signature invalid"):
        verifier.verify(_token(pem_b, "a"))


def test_unknown_kids_refetch_at_most_once_per_cooldown(idp: Idp) -> None:
    pem_a, jwk_a = _key()
    idp.keys = {"a": jwk_a}
    verifier = TokenVerifier(AuthSettings(jwt_algorithm="RS256", jwks_url=idp.url,
                                          jwks_refresh_cooldown_s=600))
    verifier.verify(_token(pem_a, "a"))
    for i in range(5):
        with pytest.raises(InvalidToken, match="token key id unknown"):
            verifier.verify(_token(pem_a, f"forged-{i}"))
    assert idp.fetches == 1


def test_an_unreachable_jwks_endpoint_is_a_401_reason_not_a_crash(idp: Idp) -> None:
    pem_a, jwk_a = _key()
    url = idp.url
    idp.close()
    verifier = TokenVerifier(AuthSettings(jwt_algorithm="RS256", jwks_url=url, jwks_timeout_s=1))
    with pytest.raises(InvalidToken, match="signing keys unavailable"):
        verifier.verify(_token(pem_a, "a"))


def test_jwks_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ConfigError, match="RS256 or ES256"):
        TokenVerifier(AuthSettings(jwks_url="https://idp.example/jwks"))
    with pytest.raises(ConfigError, match="JWKS_URL"):
        TokenVerifier(AuthSettings(jwt_algorithm="RS256", jwks_url="file:///etc/passwd"))
    assert not AuthSettings(jwt_algorithm="RS256", jwks_url="https://idp.example/jwks").uses_dev_key
