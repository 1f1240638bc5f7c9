"""PostgreSQL helpers: idempotent schema migrations and connection construction.

:func:`apply_migrations` applies SQL migrations once each, in the order given, recording
them in ``casestream_migrations`` (in the connection's current schema). Concurrent
callers (several replicas starting at once) are serialised by a transaction-level
advisory lock, so each migration runs exactly once; each migration runs in its own
transaction together with its bookkeeping row, so a failing migration leaves nothing
half-applied. A migration already applied with different SQL text raises
:class:`~casestream.errors.ConfigError` (edited after release: write a new one).

A migration is a :class:`Migration` (name + SQL text) or a path to a ``.sql`` file
(name = file name). The outbox DDL is published as :data:`casestream.outbox.writer.OUTBOX_MIGRATIONS`
(the tables, then their autovacuum settings) so a service applies
``[*OUTBOX_MIGRATIONS, *sorted(Path("migrations").glob("*.sql"))]``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from casestream.errors import ConfigError

__all__ = ["Migration", "apply_migrations", "connect", "create_database", "MIGRATIONS_TABLE"]

MIGRATIONS_TABLE = "casestream_migrations"

# pg_advisory_xact_lock key: first 8 bytes of sha256("casestream.migrations"), signed.
_LOCK_KEY = int.from_bytes(hashlib.sha256(b"casestream.migrations").digest()[:8], "big", signed=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class Migration:
    """One schema migration.

    Attributes:
        name: unique, stable name recorded in ``casestream_migrations`` (e.g. ``001_cases.sql``).
        sql: the SQL text; may hold several statements (sent as one simple-query batch).
    """

    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """sha256 hex digest of the SQL text (detects edits of an applied migration)."""
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()

    @classmethod
    def from_file(cls, path: str | Path) -> "Migration":
        """Read ``path``; the migration's name is the file name."""
        p = Path(path)
        return cls(name=p.name, sql=p.read_text(encoding="utf-8"))


def connect(dsn: str, *, autocommit: bool = False, application_name: str | None = None) -> psycopg.Connection:
    """Open a psycopg 3 connection to ``dsn`` (``postgresql://user@host:port/db``)."""
    kwargs: dict[str, object] = {"autocommit": autocommit}
    if application_name:
        kwargs["application_name"] = application_name
    return psycopg.connect(dsn, **kwargs)  # type: ignore[arg-type]


def create_database(dsn: str) -> bool:
    """Create the database ``dsn`` names if it does not exist, connecting to the server's
    ``postgres`` database with the same credentials; True if it was created.

    For development tooling (the local stack provisions each discovered service's database);
    production databases are provisioned by their operators, so services never call it.

    Raises:
        ConfigError: the server is unreachable or refuses (the message names the database).
    """
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = conninfo_to_dict(dsn).get("dbname")
    if not name:
        raise ConfigError(f"{dsn}: names no database")
    try:
        with psycopg.connect(make_conninfo(dsn, dbname="postgres"), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                return False
            try:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))
            except psycopg.errors.DuplicateDatabase:  # created concurrently
                return False
            return True
    except psycopg.Error as e:
        raise ConfigError(f"cannot create database {name!r}: {str(e).strip()}") from e


def _as_migrations(items: Iterable[Migration | str | Path]) -> list[Migration]:
    out: list[Migration] = []
    seen: set[str] = set()
    for item in items:
        m = item if isinstance(item, Migration) else Migration.from_file(item)
        if m.name in seen:
            raise ConfigError(f"migration {m.name!r} given twice")
        seen.add(m.name)
        out.append(m)
    return out


def apply_migrations(dsn: str, files: Iterable[Migration | str | Path]) -> list[str]:
    """Apply each migration not yet recorded; return the names applied by this call.

    Args:
        dsn: PostgreSQL URL; the migrations table lives in the connection's current schema
            (set ``options=-csearch_path=...`` in the URL to target another schema).
        files: :class:`Migration` objects or paths of ``.sql`` files, applied in this order.

    Raises:
        ConfigError: an applied migration's SQL text changed, or a name repeats.
        psycopg.Error: a migration's SQL failed (that migration is rolled back).
    """
    migrations: Sequence[Migration] = _as_migrations(files)
    applied: list[str] = []
    with psycopg.connect(dsn, autocommit=False) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            conn.execute(
                f"""CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (
                        name text PRIMARY KEY,
                        checksum text NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now())"""
            )
        for m in migrations:
            with conn.transaction():
                # Re-taken per transaction: xact locks end at each commit.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                row = conn.execute(
                    f"SELECT checksum FROM {MIGRATIONS_TABLE} WHERE name = %s", (m.name,)
                ).fetchone()
                if row is not None:
                    if row[0] != m.checksum:
                        raise ConfigError(
                            f"migration {m.name!r} was applied with different SQL "
                            f"(recorded {row[0][:12]}, now {m.checksum[:12]}); add a new migration instead"
                        )
                    continue
                # No parameters: psycopg sends the text with the simple-query protocol,
                # so a migration may hold several statements and $$-quoted bodies.
                conn.execute(m.sql.encode("utf-8"))
                conn.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (name, checksum) VALUES (%s, %s)",
                    (m.name, m.checksum),
                )
                applied.append(m.name)
    return applied

