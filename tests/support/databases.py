"""Private PostgreSQL databases for tests that run services (each wants its own database)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest


def admin_url(server: str) -> str:
    """``server`` (a PostgreSQL URL) pointed at its ``postgres`` database."""
    return urlunsplit(urlsplit(server)._replace(path="/postgres"))


def require_server(server: str) -> str:
    """``admin_url(server)``; fails the test, without a traceback, when nothing answers."""
    admin = admin_url(server)
    try:
        psycopg.connect(admin, connect_timeout=3).close()
    except psycopg.OperationalError as e:
        pytest.fail(f"PostgreSQL not reachable at {server}: {e}", pytrace=False)
    return admin


@contextmanager
def created_databases(admin: str, names: Iterable[str]) -> Iterator[None]:
    """Create the databases ``names`` through ``admin`` (a URL of the server's ``postgres``
    database); afterwards drop them, forcing their connections off."""
    names = list(names)
    with psycopg.connect(admin, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
