"""The consumer runtime lowers CPython's thread switch interval (never raises it): the loop
decodes the next batch while the database thread waits on PostgreSQL, and at the interpreter
default (5 ms) every result the database thread receives waited for the GIL."""

from __future__ import annotations

import sys
import threading

import pytest

import confluent_kafka
from casestream.consumer import ConsumerRuntime, ConsumerSettings
from casestream.consumer.deadletters import MemoryDeadLetters
from casestream.consumer.handlers import HandlerRegistry
from casestream.consumer.runtime import lower_switch_interval
from casestream.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture
def interval():
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_a_higher_interval_is_lowered_to_the_target(interval):
    sys.setswitchinterval(0.005)
    assert lower_switch_interval(0.001) == pytest.approx(0.001)
    assert sys.getswitchinterval() == pytest.approx(0.001)


def test_a_lower_interval_is_kept_and_none_leaves_it(interval):
    sys.setswitchinterval(0.0005)
    assert lower_switch_interval(0.001) == pytest.approx(0.0005)
    sys.setswitchinterval(0.005)
    assert lower_switch_interval(None) == pytest.approx(0.005)


def test_settings_default_and_validation():
    assert ConsumerSettings().switch_interval_s == 0.001
    assert ConsumerSettings(switch_interval_s=None).switch_interval_s is None
    with pytest.raises(ConfigError, match="switch_interval_s"):
        ConsumerSettings(switch_interval_s=0)


class _NoBroker:
    """Stands in for ``confluent_kafka.Consumer``: subscribes and closes, nothing else."""

    def __init__(self, conf):
        self.conf = conf

    def subscribe(self, topics, **callbacks):
        self.topics = topics

    def close(self):
        pass


def test_run_applies_the_setting(interval, monkeypatch):
    monkeypatch.setattr(confluent_kafka, "Consumer", _NoBroker)
    sys.setswitchinterval(0.005)
    rt = ConsumerRuntime("c", ["t"], HandlerRegistry(), codec=None, pool=None,
                         kafka_config={"bootstrap.servers": "127.0.0.1:1"},
                         settings=ConsumerSettings(ensure_topics=False, ensure_schema=False,
                                                   switch_interval_s=0.002),
                         dead_letters=MemoryDeadLetters())
    stop = threading.Event()
    stop.set()
    rt.run(stop)
    assert sys.getswitchinterval() == pytest.approx(0.002)
