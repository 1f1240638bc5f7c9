"""The PostgreSQL store of Idempotency-Key records (psycopg 3), and its migration.

:class:`PgIdempotencyStore` works on a connection INSIDE the command's transaction, so the
stored response commits or rolls back with the command's state change and outbox row.

- In flight: ``pg_try_advisory_xact_lock`` on a 64-bit hash (``hashtextextended``) of the
  scope, released when the transaction ends (PostgreSQL docs §9.27.10). A second request
  with the key gets False at once instead of waiting on the first one's row (409). Two
  scopes with the same 64-bit hash only make one of them wait for the other's transaction.
- Creation: ``INSERT ... ON CONFLICT DO UPDATE ... WHERE <stored record expired>``: a live
  record is never overwritten; no row written means another transaction created it first
  (:class:`~casestream.http.idempotency.IdempotencyConflict`, and the transaction is to roll
  back).
- Table ``idempotency_keys`` (:data:`IDEMPOTENCY_MIGRATIONS`, applied with the outbox DDL by
  ``casestream.service.service_migrations``); ``purge_expired`` deletes by ``expires_at``
  (indexed) in bounded batches.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from casestream.http.idempotency import (
    Idempotency,
    IdempotencyConflict,
    IdempotencyRecord,
    IdempotencyScope,
    StoredResponse,
)
from casestream.migrations import Migration

__all__ = ["IDEMPOTENCY_MIGRATION", "IDEMPOTENCY_MIGRATIONS", "IDEMPOTENCY_TABLE",
           "PgIdempotencyStore", "idempotency_purge_worker"]

log = logging.getLogger(__name__)

IDEMPOTENCY_TABLE = "idempotency_keys"

IDEMPOTENCY_MIGRATION = Migration(name="casestream_idempotency_001", sql="""
-- Idempotency-Key records (casestream.http.idempotency): one row per processed request in
-- its scope; key_hash = sha256(key), the raw key is never stored.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant_id        text        NOT NULL,
    subject          text        NOT NULL,
    client_id        text        NOT NULL,
    route            text        NOT NULL,
    key_hash         text        NOT NULL,
    fingerprint      text        NOT NULL,
    response_status  smallint    NOT NULL,
    response_body    jsonb       NOT NULL,
    response_headers jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, subject, client_id, route, key_hash)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expiry ON idempotency_keys (expires_at);
""")
"""The ``idempotency_keys`` table, for :func:`casestream.migrations.apply_migrations`."""
IDEMPOTENCY_MIGRATIONS = (IDEMPOTENCY_MIGRATION,)
"""Applied with the outbox DDL for every service that has an outbox (``ServiceBuilder``,
``casestream migrate``)."""



class PgIdempotencyStore:
    """An ``IdempotencyStore`` over ``conn``, in the transaction the caller opened (never
    commits or rolls back itself)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    @staticmethod
    def _lock_name(scope: IdempotencyScope) -> str:
        return "\x1f".join(("idempotency", scope.tenant_id, scope.subject, scope.client_id,
                            scope.route, scope.key_hash))

    @staticmethod
    def _key(scope: IdempotencyScope) -> tuple[str, str, str, str, str]:
        return (scope.tenant_id, scope.subject, scope.client_id, scope.route, scope.key_hash)

    def try_lock(self, scope: IdempotencyScope) -> bool:
        """Claim ``scope`` until the transaction ends; False if another transaction holds it."""
        row = self._conn.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                                 (self._lock_name(scope),)).fetchone()
        return bool(row and row[0])

    def find(self, scope: IdempotencyScope) -> IdempotencyRecord | None:
        """The record of ``scope`` (possibly expired), or None."""
        with self._conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                "SELECT fingerprint, response_status, response_body, response_headers, created_at, "
                "expires_at FROM idempotency_keys WHERE tenant_id = %s AND subject = %s "
                "AND client_id = %s AND route = %s AND key_hash = %s", self._key(scope))
            row = cur.fetchone()
        if row is None:
            return None
        return IdempotencyRecord(
            scope=scope, fingerprint=row["fingerprint"],
            response=StoredResponse(status=row["response_status"], body=row["response_body"],
                                    headers=row["response_headers"]),
            created_at=row["created_at"], expires_at=row["expires_at"])

    def save(self, record: IdempotencyRecord) -> None:
        """Create the record or replace an expired one (module docstring).

        Raises:
            IdempotencyConflict: a live record of the scope exists.
        """
        r = record.response
        cur = self._conn.execute(
            "INSERT INTO idempotency_keys AS k (tenant_id, subject, client_id, route, key_hash, "
            "fingerprint, response_status, response_body, response_headers, created_at, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (tenant_id, subject, client_id, route, key_hash) DO UPDATE SET "
            "fingerprint = EXCLUDED.fingerprint, response_status = EXCLUDED.response_status, "
            "response_body = EXCLUDED.response_body, response_headers = EXCLUDED.response_headers, "
            "created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at "
            "WHERE k.expires_at <= EXCLUDED.created_at",
            (*self._key(record.scope), record.fingerprint, r.status, Jsonb(r.body, dumps=_dumps),
             Jsonb(dict(r.headers)), record.created_at, record.expires_at))
        if cur.rowcount != 1:
            raise IdempotencyConflict(record.scope.key_hash)

    def purge_expired(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` records expired at ``now``; return how many."""
        cur = self._conn.execute(
            "DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid FROM idempotency_keys "
            "WHERE expires_at <= %s LIMIT %s)", (now, limit))
        return cur.rowcount


def idempotency_purge_worker(keys: Idempotency, pool: Any, *, interval_s: float = 300.0,
                             batch: int = 1000) -> Callable[[threading.Event], None]:
    """A service worker (``ServiceBuilder.worker``) deleting the records expired on
    ``keys``' clock every ``interval_s`` seconds, ``batch`` rows per transaction, from the
    database of ``pool`` (a ``psycopg_pool.ConnectionPool``). A failed round is logged and
    retried the next period."""
    if interval_s <= 0 or batch <= 0:
        raise ValueError(f"idempotency purge: interval_s and batch must be positive, got "
                         f"{interval_s} and {batch}")

    def purge_once() -> int:
        with pool.connection() as conn:
            return keys.purge(PgIdempotencyStore(conn), batch)

    def run(stop: threading.Event) -> None:
        while not stop.wait(interval_s):
            try:
                while purge_once() == batch and not stop.is_set():
                    pass
            except Exception:  # noqa: BLE001 - a failed purge is retried next period
                log.warning("idempotency purge failed; retrying in %.0f s", interval_s,
                            exc_info=True)

    return run


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)
