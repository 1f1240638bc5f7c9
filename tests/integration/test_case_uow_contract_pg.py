"""The case unit-of-work contract (tests/support/case_uow_contract.py) on ``PgUnitOfWork``:
each test in its own schema of ``casestream_test`` with the case migrations applied."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from casestream.events import Envelope, EnvelopeCodec
from casestream.outbox import OutboxWriter
from services.case.adapters.postgres import PgUnitOfWork
from services.case.bootstrap import migrations
from tests.support.case_uow_contract import CONTRACT


class PgBackend:
    def __init__(self, dsn: str, pool: ConnectionPool, codec: EnvelopeCodec) -> None:
        self.dsn, self.pool, self.codec = dsn, pool, codec
        self.append = OutboxWriter(codec).append

    def uow(self) -> PgUnitOfWork:
        return PgUnitOfWork(pool=self.pool, append=self.append)

    def outbox(self) -> list[Envelope]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT payload FROM outbox ORDER BY seq").fetchall()
        return [self.codec.decode(bytes(r[0])) for r in rows]


@pytest.fixture
def backend(private_schema: Callable[..., str], codec: EnvelopeCodec) -> Iterator[PgBackend]:
    dsn = private_schema("case_uow", migrations())
    with ConnectionPool(dsn, min_size=1, max_size=2, timeout=5, open=True) as pool:
        yield PgBackend(dsn, pool, codec)


@pytest.mark.parametrize("body", CONTRACT, ids=lambda f: f.__name__)
def test_case_uow_contract_on_postgresql(backend: PgBackend, body: Callable[[PgBackend], None]) -> None:
    body(backend)
