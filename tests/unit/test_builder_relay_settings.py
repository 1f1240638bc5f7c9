"""A service's relay takes its producer properties and limits from the service settings."""

from __future__ import annotations

import pytest

from casestream.errors import ConfigError
from tests.unit.test_consumer_group_unit import _builder


class Pool:  # what the relay reads of a psycopg_pool.ConnectionPool
    conninfo = "postgresql://postgres@127.0.0.1:1/probe"


def test_relay_producer_properties_and_attempts_come_from_the_service_settings() -> None:
    b = _builder(Pool(), CASESTREAM_KAFKA_BOOTSTRAP="127.0.0.1:1",
                 CASESTREAM_PROBE_RELAY_PRODUCER={"linger.ms": 7, "message.max.bytes": 2_000_000},
                 CASESTREAM_PROBE_RELAY_MAX_ATTEMPTS=3, CASESTREAM_PROBE_RELAY_BATCH_SIZE=50)
    relay = b.relay(producer={"linger.ms": 9})
    assert relay._producer_config["linger.ms"] == 9  # code over settings
    assert relay._producer_config["message.max.bytes"] == 2_000_000
    assert relay.settings.retry.max_attempts == 3 and relay.settings.batch_size == 50


def test_a_bad_relay_producer_property_stops_the_service_with_its_name() -> None:
    b = _builder(Pool(), CASESTREAM_KAFKA_BOOTSTRAP="127.0.0.1:1",
                 CASESTREAM_PROBE_RELAY_PRODUCER={"linger.mss": 7})
    with pytest.raises(ConfigError, match='No such configuration property: "linger.mss"'):
        b.relay()
