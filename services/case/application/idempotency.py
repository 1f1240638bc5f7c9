"""Idempotency keys for write endpoints: scope, request fingerprint, stored response.

Rules (source: IETF draft-ietf-httpapi-idempotency-key-header):
- A key is scoped by (tenant, client, route template); the raw key is never stored or
  logged, only its SHA-256 (``key_hash``).
- The fingerprint is SHA-256 over the method, the concrete path and the canonical JSON
  body (keys sorted, no insignificant whitespace; an empty body counts as ``{}``), so the
  same key sent for another case or with another body is a conflict, while re-serialised
  JSON of the same request is not.
- The first successful response is stored in the same transaction as the business write
  and replayed for the key's lifetime (TTL); failed requests store nothing, so a client
  may retry them with the same key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

KEY_MAX = 255


def hash_key(raw_key: str) -> str:
    """Return the hex SHA-256 of an Idempotency-Key (what is stored and logged)."""
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def fingerprint(method: str, path: str, body: Mapping[str, Any]) -> str:
    """Return the hex SHA-256 identifying one request (method, concrete path, canonical body)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(f"{method.upper()} {path}\n{canonical}".encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyScope:
    """Where a key is unique: tenant, client (actor until auth lands), route template, key hash."""

    tenant_id: str
    client_id: str
    route: str
    key_hash: str

    @classmethod
    def of(cls, *, tenant_id: str, client_id: str, route: str, raw_key: str) -> IdempotencyScope:
        """Build a scope from the raw header value (hashed here, never kept)."""
        return cls(tenant_id=tenant_id, client_id=client_id, route=route, key_hash=hash_key(raw_key))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    """An HTTP response as stored for replay: status, JSON body, and the headers that matter."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyRecord:
    """A processed request: its fingerprint, response, and lifetime (UTC)."""

    scope: IdempotencyScope
    fingerprint: str
    response: StoredResponse
    created_at: datetime
    expires_at: datetime

    def expired(self, now: datetime) -> bool:
        """True once ``now`` is at or past ``expires_at``: the key may then be reused."""
        return now >= self.expires_at


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotentRequest:
    """What a write endpoint passes to a use case when the client sent a key."""

    scope: IdempotencyScope
    fingerprint: str
