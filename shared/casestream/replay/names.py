"""Table copies and the names of indexes, constraints and sequences across a swap (psycopg 3).

A shadow table is created by the projection's ``create_tables`` under the shadow name, so
PostgreSQL names its indexes, constraints and sequences after it (``<table>_shadow_pkey``,
or whatever the DDL derives from the table name it is given). Renaming the table keeps
those names, so after a swap the live table's names would drift and a later migration that
names an index would break. :func:`defined_names` learns the names the projection's DDL
gives the *live* tables, by running it in a scratch schema inside the caller's transaction;
:func:`rename_to` renames the new live table's objects to them, matched by definition
(constraint: type and ``pg_get_constraintdef``; index: ``pg_get_indexdef`` without its
name and table; sequence: the column it belongs to).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import sql

__all__ = ["defined_names", "rename_to", "copy_rows"]

log = logging.getLogger("casestream.replay")

Signature = tuple[str, str]  # (kind, definition without names)

_CONSTRAINTS = """
SELECT 'constraint:' || c.contype::text, pg_get_constraintdef(c.oid), c.conname::text
FROM pg_constraint c WHERE c.conrelid = %s::regclass
"""
_INDEXES = """
SELECT 'index', regexp_replace(pg_get_indexdef(i.indexrelid), '^CREATE (UNIQUE )?INDEX \\S+ ON \\S+', 'CREATE \\1INDEX ON'),
       ic.relname::text
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = %s::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
"""
_SEQUENCES = """
SELECT 'sequence', a.attname::text, s.relname::text
FROM pg_depend d
JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.refobjid = %s::regclass AND d.deptype IN ('a', 'i')
"""


def _objects(conn: Any, table: str) -> dict[Signature, str]:
    out: dict[Signature, str] = {}
    for query in (_CONSTRAINTS, _INDEXES, _SEQUENCES):
        for kind, definition, name in conn.execute(query, (table,)).fetchall():
            out[(kind, definition)] = name
    return out


def defined_names(conn: Any, create_tables: Callable[[Any, Mapping[str, str]], None],
                  names: Mapping[str, str]) -> dict[str, dict[Signature, str]]:
    """The object names ``create_tables(conn, names)`` gives each table: ``{table: {signature:
    name}}``. Runs the DDL with a scratch schema as the only ``search_path`` entry (so a DDL
    that checks whether its table exists finds none) and drops it, in a savepoint of the
    caller's transaction. A table the DDL leaves to a migration (it creates only shadow
    tables) keeps the names the live table has now. A DDL that cannot run there (it needs
    objects of another schema) gives ``{}``: names are then left as they are, and the failure
    is logged."""
    scratch = f"casestream_names_{uuid.uuid4().hex[:12]}"
    path = conn.execute("SHOW search_path").fetchone()[0]
    existing = {table: _objects(conn, actual) for table, actual in names.items()
                if conn.execute("SELECT to_regclass(%s)", (actual,)).fetchone()[0] is not None}
    try:
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(scratch)))
            conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(scratch)))
            create_tables(conn, names)
            found = {}
            for table, actual in names.items():
                created = f'"{scratch}"."{actual}"'
                if conn.execute("SELECT to_regclass(%s)", (created,)).fetchone()[0] is not None:
                    found[table] = _objects(conn, created)
                elif table in existing:
                    found[table] = existing[table]
            conn.execute(sql.SQL("SET LOCAL search_path = ") + sql.SQL(path))
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(scratch)))
            return found
    except psycopg.Error as e:
        conn.execute(sql.SQL("SET LOCAL search_path = ") + sql.SQL(path))
        log.warning("could not learn the index and constraint names of %s from their DDL (%s); "
                    "names after the swap are the shadow tables'", ", ".join(names), e)
        return {}


def rename_to(conn: Any, table: str, defined: Mapping[Signature, str]) -> list[tuple[str, str]]:
    """Rename ``table``'s constraints, indexes and sequences to the ``defined`` names of the
    same definition; return ``[(old, new)]``. Objects without a defined counterpart keep
    their names."""
    done = []
    for sig, name in _objects(conn, table).items():
        want = defined.get(sig)
        if want is None or want == name:
            continue
        kind = sig[0]
        if kind.startswith("constraint:"):
            conn.execute(sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                sql.Identifier(table), sql.Identifier(name), sql.Identifier(want)))
        elif kind == "index":
            conn.execute(sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                sql.Identifier(name), sql.Identifier(want)))
        else:
            conn.execute(sql.SQL("ALTER SEQUENCE {} RENAME TO {}").format(
                sql.Identifier(name), sql.Identifier(want)))
        done.append((name, want))
    return done


def copy_rows(conn: Any, source: str, target: str) -> int:
    """Copy every row of ``source`` into ``target`` (the columns both have); return the count.
    A column the current DDL added to ``target`` keeps its default."""
    cols = [r[0] for r in conn.execute(
        """SELECT a.attname FROM pg_attribute a
           WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
             AND a.attgenerated = ''
             AND a.attname IN (SELECT b.attname FROM pg_attribute b
                               WHERE b.attrelid = %s::regclass AND b.attnum > 0 AND NOT b.attisdropped)
           ORDER BY a.attnum""", (target, source)).fetchall()]
    column_list = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    cur = conn.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
        sql.Identifier(target), column_list, column_list, sql.Identifier(source)))
    return cur.rowcount
