"""Fixtures for end-to-end tests: the environment the service processes run with, and the
suite stack the modules on the shared infrastructure share.

    infra_env -> dict   (session) this process's environment with the infrastructure's
                        CASESTREAM_* endpoints and a 6 s ``session.timeout.ms``;
    suite_stack -> ServiceStack   (module) the five services of ``services.demo.SUITE`` on
                        their default ports and databases, with ``infra_env``, the demo's
                        case settings (``services.journeys.DEMO_CASE_SETTINGS``: the overdue
                        journey escalates in seconds; cases without an evidence request are
                        not affected) and the file span exporter (``OTEL_TRACES_EXPORTER=file``,
                        ``CASESTREAM_TELEMETRY_TRACES_FILE`` in its ``env``: one JSON line per
                        span, one ``os.write`` each, so a SIGKILL leaves no partial line),
                        audit's ``dead_letter_open`` gauge refreshed every second (the
                        console test watches it), running and ready.

One start serves every module that asks for ``suite_stack``: those modules run one after
the other (``pytest_collection_modifyitems`` moves them together, keeping their order), each
drives cases of its own (its own case ids, tenant or keys), and each finds all five
services running (a service a test killed or stopped is started again). The stack stops
after the last test that asks for it, before any other test runs (the soak and other
stacks use the same ports, databases and consumer groups).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from casestream.service import ServiceStack
from services.demo import SUITE
from services.journeys import DEMO_CASE_SETTINGS
from tests.support.suite import SharedStack

SHARED = "suite_stack"
_HOLDER = pytest.StashKey[SharedStack]()


@pytest.fixture(scope="session")
def infra_env(kafka_bootstrap: str, registry_url: str, pg_url: str) -> dict[str, str]:
    """This process's environment with the CASESTREAM_* endpoints of the running infrastructure."""
    env = dict(os.environ)
    env.update(
        CASESTREAM_KAFKA_BOOTSTRAP=kafka_bootstrap,
        CASESTREAM_REGISTRY_URL=registry_url,
        CASESTREAM_PG_URL=pg_url,
        # a killed consumer's partitions move on after 6 s, not librdkafka's 45 s
        CASESTREAM_KAFKA_SESSION_TIMEOUT_MS="6000",
    )
    return env


@pytest.fixture(scope="session")
def _shared_suite(request: pytest.FixtureRequest, infra_env: dict[str, str],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    work = tmp_path_factory.mktemp("suite")
    env = {**infra_env, **DEMO_CASE_SETTINGS, "OTEL_TRACES_EXPORTER": "file",
           "CASESTREAM_TELEMETRY_TRACES_FILE": str(work / "spans.jsonl"),
           "CASESTREAM_AUDIT_DEAD_LETTER_DEPTH_INTERVAL_S": "1"}
    holder = SharedStack(env, SUITE, work / "logs")
    request.config.stash[_HOLDER] = holder
    try:
        yield holder
    finally:
        holder.close()


@pytest.fixture(scope="module")
def suite_stack(_shared_suite: SharedStack) -> ServiceStack:
    return _shared_suite.get()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests that use the shared stack one after the other, at the place of the
    first of them (the others keep their order), so that the stack starts once."""
    shared = [item for item in items if SHARED in getattr(item, "fixturenames", ())]
    if not shared:
        return
    first = items.index(shared[0])
    rest = [item for item in items if SHARED not in getattr(item, "fixturenames", ())]
    items[:] = rest[:first] + shared + rest[first:]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the shared stack once the next test does not use it (after this test's own
    teardown), so no other test meets its processes on the default ports."""
    holder = item.config.stash.get(_HOLDER, None)
    if holder is not None and (nextitem is None
                               or SHARED not in getattr(nextitem, "fixturenames", ())):
        holder.close()
