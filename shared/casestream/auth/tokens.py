"""Bearer-token (JWT) authentication: settings, verification, the principal, local minting.

A request is authenticated by a JWT in ``Authorization: Bearer <token>`` (RFC 6750),
verified with PyJWT. Claims (RFC 7519 + ours):

    sub        the actor (user or service account); becomes ``actor_id`` of events
    tenant     the tenant the caller acts for; every read and write is scoped to it
    roles      list of role names: ``officer`` (open, submit, read), ``supervisor``
               (read, resolve MANUAL_REVIEW sagas, re-drive and discard dead letters in the
               console), ``operator`` (the console shows every tenant); unknown names grant nothing
    client_id  optional OAuth client (RFC 9068 §2.2; ``azp`` accepted too); defaults to
               ``sub``. Idempotency keys and rate limits are scoped per client.
    iss, aud   must equal the configured issuer and audience
    exp, iat   required; ``nbf`` honoured when present; clock skew ``leeway_s``

Keys (``AuthSettings``, variables ``CASESTREAM_AUTH_*``): HS256 with a shared secret
(``JWT_KEY``, at least 32 bytes: RFC 7518 §3.2), or RS256 / ES256 with a PEM public key
(``JWT_KEY`` holding the PEM text, or ``JWT_KEY_FILE`` naming a PEM file). The default is
a well-known local development secret, :data:`DEV_JWT_KEY`: the demo, the tests and
``casestream token`` mint tokens with it. A deployment sets its own key; a service whose
``CASESTREAM_AUTO_REGISTER_SCHEMAS`` is false or whose ``CASESTREAM_ENV`` is ``production``
refuses to start with the dev key.

Or the keys of an identity provider's JWKS endpoint (``JWKS_URL``, RFC 7517 §5; RS256 /
ES256): PyJWT's ``PyJWKClient`` picks the key by the token header's ``kid``, caches the key
set for ``JWKS_CACHE_S`` and, on a ``kid`` it does not know (a rotated key), fetches the set
again at most once per ``JWKS_REFRESH_COOLDOWN_S`` (so forged ``kid`` values cannot make
every request hit the provider). ``JWKS_CA_FILE`` verifies the endpoint's certificate.

Errors::

    casestream.errors.CasestreamError
    └── AuthError                 root of this module's errors
        ├── InvalidToken          missing, malformed, expired, wrong signature/issuer/audience,
        │                         bad claims -> HTTP 401 (``reason`` is safe to show a client)
        └── AccessDenied          authenticated, but no required role -> HTTP 403
"""

from __future__ import annotations

import hashlib
import logging
import re
import ssl
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jwt
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from casestream.errors import CasestreamError, ConfigError

ROLE_OFFICER = "officer"
ROLE_SUPERVISOR = "supervisor"
ROLE_OPERATOR = "operator"
ROLES = frozenset({ROLE_OFFICER, ROLE_SUPERVISOR, ROLE_OPERATOR})
"""The roles the suite knows: officers open and submit cases, supervisors resolve; operators
see every tenant in the operations console (their token's tenant is then only a default)."""

log = logging.getLogger(__name__)

DEV_JWT_KEY = "casestream-local-development-key-never-use-in-production"
"""HS256 secret for local development, demo and tests (public by definition)."""

def key_fingerprint(key: str) -> str:
    """SHA-256 (hex) of ``key`` without surrounding whitespace: a key read from a file with
    a trailing newline, or pasted with a stray blank, is still the same key."""
    return hashlib.sha256(key.strip().encode("utf-8")).hexdigest()


DEV_KEY_FINGERPRINT = key_fingerprint(DEV_JWT_KEY)

DEV_ISSUER = "casestream-local"
DEFAULT_AUDIENCE = "casestream"

Algorithm = Literal["HS256", "RS256", "ES256"]
HMAC_MIN_KEY_BYTES = 32  # RFC 7518 §3.2: a key at least as long as the hash output

TENANT_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")
SUBJECT_PATTERN = re.compile(r"[\x21-\x7e][\x20-\x7e]{0,127}")
"""Tenant ids: 1..64 of ``[A-Za-z0-9._:-]``; subjects/clients: 1..128 printable ASCII."""


class AuthError(CasestreamError):
    """Root of the authentication and authorisation errors."""


class InvalidToken(AuthError):
    """No usable bearer token. ``reason`` is short, safe to send to the client; ``missing``
    is True when no token was sent at all (RFC 6750 §3.1: then no ``error`` attribute)."""

    def __init__(self, reason: str, *, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


class AccessDenied(AuthError):
    """The caller is authenticated but holds none of the roles an operation requires."""

    def __init__(self, required: Collection[str], held: Collection[str]) -> None:
        super().__init__(f"requires role {' or '.join(sorted(required))}; "
                         f"token has {', '.join(sorted(held)) or 'no roles'}")
        self.required = frozenset(required)
        self.held = frozenset(held)


class AuthSettings(BaseSettings):
    """How tokens are verified (and, locally, minted). Variables ``CASESTREAM_AUTH_<FIELD>``.

    Attributes:
        jwt_key: HS256 secret, or PEM public key text for RS256/ES256.
        jwt_key_file: PEM file with the public key (RS256/ES256); wins over ``jwt_key``.
        jwt_algorithm: the only algorithm accepted (no ``none``, no algorithm switching).
        jwt_issuer: required ``iss``.
        jwt_audience: required ``aud``.
        leeway_s: clock skew tolerated on ``exp``/``nbf``/``iat``, seconds.
        token_ttl_s: lifetime of tokens minted locally (``casestream token``, demo), seconds.
    """

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_AUTH_", frozen=True, extra="ignore")

    jwt_key: str = Field(DEV_JWT_KEY, description="HS256 secret, or PEM public key text for RS256/ES256",
                         json_schema_extra={"shown_default": "the public development key"})
    jwt_key_file: Path | None = Field(None, description="PEM file with the public key (RS256/ES256); wins over JWT_KEY")
    jwt_algorithm: Algorithm = Field("HS256", description="the only algorithm accepted")
    jwt_issuer: str = Field(DEV_ISSUER, description="required iss claim")
    jwt_audience: str = Field(DEFAULT_AUDIENCE, description="required aud claim")
    leeway_s: float = Field(30.0, description="clock skew tolerated on exp/nbf/iat, seconds")
    token_ttl_s: int = Field(3600, description="lifetime of locally minted tokens (casestream token), seconds")
    jwks_url: str | None = Field(
        None, description="JWKS endpoint of the identity provider (http/https): keys chosen by "
                          "the token's kid; wins over JWT_KEY (RS256/ES256 only)")
    jwks_cache_s: float = Field(300.0, gt=0, description="how long the fetched key set is used "
                                                         "before it is fetched again, seconds")
    jwks_refresh_cooldown_s: float = Field(
        30.0, ge=0, description="least time between two fetches forced by an unknown kid, seconds")
    jwks_timeout_s: float = Field(5.0, gt=0, description="JWKS request timeout, seconds")
    jwks_ca_file: Path | None = Field(None, description="CA bundle (PEM) verifying the JWKS "
                                                        "endpoint's certificate (default: the system's)")

    @property
    def key_source(self) -> str:
        """The variable the verification key comes from (for messages)."""
        return "CASESTREAM_AUTH_JWT_KEY_FILE" if self.jwt_key_file is not None \
            else "CASESTREAM_AUTH_JWT_KEY"

    @property
    def uses_dev_key(self) -> bool:
        """True when tokens are verified with the public development secret, whatever its
        source (``JWT_KEY`` or ``JWT_KEY_FILE``) and surrounding whitespace: its
        :func:`key_fingerprint` is :data:`DEV_KEY_FINGERPRINT`. False with a JWKS URL or an
        unreadable key file (the verifier reports that)."""
        if self.jwks_url is not None:
            return False
        try:
            key = self.verification_key()
        except ConfigError:
            return False
        return key_fingerprint(key) == DEV_KEY_FINGERPRINT

    def production_problems(self, *, transport: bool = True) -> list[str]:
        """Why these settings are unfit for production, one line each naming the variable:
        the development key (:attr:`uses_dev_key`); an HS256 key under
        :data:`HMAC_MIN_KEY_BYTES` once trimmed (RFC 7518 §3.2: at least the hash size);
        with ``transport``, a JWKS URL that is not https (whoever controls that path
        controls the keys)."""
        problems = []
        if self.jwks_url is not None:
            if transport and not self.jwks_url.lower().startswith("https://"):
                problems.append(f"CASESTREAM_AUTH_JWKS_URL is {self.jwks_url}: fetch the keys "
                                "over https")
            return problems
        if self.uses_dev_key:
            problems.append(f"{self.key_source} holds the public development key: set a key "
                            "of your own")
        elif self.jwt_algorithm == "HS256":
            try:
                size = len(self.verification_key().strip().encode("utf-8"))
            except ConfigError as e:
                return [*problems, str(e)]
            if size < HMAC_MIN_KEY_BYTES:
                problems.append(f"{self.key_source} is a {size}-byte HS256 key: at least "
                                f"{HMAC_MIN_KEY_BYTES} bytes ({HMAC_MIN_KEY_BYTES * 8} bits, "
                                "RFC 7518 §3.2) are required")
        return problems

    def verification_key(self) -> str:
        """The key material tokens are verified with (secret or PEM text).

        Raises:
            ConfigError: the key file cannot be read, or the key is empty.
        """
        if self.jwt_key_file is not None:
            try:
                key = self.jwt_key_file.read_text(encoding="utf-8")
            except OSError as e:
                raise ConfigError(f"CASESTREAM_AUTH_JWT_KEY_FILE={self.jwt_key_file}: {e}") from e
        else:
            key = self.jwt_key
        if not key.strip():
            raise ConfigError("CASESTREAM_AUTH_JWT_KEY is empty")
        return key


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who is calling, from a verified token.

    Attributes:
        subject: ``sub``, the actor id written into events.
        tenant_id: ``tenant``; the only tenant whose data the caller may see, unless it holds
            the ``operator`` role (see :attr:`tenant_scope`).
        client_id: ``client_id`` / ``azp`` / ``sub``: scope of idempotency keys and rate limits.
        roles: role names from the token (unknown ones grant nothing).
    """

    subject: str
    tenant_id: str
    client_id: str
    roles: frozenset[str]

    @property
    def tenant_scope(self) -> str | None:
        """The tenant whose data a read may return: ``tenant_id``, or None (every tenant) for
        a principal holding the ``operator`` role. Writes stay scoped to ``tenant_id``."""
        return None if ROLE_OPERATOR in self.roles else self.tenant_id

    def require(self, *allowed: str) -> None:
        """Raise :class:`AccessDenied` unless the principal holds one of ``allowed``."""
        if not self.roles & set(allowed):
            raise AccessDenied(allowed, self.roles)


class TokenVerifier:
    """Verifies bearer tokens against one configured key and algorithm.

    Args:
        settings: key, algorithm, issuer, audience, leeway.

    Raises:
        ConfigError: the key does not suit the algorithm (unreadable PEM, HS256 secret
            shorter than 32 bytes).
    """

    def __init__(self, settings: AuthSettings) -> None:
        self._settings = settings
        self._algorithm = settings.jwt_algorithm
        self._jwt = jwt.PyJWT(options={"enforce_minimum_key_length": True})
        self._jwks = _jwks_client(settings) if settings.jwks_url else None
        self._key = None if self._jwks else _prepare_key(settings.verification_key(), settings.jwt_algorithm)

    def _key_for(self, token: str) -> Any:
        """The key verifying ``token``: the configured one, or the JWKS key of its ``kid``."""
        if self._jwks is None:
            return self._key
        try:
            return self._jwks.get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError:
            log.warning("JWKS endpoint %s did not answer", self._settings.jwks_url)
            raise InvalidToken("token signing keys unavailable") from None
        except jwt.PyJWKClientError as e:
            if "kid" in str(e) or "matches" in str(e):
                raise InvalidToken("token key id unknown") from None
            log.warning("JWKS endpoint %s: %s", self._settings.jwks_url, e)
            raise InvalidToken("token signing keys unavailable") from None
        except jwt.PyJWTError:
            raise InvalidToken("token malformed") from None

    @property
    def settings(self) -> AuthSettings:
        return self._settings

    def verify(self, token: str) -> Principal:
        """Return the principal of a valid token.

        Raises:
            InvalidToken: signature, algorithm, issuer, audience, expiry or claims are wrong.
        """
        s = self._settings
        key = self._key_for(token)
        try:
            claims = self._jwt.decode(
                token, key, algorithms=[self._algorithm], audience=s.jwt_audience,
                issuer=s.jwt_issuer, leeway=s.leeway_s,
                options={"require": ["exp", "iat", "sub", "iss", "aud"]})
        except jwt.ExpiredSignatureError:
            raise InvalidToken("token expired") from None
        except jwt.ImmatureSignatureError:
            raise InvalidToken("token not yet valid") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken("token audience not accepted") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken("token issuer not accepted") from None
        except jwt.MissingRequiredClaimError as e:
            raise InvalidToken(f"token lacks claim {e.claim}") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("token signature invalid") from None
        except jwt.InvalidAlgorithmError:
            raise InvalidToken("token algorithm not accepted") from None
        except jwt.PyJWTError:
            raise InvalidToken("token malformed") from None
        return principal_from_claims(claims)


def principal_from_claims(claims: Mapping[str, Any]) -> Principal:
    """Build a :class:`Principal` from verified claims.

    Raises:
        InvalidToken: ``sub``, ``tenant``, ``roles`` or ``client_id`` missing or malformed.
    """
    subject = claims.get("sub")
    if not isinstance(subject, str) or not SUBJECT_PATTERN.fullmatch(subject):
        raise InvalidToken("token claim sub must be 1..128 printable ASCII characters")
    tenant = claims.get("tenant")
    if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
        raise InvalidToken("token claim tenant must be 1..64 of A-Z a-z 0-9 . _ : -")
    roles = claims.get("roles")
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise InvalidToken("token claim roles must be a list of strings")
    client = claims.get("client_id", claims.get("azp", subject))
    if not isinstance(client, str) or not SUBJECT_PATTERN.fullmatch(client):
        raise InvalidToken("token claim client_id must be 1..128 printable ASCII characters")
    return Principal(subject=subject, tenant_id=tenant, client_id=client,
                     roles=frozenset(roles))


def mint_token(*, tenant: str, roles: Iterable[str], subject: str, key: str,
               algorithm: Algorithm = "HS256", issuer: str = DEV_ISSUER,
               audience: str = DEFAULT_AUDIENCE, ttl_s: float = 3600,
               client_id: str | None = None, now: float | None = None,
               extra: Mapping[str, Any] | None = None) -> str:
    """Return a signed JWT carrying the suite's claims.

    Args:
        key: HS256 secret or PEM private key (RS256/ES256).
        ttl_s: seconds until ``exp``.
        now: issue time, seconds since the epoch (default: now).
        extra: more claims (tests use it to forge bad ones).

    Raises:
        ConfigError: the key does not suit the algorithm.
    """
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {"sub": subject, "tenant": tenant, "roles": sorted(set(roles)),
                              "iss": issuer, "aud": audience, "iat": issued,
                              "exp": issued + int(ttl_s)}
    if client_id is not None:
        claims["client_id"] = client_id
    claims.update(extra or {})
    try:
        return jwt.PyJWT(options={"enforce_minimum_key_length": True}).encode(
            claims, _prepare_key(key, algorithm, private=True), algorithm=algorithm)
    except jwt.PyJWTError as e:
        raise ConfigError(f"cannot sign a {algorithm} token with this key: {e}") from e


def dev_token(tenant: str, roles: Iterable[str] = (ROLE_OFFICER,), *,
              subject: str = "dev-officer", settings: AuthSettings | None = None,
              client_id: str | None = None) -> str:
    """A token signed with the configured HS256 secret (default: :data:`DEV_JWT_KEY`).

    Raises:
        ConfigError: the settings use a public-key algorithm (mint with the private key:
            :func:`mint_token` or ``casestream token --private-key``).
    """
    s = settings or AuthSettings()
    if s.jwt_algorithm != "HS256":
        raise ConfigError(f"CASESTREAM_AUTH_JWT_ALGORITHM={s.jwt_algorithm}: local tokens need "
                          "the private key (casestream token --private-key FILE)")
    return mint_token(tenant=tenant, roles=roles, subject=subject, key=s.verification_key(),
                      issuer=s.jwt_issuer, audience=s.jwt_audience, ttl_s=s.token_ttl_s,
                      client_id=client_id)


def bearer_headers(tenant: str, roles: Iterable[str] = (ROLE_OFFICER,), *,
                   subject: str = "dev-officer", settings: AuthSettings | None = None,
                   client_id: str | None = None) -> dict[str, str]:
    """``{"Authorization": "Bearer <dev_token(...)>"}`` — for tests, the demo and scripts."""
    token = dev_token(tenant, roles, subject=subject, settings=settings, client_id=client_id)
    return {"Authorization": f"Bearer {token}"}


def _jwks_client(settings: AuthSettings) -> jwt.PyJWKClient:
    """A ``PyJWKClient`` on ``settings.jwks_url``: the key set cached ``jwks_cache_s``, an
    unknown ``kid`` refetching it at most once per ``jwks_refresh_cooldown_s``.

    Raises:
        ConfigError: HS256 (a JWKS publishes public keys), a URL that is not http(s), or an
            unreadable CA file.
    """
    if settings.jwt_algorithm == "HS256":
        raise ConfigError("CASESTREAM_AUTH_JWKS_URL needs CASESTREAM_AUTH_JWT_ALGORITHM RS256 or ES256 "
                          "(a JWKS publishes public keys)")
    context = None
    if settings.jwks_ca_file is not None:
        try:
            context = ssl.create_default_context(cafile=str(settings.jwks_ca_file))
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"CASESTREAM_AUTH_JWKS_CA_FILE={settings.jwks_ca_file}: {e}") from None
    try:
        return jwt.PyJWKClient(str(settings.jwks_url), cache_keys=False, cache_jwk_set=True,
                               lifespan=settings.jwks_cache_s, timeout=settings.jwks_timeout_s,
                               ssl_context=context, cooldown_duration=settings.jwks_refresh_cooldown_s)
    except jwt.PyJWKClientError as e:
        raise ConfigError(f"CASESTREAM_AUTH_JWKS_URL={settings.jwks_url}: {e}") from None


def _prepare_key(key: str, algorithm: str, *, private: bool = False) -> Any:
    """Parse and check ``key`` for ``algorithm`` once (PEM parsed, HMAC length checked)."""
    try:
        alg = jwt.get_algorithm_by_name(algorithm)
        prepared = alg.prepare_key(key)
        problem = alg.check_key_length(prepared)
    except (jwt.PyJWTError, ValueError, TypeError, NotImplementedError) as e:
        kind = "private" if private else "public"
        what = "secret" if algorithm == "HS256" else f"PEM {kind} key"
        raise ConfigError(f"CASESTREAM_AUTH_JWT_KEY is not a usable {algorithm} {what}: {e}") from e
    if problem:
        raise ConfigError(f"CASESTREAM_AUTH_JWT_KEY too weak for {algorithm}: {problem} "
                          f"(HS256 needs >= {HMAC_MIN_KEY_BYTES} bytes)")
    return prepared
