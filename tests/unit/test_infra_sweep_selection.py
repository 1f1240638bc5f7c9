"""Which topics ``deploy/infra.sh sweep-topics`` deletes (deploy/probe.py ``topics_to_sweep``)."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "infra_probe", Path(__file__).resolve().parents[2] / "deploy" / "probe.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def test_only_test_and_bench_topics_are_swept_by_default():
    names = ["case.events", "test.batch-1a2b", "bench.relay.x", "_schemas", "__consumer_offsets",
             "testing.other", "decision.events.dlq"]
    assert probe.topics_to_sweep(names) == ["bench.relay.x", "test.batch-1a2b"]


def test_given_prefixes_replace_the_defaults_and_internal_topics_never_match():
    names = ["test.a", "scratch.b", "_scratch.c"]
    assert probe.topics_to_sweep(names, ("scratch.", "_scratch.")) == ["scratch.b"]


def test_an_empty_prefix_is_refused():
    with pytest.raises(ValueError, match="every topic"):
        probe.topics_to_sweep(["case.events"], ("",))
