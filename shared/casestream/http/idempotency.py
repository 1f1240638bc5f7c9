"""HTTP ``Idempotency-Key`` for write routes: key check, scope, replay, conflict, in flight.

Rules (source: IETF draft-ietf-httpapi-idempotency-key-header, and the Stripe-style
semantics it describes):

- The header value is 1..:data:`KEY_MAX` printable ASCII characters, no blank at either end
  (:data:`KEY_PATTERN`); anything else is a 400 ``validation_error`` naming the header; a
  route that requires a key answers 400 ``missing_idempotency_key`` without one.
- A key is scoped by (tenant, subject, client, route template): the same key sent by
  another tenant, user or OAuth client, or to another route, is another request. The raw
  key is never stored or logged, only its SHA-256 (``key_hash``; logs carry its first 16
  hex digits).
- The request's fingerprint is SHA-256 over the method, the concrete path and the canonical
  JSON body (keys sorted, no insignificant whitespace; no body counts as ``{}``).
- First request: processed, and its response (status, JSON body, the headers the route
  chose: ``Location``, ``ETag``...) stored IN THE SAME TRANSACTION as the command's state
  change and outbox row (:meth:`Idempotency.begin` / :meth:`Idempotency.complete` take the
  store bound to that transaction). Same key + same request -> the stored response again,
  with ``Idempotent-Replayed: true``. Same key + another request -> 409
  ``idempotency_conflict``. Same key while the first is still in its transaction -> 409
  ``request_in_flight`` with ``Retry-After: 1``.
- Non-2xx outcomes are never stored: a failed command raises and its transaction rolls back
  (no record, key released), and a non-2xx response handed to :meth:`Idempotency.complete`
  is answered but not stored. A later good retry with the same key is processed as new.
- A record lives ``ttl`` (default 24 h); from ``expires_at`` on, the key may be used again
  and :meth:`IdempotencyStore.purge_expired` deletes the record.

Stores: :class:`InMemoryIdempotencyStore` (unit tests; transactions staged in memory) and
``casestream.http.pgidempotency.PgIdempotencyStore`` (PostgreSQL table ``idempotency_keys``,
created by its ``IDEMPOTENCY_MIGRATIONS``, which every service with an outbox applies).
Counters (``idempotency_replays_total``, ``idempotency_conflicts_total`` on ``/metrics``):
:class:`IdempotencyCounters`, installed on an app by :meth:`Idempotency.install`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse

from casestream.clock import utc_now
from casestream.http.authn import principal_of
from casestream.http.counters import EdgeCounters
from casestream.http.problem import HttpProblem

__all__ = [
    "DEFAULT_TTL", "IDEMPOTENCY_HEADER", "KEY_MAX", "KEY_PATTERN", "REPLAYED_HEADER", "Idempotency", "IdempotencyConflict",
    "IdempotencyCounters", "IdempotencyRecord", "IdempotencyScope", "IdempotencyStore",
    "IdempotentRequest", "InMemoryIdempotencyStore", "RequestInFlight", "StoredResponse",
    "fingerprint", "hash_key", "idempotency_key_of",
]

log = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_MAX = 255
KEY_PATTERN = rf"^[\x21-\x7e](?:[\x20-\x7e]{{0,{KEY_MAX - 2}}}[\x21-\x7e])?$"
"""1..255 printable ASCII characters, no space at either end (also for OpenAPI documents)."""
DEFAULT_TTL = timedelta(hours=24)

_KEY = re.compile(KEY_PATTERN)

def hash_key(raw_key: str) -> str:
    """The hex SHA-256 of an Idempotency-Key (what is stored and logged)."""
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def fingerprint(method: str, path: str, body: Any) -> str:
    """The hex SHA-256 identifying one request: method, concrete path, canonical JSON body."""
    canonical = json.dumps({} if body is None else body, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(f"{method.upper()} {path}\n{canonical}".encode()).hexdigest()


def idempotency_key_of(request: Request, *, required: bool) -> str | None:
    """The ``Idempotency-Key`` header (None if absent and optional).

    Raises:
        HttpProblem: 400 ``missing_idempotency_key`` if required and absent or empty; 400
            ``validation_error`` naming the header if malformed.
    """
    value = request.headers.get(IDEMPOTENCY_HEADER)
    if value is None or (value == "" and required):
        if required:
            raise HttpProblem.bad_field(IDEMPOTENCY_HEADER, "header is required for this operation",
                                        code="missing_idempotency_key",
                                        title="Idempotency-Key header required")
        return None
    if not _KEY.fullmatch(value):
        raise HttpProblem.bad_field(IDEMPOTENCY_HEADER, f"must be 1..{KEY_MAX} printable ASCII "
                                                        "characters, not starting or ending with a space")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyScope:
    """Where a key is unique: tenant, subject (the user), client, route template, key hash."""

    tenant_id: str
    subject: str
    client_id: str
    route: str
    key_hash: str

    @classmethod
    def of(cls, *, tenant_id: str, route: str, raw_key: str, subject: str | None = None,
           client_id: str | None = None) -> IdempotencyScope:
        """A scope from the raw header value (hashed here, never kept). ``client_id``
        defaults to ``subject`` and the other way round, as a token without ``client_id``
        does (``casestream.auth``); ValueError when both are missing."""
        who = subject if subject is not None else client_id
        if who is None:
            raise ValueError("an idempotency scope needs a subject or a client_id")
        return cls(tenant_id=tenant_id, subject=who, client_id=client_id or who, route=route,
                   key_hash=hash_key(raw_key))


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    """An HTTP response as stored for replay: status, JSON body, the headers that matter."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyRecord:
    """A processed request: its fingerprint, response and lifetime (UTC)."""

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
    """A request that carries a key: its scope and fingerprint."""

    scope: IdempotencyScope
    fingerprint: str


class IdempotencyConflict(HttpProblem):
    """409 ``idempotency_conflict``: the key was used, in its scope, for another request."""

    def __init__(self, key_hash: str) -> None:
        super().__init__(409, "idempotency_conflict", "Idempotency key reused with a different request",
                         "this Idempotency-Key was already used for a different request",
                         errors=({"field": IDEMPOTENCY_HEADER,
                                  "message": "already used for a different request"},))
        self.key_hash = key_hash


class RequestInFlight(HttpProblem):
    """409 ``request_in_flight`` (``Retry-After: 1``): a request with the key is in progress."""

    def __init__(self, key_hash: str) -> None:
        super().__init__(409, "request_in_flight", "A request with this Idempotency-Key is in progress",
                         "a request with this Idempotency-Key is still being processed; retry later",
                         errors=({"field": IDEMPOTENCY_HEADER, "message": "a request with it is in progress"},),
                         headers={"Retry-After": "1"})
        self.key_hash = key_hash


class IdempotencyStore(Protocol):
    """Idempotency records as seen from ONE transaction (the command's own)."""

    def try_lock(self, scope: IdempotencyScope) -> bool:
        """Claim ``scope`` until the transaction ends; False if another transaction holds it."""
        ...

    def find(self, scope: IdempotencyScope) -> IdempotencyRecord | None:
        """The stored record of ``scope`` (possibly expired), or None."""
        ...

    def save(self, record: IdempotencyRecord) -> None:
        """Create the record, or replace an expired one of the same scope, atomically.

        Raises:
            IdempotencyConflict: a live record of the scope exists (written concurrently).
        """
        ...

    def purge_expired(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` records expired at ``now``; return how many."""
        ...


@dataclass(slots=True)
class IdempotencyCounters:
    """The counts of an app that serves idempotent routes (its ``app.state.counters``).

    Attributes:
        edge: the shared edge's counters (shed, rate limited...).
        idempotency_replays: stored responses sent again (``idempotency_replays_total``).
        idempotency_conflicts: 409 ``idempotency_conflict`` (``idempotency_conflicts_total``).
        idempotency_in_flight: 409 ``request_in_flight``.
    """

    edge: EdgeCounters = field(default_factory=EdgeCounters)
    idempotency_replays: int = 0
    idempotency_conflicts: int = 0
    idempotency_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, name: str) -> None:
        """Add one to counter ``name`` (thread-safe: use cases run in a thread pool)."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)


class Idempotency:
    """The Idempotency-Key component a service mounts on its write routes.

    Args:
        ttl: how long a stored response is replayed (default :data:`DEFAULT_TTL`).
        clock: UTC now (``casestream.clock.utc_now``; tests pass their own).
        counters: where replays/conflicts are counted (default: a new
            :class:`IdempotencyCounters`; :meth:`install` exposes it on ``/metrics``).

    Use, in a route (``claim``), then inside the command's transaction (``begin`` before the
    state change, ``complete`` after it, on the store bound to that transaction), then
    ``respond``; docs/new-service.md shows the whole route.
    """

    def __init__(self, *, ttl: timedelta = DEFAULT_TTL, clock: Callable[[], datetime] = utc_now,
                 counters: IdempotencyCounters | None = None) -> None:
        if ttl <= timedelta(0):
            raise ValueError(f"idempotency ttl must be positive, got {ttl}")
        self.ttl = ttl
        self.clock = clock
        self.counters = counters if counters is not None else IdempotencyCounters()

    def install(self, app: Any) -> None:
        """Make :attr:`counters` the app's ``app.state.counters`` (keeping the edge's)."""
        edge = getattr(app.state, "counters", None)
        if isinstance(edge, EdgeCounters):
            self.counters.edge = edge
        app.state.counters = self.counters

    def claim(self, request: Request, route: str, body: Any, *,
              required: bool = True) -> IdempotentRequest | None:
        """The idempotent request of ``request`` on ``route`` (the route template, e.g.
        ``"PUT /items/{item_id}"``), scoped by the authenticated principal (None without a
        key on an optional route). ``body`` is the parsed JSON body (None: no body).

        Raises:
            HttpProblem: 400 for a missing (required) or malformed key; InvalidToken when the
                request has no authenticated principal.
        """
        key = idempotency_key_of(request, required=required)
        if key is None:
            return None
        who = principal_of(request)
        scope = IdempotencyScope.of(tenant_id=who.tenant_id, subject=who.subject,
                                    client_id=who.client_id, route=route, raw_key=key)
        return IdempotentRequest(scope=scope,
                                 fingerprint=fingerprint(request.method, request.url.path, body))

    def begin(self, store: IdempotencyStore, request: IdempotentRequest | None) -> StoredResponse | None:
        """Call first in the command's transaction: the stored response to replay, or None
        (process the command, then :meth:`complete`). The key stays claimed until that
        transaction ends.

        Raises:
            RequestInFlight: another transaction holds the key.
            IdempotencyConflict: the key was used for a different request.
        """
        if request is None:
            return None
        scope = request.scope
        if not store.try_lock(scope):
            log.info("idempotency key %s on %s is in flight", scope.key_hash[:16], scope.route)
            self.counters.add("idempotency_in_flight")
            raise RequestInFlight(scope.key_hash)
        record = store.find(scope)
        if record is None or record.expired(self.clock()):
            return None
        if record.fingerprint != request.fingerprint:
            log.info("idempotency key %s on %s reused for a different request",
                     scope.key_hash[:16], scope.route)
            self.counters.add("idempotency_conflicts")
            raise IdempotencyConflict(scope.key_hash)
        log.info("idempotent replay for key %s on %s", scope.key_hash[:16], scope.route)
        return record.response

    def complete(self, store: IdempotencyStore, request: IdempotentRequest | None,
                 response: StoredResponse) -> StoredResponse:
        """Call last in the command's transaction: store a 2xx ``response`` under the key
        (a non-2xx one is not stored) and return it."""
        if request is not None and 200 <= response.status < 300:
            now = self.clock()
            try:
                store.save(IdempotencyRecord(scope=request.scope, fingerprint=request.fingerprint,
                                             response=response, created_at=now,
                                             expires_at=now + self.ttl))
            except IdempotencyConflict:
                self.counters.add("idempotency_conflicts")
                raise
        return response

    def respond(self, stored: StoredResponse, replayed: bool) -> JSONResponse:
        """The JSON response of ``stored``; a replay carries ``Idempotent-Replayed: true`` and
        is counted."""
        headers = dict(stored.headers)
        if replayed:
            headers[REPLAYED_HEADER] = "true"
            self.counters.add("idempotency_replays")
        return JSONResponse(stored.body, status_code=stored.status, headers=headers)

    def purge(self, store: IdempotencyStore, limit: int = 1000) -> int:
        """Delete up to ``limit`` records expired now; return how many."""
        return store.purge_expired(self.clock(), limit)


class InMemoryIdempotencyStore:
    """Committed records and held keys in memory, for unit tests (thread-safe).

    :meth:`transaction` opens one transaction's :class:`IdempotencyStore`: its saves are
    staged and applied on a clean exit (discarded when the block raises), and the keys it
    claimed are released either way, like PostgreSQL's transaction-scoped advisory locks.
    """

    def __init__(self) -> None:
        self.records: dict[IdempotencyScope, IdempotencyRecord] = {}
        self.held: set[IdempotencyScope] = set()
        self.mutex = threading.Lock()

    def begin(self) -> InMemoryIdempotencyTransaction:
        """A transaction to end with :meth:`InMemoryIdempotencyTransaction.commit` or
        :meth:`~InMemoryIdempotencyTransaction.rollback`."""
        return InMemoryIdempotencyTransaction(self)

    @contextmanager
    def transaction(self) -> Iterator[InMemoryIdempotencyTransaction]:
        """A transaction committed on a clean exit, rolled back when the block raises."""
        tx = self.begin()
        try:
            yield tx
        except BaseException:
            tx.rollback()
            raise
        tx.commit()

    def purge_expired(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` records expired at ``now``; return how many."""
        with self.mutex:
            expired = [s for s, r in self.records.items() if r.expired(now)][:limit]
            for scope in expired:
                del self.records[scope]
        return len(expired)


class InMemoryIdempotencyTransaction:
    """One transaction's view of an :class:`InMemoryIdempotencyStore` (an IdempotencyStore)."""

    def __init__(self, store: InMemoryIdempotencyStore) -> None:
        self._store = store
        self._held: set[IdempotencyScope] = set()
        self._staged: dict[IdempotencyScope, IdempotencyRecord] = {}

    def try_lock(self, scope: IdempotencyScope) -> bool:
        with self._store.mutex:
            if scope in self._held:
                return True
            if scope in self._store.held:
                return False
            self._store.held.add(scope)
            self._held.add(scope)
            return True

    def find(self, scope: IdempotencyScope) -> IdempotencyRecord | None:
        with self._store.mutex:
            return self._staged.get(scope) or self._store.records.get(scope)

    def save(self, record: IdempotencyRecord) -> None:
        with self._store.mutex:
            current = self._staged.get(record.scope) or self._store.records.get(record.scope)
            if current is not None and not current.expired(record.created_at):
                raise IdempotencyConflict(record.scope.key_hash)
            self._staged[record.scope] = record

    def purge_expired(self, now: datetime, limit: int) -> int:
        return self._store.purge_expired(now, limit)

    def commit(self) -> None:
        """Apply the staged records and release the keys."""
        with self._store.mutex:
            for scope, record in self._staged.items():
                current = self._store.records.get(scope)
                if current is not None and not current.expired(record.created_at):
                    self._release()
                    raise IdempotencyConflict(scope.key_hash)
            self._store.records.update(self._staged)
            self._release()

    def rollback(self) -> None:
        """Discard the staged records and release the keys."""
        with self._store.mutex:
            self._release()

    def _release(self) -> None:
        self._staged.clear()
        self._store.held.difference_update(self._held)
        self._held.clear()
