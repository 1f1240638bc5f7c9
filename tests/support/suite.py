"""The suite's services as processes on a private Kafka broker, for tests that run them.

Each piece is a context manager, so a module builds its fixtures from them (one broker, one
set of databases, one stack per module):

    private_broker(tmp_path_factory, name, topics, partitions) -> PrivateKafka
        a single-node broker of its own (``casestream.testing.relay.PrivateKafka``: own ports,
        so no other test's consumer group or topic is touched) with ``topics`` created;
    service_databases(pg_url, services, label) -> {service: database}
        a fresh database per service on the shared PostgreSQL, dropped afterwards;
    suite_env(bootstrap, pg_url, registry_url, databases, ...) -> environment
        what the services run with: the endpoints, each service's database and a free port,
        rate limits raised to ``rate_limit`` (tests send bursts), and a
        ``session.timeout.ms`` of 6000 ms (the broker's minimum) so that the partitions of
        a SIGKILLed consumer move on after 6 s, not librdkafka's 45 s;
    running_stack(env, services, log_dir) -> ServiceStack
        the services started and ready; stopped (SIGTERM) afterwards;
    SharedStack(env, services, log_dir)
        one stack several test modules share (``tests/e2e/conftest.py``: the modules that
        run the suite on the shared infrastructure with the same settings): started by the
        first module that asks for it, every stopped service started again for the next,
        stopped when no further test asks for it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from casestream.service import ServiceStack
from casestream.testing.relay import PrivateKafka, create_topics, free_port
from tests.support.databases import created_databases

REPO = Path(__file__).resolve().parents[2]
CLASSPATH = REPO / ".local" / "kafka" / "classpath.txt"
RATE_LIMITS = ("RATE_TENANT_PER_S", "RATE_TENANT_BURST", "RATE_CLIENT_PER_S", "RATE_CLIENT_BURST")
SESSION_TIMEOUT_MS = 6000


@contextmanager
def private_broker(tmp_path_factory: pytest.TempPathFactory, name: str,
                  topics: Iterable[str] = (), partitions: int = 1) -> Iterator[PrivateKafka]:
    """A started private broker with ``topics`` (``partitions`` each); closed afterwards."""
    if not CLASSPATH.is_file():
        pytest.fail(f"Kafka jars not resolved ({CLASSPATH} missing): run `make infra-up` "
                    "or the suite through `make test`", pytrace=False)
    broker = PrivateKafka(CLASSPATH, tmp_path_factory.mktemp(name))
    broker.start()
    try:
        if topics := list(topics):
            create_topics(broker.bootstrap, topics, partitions=partitions)
        yield broker
    finally:
        broker.close()


@contextmanager
def service_databases(pg_url: str, services: Iterable[str], label: str) -> Iterator[dict[str, str]]:
    """``{service: "<service>_<label>_<8 hex digits>"}``, each created on ``pg_url``'s server
    and dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    names = {s: f"{s}_{label}_{suffix}" for s in services}
    with created_databases(f"{pg_url}/postgres", names.values()):
        yield names


def suite_env(bootstrap: str, pg_url: str, registry_url: str, databases: Mapping[str, str], *,
              rate_limit: int, extra: Mapping[str, str] = {}) -> dict[str, str]:
    """This process's environment plus what the services in ``databases`` run with (see the
    module docstring); ``extra`` last, so it overrides."""
    env = {**os.environ, "CASESTREAM_KAFKA_BOOTSTRAP": bootstrap, "CASESTREAM_PG_URL": pg_url,
           "CASESTREAM_REGISTRY_URL": registry_url,
           "CASESTREAM_KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS)}
    for name, database in databases.items():
        prefix = f"CASESTREAM_{name.upper()}_"
        env[prefix + "DATABASE"] = database
        env[prefix + "PORT"] = str(free_port())
        for limit in RATE_LIMITS:
            env[prefix + limit] = str(rate_limit)
    env.update(extra)
    return env


@contextmanager
def running_stack(env: Mapping[str, str], services: Iterable[str],
                  log_dir: Path) -> Iterator[ServiceStack]:
    """``services`` started with ``env`` (logs in ``log_dir``) and ready; stopped afterwards."""
    stack = ServiceStack(env=env, log_dir=log_dir, ready_timeout_s=120)
    try:
        stack.start_all(list(services))
        yield stack
    finally:
        stack.stop_all()


class SharedStack:
    """``services`` run with ``env`` (logs in ``log_dir``), shared by the modules that call
    :meth:`get`; :meth:`close` stops them (a later :meth:`get` starts them again)."""

    def __init__(self, env: Mapping[str, str], services: Iterable[str], log_dir: Path) -> None:
        self.env, self.services, self.log_dir = dict(env), list(services), log_dir
        self.stack: ServiceStack | None = None

    def get(self) -> ServiceStack:
        """The running stack with every service of it running and ready: started now if it
        is not (the first module), and any service a test before killed or stopped started
        again, so each module finds the whole suite.

        Raises:
            casestream.service.StackError: a service exited or was not ready in time.
        """
        if self.stack is None:
            stack = ServiceStack(env=self.env, log_dir=self.log_dir)
            try:
                stack.start_all(self.services)
            except BaseException:
                stack.stop_all()
                raise
            self.stack = stack
        else:
            for name in self.services:
                self.stack.start(name)  # no-op for a running service
            self.stack.wait_ready(self.services)
        return self.stack

    def close(self) -> None:
        """Stop the services (SIGTERM), if they run."""
        stack, self.stack = self.stack, None
        if stack is not None:
            stack.stop_all()
