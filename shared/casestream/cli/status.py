"""``casestream status``: one terminal table of the live system, one row per service.

Columns: readiness (``/readyz``), consumer group, consumer lag in messages (Kafka: high
watermark - committed offset, summed over the group's partitions; falls back to the service's
``queue_lag_messages`` gauge when Kafka is unreachable) and in seconds (``queue_lag_seconds``),
outbox pending rows and oldest pending age (``outbox_pending_total``,
``outbox_oldest_pending_age_seconds``), dead letters since the process started
(``dead_letter_total``) and sagas by state (``saga_state_total``, saga service only).

Sources: each service's ``/metrics`` and ``/readyz`` on ``127.0.0.1:<port>`` (ports from
``CASESTREAM_<SVC>_PORT``, as ``casestream.service.devstack``; ``--url svc=URL`` overrides) and the
Kafka cluster of ``CASESTREAM_KAFKA_BOOTSTRAP``. A service that does not answer shows ``down``.

    casestream status [--url case=http://host:port]... [--no-kafka] [--json]
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import click
import httpx

from casestream.service.devstack import SERVICE_PORTS, service_port

__all__ = ["status", "ServiceStatus", "parse_prometheus", "service_status", "render_table"]

CONSUMER_GROUPS: Mapping[str, str] = {
    "case": "case.saga-requests", "saga": "saga.orchestrator", "decision": "decision.requests",
    "notification": "notification.requests", "audit": "audit.journal",
}
"""The consumer group of each service: the Kafka group id is the inbox's consumer name."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> Samples:
    """``{(name, sorted label pairs): value}`` of a Prometheus text exposition (comments skipped)."""
    out: Samples = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m or line.startswith("#"):
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        try:
            out[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            continue
    return out


def _sum(samples: Samples, name: str) -> float | None:
    values = [v for (n, _), v in samples.items() if n == name]
    return sum(values) if values else None


def _max(samples: Samples, name: str) -> float | None:
    values = [v for (n, _), v in samples.items() if n == name]
    return max(values) if values else None


@dataclass(slots=True, kw_only=True)
class ServiceStatus:
    """One row of the table (None = unknown)."""

    service: str
    ready: str = "down"
    consumer: str = ""
    lag_messages: float | None = None
    lag_seconds: float | None = None
    outbox_pending: float | None = None
    outbox_oldest_s: float | None = None
    dead_letters: float | None = None
    sagas: dict[str, int] = field(default_factory=dict)


def service_status(service: str, metrics_text: str | None, ready: str,
                   kafka_lag: float | None = None) -> ServiceStatus:
    """Build a row from a service's ``/metrics`` text (None if unreachable), its readiness
    word (``ready``, ``not ready: kafka``, ``down``) and the Kafka-side lag if known."""
    row = ServiceStatus(service=service, ready=ready, consumer=CONSUMER_GROUPS.get(service, ""))
    row.lag_messages = kafka_lag
    if metrics_text is None:
        return row
    s = parse_prometheus(metrics_text)
    consumers = sorted({dict(lab).get("consumer", "") for (n, lab) in s if n == "dead_letter_total"})
    if consumers:
        row.consumer = ",".join(c for c in consumers if c)
    if row.lag_messages is None:
        row.lag_messages = _sum(s, "queue_lag_messages")
    row.lag_seconds = _max(s, "queue_lag_seconds")
    row.outbox_pending = _sum(s, "outbox_pending_total")
    row.outbox_oldest_s = _max(s, "outbox_oldest_pending_age_seconds")
    row.dead_letters = _sum(s, "dead_letter_total")
    row.sagas = {dict(lab).get("state", "?"): int(v) for (n, lab), v in s.items()
                 if n == "saga_state_total"}
    return row


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}"


HEADER = ("SERVICE", "READY", "CONSUMER", "LAG MSGS", "LAG S", "OUTBOX PENDING", "OLDEST S",
          "DEAD LETTERS", "SAGAS BY STATE")


def render_table(rows: Sequence[ServiceStatus]) -> str:
    """The rows as a fixed-width text table with :data:`HEADER` (``-`` = unknown / n.a.)."""
    cells = [HEADER] + [(
        r.service, r.ready, r.consumer or "-", _fmt(r.lag_messages), _fmt(r.lag_seconds, 1),
        _fmt(r.outbox_pending), _fmt(r.outbox_oldest_s, 1), _fmt(r.dead_letters),
        " ".join(f"{k}={v}" for k, v in sorted(r.sagas.items())) or "-") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip()
                     for c in cells)


# ---------------------------------------------------------------------- live sources


def _readiness(client: httpx.Client, base: str) -> str:
    try:
        r = client.get(base + "/readyz")
    except httpx.HTTPError:
        return "down"
    if r.status_code == 200:
        return "ready"
    try:
        failing = sorted(r.json().get("failing", {}))
    except ValueError:
        failing = []
    return "not ready: " + ",".join(failing) if failing else f"HTTP {r.status_code}"


def _metrics(client: httpx.Client, base: str) -> str | None:
    try:
        r = client.get(base + "/metrics")
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


def kafka_lag(bootstrap: str, groups: Sequence[str], timeout_s: float = 5.0) -> dict[str, float]:
    """``{group: messages behind}``: sum over the group's committed partitions of
    (high watermark - committed offset). Groups Kafka does not know are left out.

    Raises:
        RuntimeError: Kafka did not answer within ``timeout_s``.
    """
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.list_topics(timeout=timeout_s)
    except Exception as e:
        raise RuntimeError(f"kafka {bootstrap}: {e}") from e
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "casestream.status",
                      "enable.auto.commit": False})
    out: dict[str, float] = {}
    try:
        for group in groups:  # the client lists one group per request
            try:
                [fut] = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s).values()
                committed = fut.result().topic_partitions or []
            except Exception:  # noqa: BLE001 - an unknown group: no lag to show
                continue
            behind = 0.0
            for tp in committed:
                if tp.offset < 0:
                    continue
                _, high = probe.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                      timeout=timeout_s)
                behind += max(0, high - tp.offset)
            out[group] = behind
    finally:
        probe.close()
    return out


@click.command("status")
@click.option("--url", "urls", multiple=True, metavar="SVC=URL",
              help="base URL of a service (default http://127.0.0.1:<CASESTREAM_<SVC>_PORT>)")
@click.option("--no-kafka", is_flag=True, help="lag from the services' gauges only")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per service instead")
def status(urls: tuple[str, ...], no_kafka: bool, as_json: bool) -> None:
    """Per service: readiness, consumer lag, outbox pending and oldest age, dead letters, sagas.

    Exit status 0 when every service is ready, 1 when any is down or not ready (for scripts)."""
    bases = {name: f"http://127.0.0.1:{service_port(name)}" for name in SERVICE_PORTS}
    for item in urls:
        name, sep, base = item.partition("=")
        if not sep or name not in bases:
            raise click.UsageError(f"--url wants SVC=URL with SVC one of {', '.join(bases)}")
        bases[name] = base.rstrip("/")
    lags: dict[str, float] = {}
    if not no_kafka:
        # lazy (start-up cost): loaded when this command runs, not for every CLI call
        from casestream.service.settings import CommonSettings

        try:
            lags = kafka_lag(CommonSettings().kafka_bootstrap, list(CONSUMER_GROUPS.values()))
        except RuntimeError as e:
            click.echo(f"warning: {e}; lag from the services' gauges", err=True)
    rows = []
    with httpx.Client(timeout=3.0) as client:
        for name, base in bases.items():
            rows.append(service_status(name, _metrics(client, base), _readiness(client, base),
                                       lags.get(CONSUMER_GROUPS[name])))
    if as_json:
        for row in rows:
            click.echo(json.dumps(asdict(row)))
    else:
        click.echo(render_table(rows))
    if any(row.ready != "ready" for row in rows):
        raise SystemExit(1)
