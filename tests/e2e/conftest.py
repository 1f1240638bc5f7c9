"""Fixtures for end-to-end tests: the environment the service processes run with."""

from __future__ import annotations

import os

import pytest


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
