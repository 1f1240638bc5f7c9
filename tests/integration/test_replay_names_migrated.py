"""The names a swap gives a live table that a migration, not the projection's DDL, creates.

Fails if ``defined_names`` cannot learn them (it logged "could not learn the index and
constraint names" and returned nothing), so the live table would keep the shadow's names
(``<table>_shadow_pkey``) after a swap.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from casestream.replay.names import defined_names, rename_to
from casestream.testing.relay import isolated_schema
from tests.integration.test_relay_support import test_database


def _shadow_only(conn: Any, names: dict[str, str]) -> None:
    # as services/audit does: the live table belongs to a migration
    if names["timeline"] != "timeline":
        conn.execute(f'CREATE TABLE "{names["timeline"]}" (id text PRIMARY KEY, at timestamptz)')
        conn.execute(f'CREATE INDEX ON "{names["timeline"]}" (at)')


def test_a_migrated_live_table_keeps_its_names_through_a_swap(pg_url: str, caplog: Any) -> None:
    with isolated_schema(test_database(pg_url), prefix="names_t", migrate=False) as dsn, \
            psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE timeline (id text CONSTRAINT timeline_pk PRIMARY KEY,"
                     " at timestamptz)")
        conn.execute("CREATE INDEX timeline_at_ix ON timeline (at)")
        _shadow_only(conn, {"timeline": "timeline_shadow"})
        with caplog.at_level(logging.WARNING, logger="casestream.replay"), conn.transaction():
            defined = defined_names(conn, _shadow_only, {"timeline": "timeline"})
            conn.execute("DROP TABLE timeline")
            conn.execute("ALTER TABLE timeline_shadow RENAME TO timeline")
            renamed = rename_to(conn, "timeline", defined.get("timeline", {}))
        assert "could not learn" not in caplog.text
        assert sorted(new for _old, new in renamed) == ["timeline_at_ix", "timeline_pk"]
        names = {r[0] for r in conn.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'timeline'::regclass"
            " UNION SELECT indexrelid::regclass::text FROM pg_index"
            " WHERE indrelid = 'timeline'::regclass")}
        assert names == {"timeline_pk", "timeline_at_ix"}
