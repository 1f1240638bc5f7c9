"""Consumer-group lag against the real Kafka and PostgreSQL: a consumer stuck in its first batch
(nothing committed by a batch yet) with events waiting shows them as lag — in ``casestream
status``'s Kafka figure, the console's Flow data (``casestream.operations.group_lag``) and the
consumer's ``queue_lag_messages`` gauge — and the alert expression on that /metrics is true
(``promtool test rules``: the rule's expression evaluated on series of the live values)."""

from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from casestream import telemetry
from casestream.cli.status import kafka_lag
from casestream.handlers.registry import HandlerKind, HandlerRegistry
from casestream.operations import group_lag
from casestream.testing.consumer import Harness, create_topic, produce_events, wait_until
from tests.support.events import case_returned

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERT = "CasestreamConsumerNotConsuming"


def _promtool() -> str:
    path = REPO / ".local" / "prometheus" / "bin" / "promtool"
    if not path.is_file():
        pytest.fail(f"promtool not built at {path} -- run `make prometheus-tools`.", pytrace=False)
    return str(path)


def _gauge(text: str, name: str, consumer: str) -> list[tuple[str, float]]:
    """``(series, value)`` of metric ``name`` for ``consumer`` in a /metrics text."""
    return [(m.group(1), float(m.group(2))) for m in re.finditer(
        rf'^({name}\{{[^}}]*consumer="{re.escape(consumer)}"[^}}]*\}}) (\S+)$', text, re.MULTILINE)]


def _alert_expression_value(tmp_path: Path, series: list[tuple[str, float]], consumer: str) -> float | None:
    """The value the alert's expression yields for ``consumer`` after 20 minutes of these
    /metrics values held constant (None: no sample, the expression is false)."""
    [rule] = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
              if r["alert"] == ALERT]
    expr = f'({rule["expr"]}) and on () vector(1)'  # the rule's own expression, unchanged
    tests = tmp_path / "t.yml"
    results = {}
    for guess in ("none", "some"):
        exp = [] if guess == "none" else [{"labels": f'{{consumer="{consumer}"}}', "value": 0}]
        tests.write_text(yaml.safe_dump({"tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": f"{v}x30"} for s, v in series],
            "promql_expr_test": [{"expr": expr, "eval_time": "20m", "exp_samples": exp}]}]}))
        proc = subprocess.run([_promtool(), "test", "rules", str(tests)], capture_output=True, text=True)
        results[guess] = proc.returncode == 0, proc.stdout + proc.stderr
    if results["none"][0]:
        return None
    got = re.search(r'got:\s*\{consumer="[^"]+"\}\s*(\S+)', results["none"][1])
    assert got, results["none"][1]
    return float(got.group(1))


def test_a_consumer_stuck_before_its_first_commit_shows_the_waiting_events_as_lag(
        consumer_harness: Any, tmp_path: Path) -> None:
    env: Harness = consumer_harness("test.grouplag")
    create_topic(env.bootstrap, env.topic, 2)
    events = [case_returned(a, 1) for a in ("A", "B", "C")]
    produce_events(env.bootstrap, env.topic, env.codec, events)
    entered, release = threading.Event(), threading.Event()

    def stuck(ctx: Any, event: Any) -> None:
        entered.set()
        release.wait(60)

    registry = HandlerRegistry()
    registry.add("CaseReturned", stuck, kind=HandlerKind.PROJECTION)
    try:
        _stuck_then_released(env, entered, release, registry, tmp_path)
    finally:
        release.set()


def _stuck_then_released(env: Harness, entered: threading.Event, release: threading.Event,
                         registry: HandlerRegistry, tmp_path: Path) -> None:
    rt = env.start(env.runtime(registry=registry))
    assert entered.wait(30), "the handler was never called"
    # the first batch is in the handler: no batch offsets committed, three events waiting
    assert wait_until(lambda: kafka_lag(env.bootstrap, [env.name]).get(env.name) == 3, 30)
    parts = group_lag(env.bootstrap, env.name, [env.topic])
    assert sorted(p.partition for p in parts) == [0, 1] and sum(p.lag for p in parts) == 3

    def metrics() -> str:
        return telemetry.render_prometheus(telemetry.current().metrics.collect())

    assert wait_until(lambda: sum(v for _, v in _gauge(metrics(), "queue_lag_messages", env.name)) == 3, 30)
    text = metrics()
    series = _gauge(text, "queue_lag_messages", env.name) + _gauge(text, "consumer_messages_total", env.name)
    assert _alert_expression_value(tmp_path, series, env.name) == 3

    release.set()  # the batch lands and commits: nothing behind any more, the alert is off
    wait_until(lambda: rt.stats.applied >= 3, 30)
    assert wait_until(lambda: kafka_lag(env.bootstrap, [env.name]).get(env.name) == 0, 30) is not None
    assert sum(p.lag for p in group_lag(env.bootstrap, env.name, [env.topic])) == 0
    wait_until(lambda: sum(v for _, v in _gauge(metrics(), "queue_lag_messages", env.name)) == 0, 30)
    text = metrics()
    series = _gauge(text, "queue_lag_messages", env.name) + _gauge(text, "consumer_messages_total", env.name)
    assert _alert_expression_value(tmp_path, series, env.name) is None
