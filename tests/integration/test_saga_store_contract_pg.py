"""The saga store contract (tests/support/saga_store_contract.py) on ``PgSagaStore``.

Each test works in its own schema of ``casestream_test`` with the saga migrations applied; a
unit of work is one psycopg transaction (committed on a clean exit, rolled back on an error).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
import pytest

from services.saga.adapters.postgres import PgSagaStore
from services.saga.bootstrap import migrations
from tests.support.saga_store_contract import CONTRACT


class PgBackend:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    @contextmanager
    def transaction(self) -> Iterator[PgSagaStore]:
        with psycopg.connect(self.dsn) as conn:
            yield PgSagaStore(conn)


@pytest.fixture
def dsn(private_schema: Callable[..., str]) -> str:
    return private_schema("saga_c", migrations())


@pytest.mark.parametrize("body", CONTRACT, ids=lambda f: f.__name__)
def test_saga_store_contract_on_postgresql(dsn: str, body: Callable[[PgBackend], None]) -> None:
    body(PgBackend(dsn))
