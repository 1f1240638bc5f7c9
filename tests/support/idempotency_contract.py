"""The contract every Idempotency-Key store meets, as test bodies run against each store.

``tests/unit/test_http_idempotency.py`` runs them on ``InMemoryIdempotencyStore`` and
``tests/integration/test_http_idempotency_pg.py`` on ``PgIdempotencyStore`` (PostgreSQL).
A :class:`Backend` opens transactions the way a service's unit of work does: committed on
a clean exit, rolled back when the block raises.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest

from casestream.http import (
    Idempotency,
    IdempotencyConflict,
    IdempotencyScope,
    IdempotencyStore,
    IdempotentRequest,
    RequestInFlight,
    StoredResponse,
    fingerprint,
)

TTL = timedelta(hours=1)


class Backend(Protocol):
    def transaction(self) -> AbstractContextManager[IdempotencyStore]: ...

    def count(self) -> int: ...


class StepClock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


def request(key: str = "k-1", body: Any = None, *, tenant: str = "t-1", subject: str = "u-1",
            client: str | None = None, route: str = "POST /items") -> IdempotentRequest:
    scope = IdempotencyScope.of(tenant_id=tenant, subject=subject, client_id=client, route=route,
                                raw_key=key)
    return IdempotentRequest(scope=scope, fingerprint=fingerprint("POST", "/items",
                                                                  body or {"n": 1}))


class Ledger:
    """A command's own state (what the record must commit with): applied command numbers."""

    def __init__(self) -> None:
        self.applied: list[int] = []


def run(backend: Backend, idem: Idempotency, req: IdempotentRequest, n: int, *,
        status: int = 201, fail: bool = False,
        during: Callable[[], None] | None = None) -> tuple[StoredResponse, bool]:
    """One command in one transaction: replay, else apply ``n``, store the response."""
    with backend.transaction() as store:
        stored = idem.begin(store, req)
        if stored is not None:
            return stored, True
        if during is not None:
            during()
        response = StoredResponse(status=status, body={"n": n, "tags": ["a", "é"]},
                                  headers={"Location": f"/items/{n}", "ETag": '"1"'})
        stored = idem.complete(store, req, response)
        if fail:  # e.g. the state change's commit fails after the response was written
            raise RuntimeError("the command failed after its writes")
        return stored, False


def first_request_is_stored_and_replayed(backend: Backend) -> None:
    idem = Idempotency(ttl=TTL, clock=StepClock())
    first, replayed = run(backend, idem, request(), 1)
    again, replayed_again = run(backend, idem, request(), 2)
    assert (replayed, replayed_again) == (False, True)
    assert again == first
    assert again.body == {"n": 1, "tags": ["a", "é"]} and again.headers["Location"] == "/items/1"
    assert backend.count() == 1


def another_body_with_the_key_is_a_conflict(backend: Backend) -> None:
    idem = Idempotency(ttl=TTL, clock=StepClock())
    run(backend, idem, request(body={"n": 1}), 1)
    with pytest.raises(IdempotencyConflict) as caught:
        run(backend, idem, request(body={"n": 2}), 2)
    assert caught.value.status == 409 and caught.value.code == "idempotency_conflict"
    assert caught.value.errors[0]["field"] == "Idempotency-Key"
    assert idem.counters.idempotency_conflicts == 1


def a_key_in_flight_is_refused_until_its_transaction_ends(backend: Backend) -> None:
    idem = Idempotency(ttl=TTL, clock=StepClock())
    inside, release = threading.Event(), threading.Event()
    outcome: list[tuple[StoredResponse, bool]] = []

    def hold() -> None:
        inside.set()
        assert release.wait(10)

    first = threading.Thread(target=lambda: outcome.append(run(backend, idem, request(), 1, during=hold)))
    first.start()
    try:
        assert inside.wait(10)
        with pytest.raises(RequestInFlight) as caught:
            run(backend, idem, request(), 2)
        assert caught.value.status == 409 and caught.value.headers == {"Retry-After": "1"}
    finally:
        release.set()
        first.join(10)
    assert outcome and outcome[0][1] is False
    assert run(backend, idem, request(), 3) == (outcome[0][0], True)
    assert idem.counters.idempotency_in_flight == 1


def a_rolled_back_command_stores_nothing_and_releases_the_key(backend: Backend) -> None:
    idem = Idempotency(ttl=TTL, clock=StepClock())
    with pytest.raises(RuntimeError):
        run(backend, idem, request(), 1, fail=True)
    assert backend.count() == 0
    stored, replayed = run(backend, idem, request(), 2)
    assert replayed is False and stored.body["n"] == 2


def a_non_2xx_response_is_not_stored(backend: Backend) -> None:
    idem = Idempotency(ttl=TTL, clock=StepClock())
    refused, _ = run(backend, idem, request(), 1, status=422)
    assert refused.status == 422 and backend.count() == 0
    stored, replayed = run(backend, idem, request(), 2)
    assert replayed is False and stored.status == 201 and stored.body["n"] == 2


def a_key_expires_after_the_ttl_and_is_purged(backend: Backend) -> None:
    clock = StepClock()
    idem = Idempotency(ttl=TTL, clock=clock)
    run(backend, idem, request(body={"n": 1}), 1)
    run(backend, idem, request("k-2"), 1)
    clock.at += TTL - timedelta(seconds=1)
    with pytest.raises(IdempotencyConflict):
        run(backend, idem, request(body={"n": 2}), 2)
    clock.at += timedelta(seconds=1)  # expires_at reached: the key may be used again
    stored, replayed = run(backend, idem, request(body={"n": 2}), 2)
    assert replayed is False and stored.body["n"] == 2
    assert backend.count() == 2
    with backend.transaction() as store:
        assert idem.purge(store) == 1  # k-2 expired; the reused key is fresh
    clock.at += TTL
    with backend.transaction() as store:
        assert idem.purge(store, limit=10) == 1
    assert backend.count() == 0


def keys_are_scoped_by_tenant_subject_client_and_route(backend: Backend) -> None:
    idem = Idempotency(ttl=TTL, clock=StepClock())
    scopes = [request(), request(tenant="t-2"), request(subject="u-2"),
              request(client="mobile"), request(route="PUT /items/{item_id}")]
    results = [run(backend, idem, req, n) for n, req in enumerate(scopes)]
    assert [replayed for _, replayed in results] == [False] * 5
    assert backend.count() == 5


def a_live_record_is_never_overwritten(backend: Backend) -> None:
    """The atomic create: a save that finds a live record of the scope (written by a
    transaction that bypassed or lost the key's lock) refuses instead of overwriting."""
    clock = StepClock()
    idem = Idempotency(ttl=TTL, clock=clock)
    run(backend, idem, request(), 1)
    with pytest.raises(IdempotencyConflict):
        with backend.transaction() as store:
            idem.complete(store, request(body={"n": 9}), StoredResponse(status=200, body={}))
    assert run(backend, idem, request(), 2)[0].body["n"] == 1


CONTRACT = [first_request_is_stored_and_replayed, another_body_with_the_key_is_a_conflict,
            a_key_in_flight_is_refused_until_its_transaction_ends,
            a_rolled_back_command_stores_nothing_and_releases_the_key,
            a_non_2xx_response_is_not_stored, a_key_expires_after_the_ttl_and_is_purged,
            keys_are_scoped_by_tenant_subject_client_and_route, a_live_record_is_never_overwritten]
"""Every contract body; each store's test module runs them all (parametrised by name)."""
