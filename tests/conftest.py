"""Session fixtures for the real infrastructure: Kafka, schema registry, PostgreSQL, SMTP sink.

The endpoints come from the ``CASESTREAM_*`` variables that ``deploy/infra.sh env`` prints and
``make test`` exports (``eval "$(deploy/infra.sh env)"``). Nothing is mocked and nothing is
defaulted: when a variable is unset, or set but nothing answers there, the test that asked for
the fixture fails with a message saying how to start the infrastructure (``make infra-up``,
or run the suite through ``make test``). Unit tests do not request these fixtures.

Fixtures (session scope):
    kafka_bootstrap -> str   ``host:port`` for ``bootstrap.servers``      (CASESTREAM_KAFKA_BOOTSTRAP)
    registry_url    -> str   Confluent-API base URL, ``.../apis/ccompat/v7`` (CASESTREAM_REGISTRY_URL)
    pg_url          -> str   ``postgresql://postgres@host:port``, no database (CASESTREAM_PG_URL)
    smtp_address    -> tuple[str, int]  the SMTP sink                    (CASESTREAM_SMTP_HOST/_PORT)
    smtp_maildir    -> pathlib.Path  where the sink stores one ``.eml`` per message (CASESTREAM_SMTP_MAILDIR)
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support import layout

_HOW = ("start the local infrastructure with `make infra-up` and export its variables "
        "(eval \"$(deploy/infra.sh env)\"), or run the suite through `make test`")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(layout.SerialLock(), "casestream-serial-lock")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's folder marker, and the order groups start in (``tests.support.layout``);
    first, so that ``-m unit`` sees the markers."""
    layout.mark_by_folder(items)
    items[:] = layout.ordered(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n N --dist loadfile``: one group per module, the e2e modules one group, longest first
    (``tests.support.layout.scheduler``); other ``--dist`` modes as xdist has them."""
    return layout.scheduler(config, log) if config.getvalue("dist") == "loadfile" else None


def _env(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        pytest.fail(f"{name} is not set: {_HOW}.", pytrace=False)
    return value


def _require_listening(name: str, host: str, port: int) -> None:
    """Fail (not skip) unless something accepts TCP on host:port within 3 s."""
    try:
        with socket.create_connection((host, port), timeout=3):
            return
    except OSError as exc:
        pytest.fail(f"{name} points at {host}:{port} but nothing answers there ({exc}); "
                    f"`deploy/infra.sh status` shows what runs. To fix: {_HOW}.", pytrace=False)


def _host_port(name: str, value: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(value if "//" in value else f"//{value}")
    if not parts.hostname:
        pytest.fail(f"{name}={value!r} has no host.", pytrace=False)
    return parts.hostname, parts.port or default_port


def _require_endpoint(name: str, address: str, default_port: int) -> None:
    """Fail unless something listens at ``address`` (the value of variable ``name``)."""
    host, port = _host_port(name, address, default_port)
    _require_listening(name, host, port)


def _service_url(name: str, default_port: int) -> str:
    """The URL in variable ``name`` without a trailing slash, once something listens there."""
    value = _env(name).rstrip("/")
    _require_endpoint(name, value, default_port)
    return value


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    value = _env("CASESTREAM_KAFKA_BOOTSTRAP")
    _require_endpoint("CASESTREAM_KAFKA_BOOTSTRAP", value.split(",")[0], 9092)
    return value


@pytest.fixture(scope="session")
def registry_url() -> str:
    return _service_url("CASESTREAM_REGISTRY_URL", 80)


@pytest.fixture(scope="session")
def pg_url() -> str:
    return _service_url("CASESTREAM_PG_URL", 5432)


@pytest.fixture(scope="session")
def smtp_address() -> tuple[str, int]:
    host = _env("CASESTREAM_SMTP_HOST")
    raw_port = _env("CASESTREAM_SMTP_PORT")
    if not raw_port.isdigit():
        pytest.fail(f"CASESTREAM_SMTP_PORT={raw_port!r} is not a port number.", pytrace=False)
    _require_listening("CASESTREAM_SMTP_HOST/CASESTREAM_SMTP_PORT", host, int(raw_port))
    return host, int(raw_port)


@pytest.fixture(scope="session")
def smtp_maildir(smtp_address: tuple[str, int]) -> Path:
    path = Path(_env("CASESTREAM_SMTP_MAILDIR"))
    if not path.is_dir():
        pytest.fail(f"CASESTREAM_SMTP_MAILDIR={path} is not a directory: {_HOW}.", pytrace=False)
    return path
