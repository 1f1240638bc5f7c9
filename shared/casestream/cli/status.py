"""``casestream status``: one terminal table of the live system, a block of lines per service.

Services are the discovered ones (entry point group ``casestream.services``). A service's
first line has its readiness (``/readyz``), outbox pending rows and oldest pending age
(``outbox_pending_total``, ``outbox_oldest_pending_age_seconds``) and sagas by state
(``saga_state_total``); every consumer of the service (``ServiceSpec.consumers``, then any
other its ``/metrics`` names) has its own line — the first on the service's line, the others
below it with the service columns left blank — with its lag in messages (Kafka: high
watermark - committed offset, summed over the group's partitions, a partition with no
commit counting from its first retained offset, as the console does; the service's
``queue_lag_messages`` gauge when Kafka is unreachable), in seconds (``queue_lag_seconds``)
and its open dead letters: entries of ``<consumer>.dlq`` not re-driven successfully nor
discarded, read from the topics (``casestream.operations.deadletters``), so the figure
survives restarts; the service's ``dead_letter_open`` gauge when Kafka is unreachable.

Sources: each service's ``/metrics``, ``/readyz`` and ``/readyz/consumers`` on ``127.0.0.1:<port>``
(:meth:`ServiceSpec.port`: ``CASESTREAM_<SVC>_PORT`` or the settings' default;
``--url svc=URL`` overrides) and the Kafka cluster of ``CASESTREAM_KAFKA_BOOTSTRAP``. A
service that does not answer shows ``down``.

    casestream status [--url case=http://host:port]... [--no-kafka] [--json]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import click
import httpx

from casestream.cli.context import cli_context
from casestream.kafka.config import KafkaTarget, bootstrap_of, client_config
from casestream.operations.flow import Samples, parse_prometheus, sample_max, sample_sum

__all__ = ["status", "ServiceStatus", "ConsumerStatus", "parse_prometheus", "service_status",
           "render_table", "service_rows", "open_dead_letters"]

_sum, _max = sample_sum, sample_max


def _of(samples: Samples, consumer: str) -> Samples:
    return {k: v for k, v in samples.items() if dict(k[1]).get("consumer") == consumer}


def _total(values: Sequence[float | None], combine: Callable[[list[float]], float]) -> float | None:
    known = [v for v in values if v is not None]
    return combine(known) if known else None


@dataclass(slots=True, kw_only=True)
class ConsumerStatus:
    """One consumer's line (None = unknown): lag in messages and seconds, dead letters."""

    name: str
    lag_messages: float | None = None
    lag_seconds: float | None = None
    dead_letters: float | None = None


@dataclass(slots=True, kw_only=True)
class ServiceStatus:
    """One service of the table (None = unknown).

    ``consumer`` (names joined by ``,``), ``lag_messages`` and ``dead_letters`` (sums) and
    ``lag_seconds`` (maximum) summarise ``consumers``.
    """

    service: str
    ready: str = "down"
    consumer: str = ""
    lag_messages: float | None = None
    lag_seconds: float | None = None
    outbox_pending: float | None = None
    outbox_oldest_s: float | None = None
    outbox_cdc: bool = False
    dead_letters: float | None = None
    sagas: dict[str, int] = field(default_factory=dict)
    consumers: list[ConsumerStatus] = field(default_factory=list)


def service_status(service: str, metrics_text: str | None, ready: str,
                   kafka_lag: Mapping[str, float] | None = None,
                   consumers: Sequence[str] = (),
                   open_dead_letters: Mapping[str, int] | None = None) -> ServiceStatus:
    """Build a service's row from its ``/metrics`` text (None if unreachable), its readiness
    word (``ready``, ``not ready: kafka``, ``down``), the Kafka-side lag per consumer group
    if known, its declared consumers (``ServiceSpec.consumers``; consumers its metrics
    name besides are added after them, sorted) and the open dead letters per consumer read
    from the topics if known (else the ``dead_letter_open`` gauge)."""
    row = ServiceStatus(service=service, ready=ready)
    lags = dict(kafka_lag or {})
    opened = dict(open_dead_letters or {})
    s = parse_prometheus(metrics_text) if metrics_text is not None else {}
    seen = sorted({c for (_, lab) in s if (c := dict(lab).get("consumer"))} - set(consumers))
    for name in (*consumers, *seen):
        mine = _of(s, name)
        row.consumers.append(ConsumerStatus(
            name=name,
            lag_messages=lags[name] if name in lags else _sum(mine, "queue_lag_messages"),
            lag_seconds=_max(mine, "queue_lag_seconds"),
            dead_letters=float(opened[name]) if name in opened else _sum(mine, "dead_letter_open")))
    row.consumer = ",".join(c.name for c in row.consumers)
    row.lag_messages = _total([c.lag_messages for c in row.consumers], sum)
    row.lag_seconds = _total([c.lag_seconds for c in row.consumers], max)
    row.dead_letters = _total([c.dead_letters for c in row.consumers], sum)
    if metrics_text is None:
        return row
    row.outbox_pending = _sum(s, "outbox_pending_total")
    row.outbox_oldest_s = _max(s, "outbox_oldest_pending_age_seconds")
    if row.outbox_pending is None and (cdc := _sum(s, "outbox_cdc_unconfirmed_total")) is not None:
        # CDC publishes (no relay): rows not yet confirmed by the replication slot instead.
        row.outbox_cdc = True
        row.outbox_pending = cdc
        row.outbox_oldest_s = _max(s, "outbox_cdc_oldest_unconfirmed_age_seconds")
    row.sagas = {dict(lab).get("state", "?"): int(v) for (n, lab), v in s.items()
                 if n == "saga_state_total"}
    return row


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}"


HEADER = ("SERVICE", "READY", "CONSUMER", "LAG MSGS", "LAG S", "OUTBOX PENDING", "OLDEST S",
          "DEAD LETTERS", "SAGAS BY STATE")


def service_rows(r: ServiceStatus) -> list[tuple[str, ...]]:
    """The table lines of one service: the first with the service's columns and its first
    consumer, one more per further consumer with the service's columns blank."""
    consumers = r.consumers or [ConsumerStatus(name="-")]
    first, *more = consumers
    lines = [(r.service, r.ready, first.name, _fmt(first.lag_messages), _fmt(first.lag_seconds, 1),
              _fmt(r.outbox_pending) + (" (cdc)" if r.outbox_cdc else ""), _fmt(r.outbox_oldest_s, 1),
              _fmt(first.dead_letters),
              " ".join(f"{k}={v}" for k, v in sorted(r.sagas.items())) or "-")]
    lines += [("", "", c.name, _fmt(c.lag_messages), _fmt(c.lag_seconds, 1), "", "",
               _fmt(c.dead_letters), "") for c in more]
    return lines


def render_table(rows: Sequence[ServiceStatus]) -> str:
    """The rows as a fixed-width text table with :data:`HEADER` (``-`` = unknown / n.a.;
    a service with several consumers takes one line per consumer, :func:`service_rows`)."""
    cells = [HEADER] + [line for r in rows for line in service_rows(r)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADER))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(HEADER))).rstrip()
                     for c in cells)


# ---------------------------------------------------------------------- live sources


def _failing(r: httpx.Response) -> str:
    try:
        failing = sorted(r.json().get("failing", {}))
    except ValueError:
        failing = []
    return ",".join(failing) if failing else f"HTTP {r.status_code}"


def _readiness(client: httpx.Client, base: str) -> str:
    """``ready``; ``not ready: <checks>`` (``/readyz``: it cannot take commands);
    ``consumers not ready: <checks>`` (``/readyz/consumers``: Kafka, registry, consumers);
    ``down``."""
    try:
        r = client.get(base + "/readyz")
        if r.status_code != 200:
            return "not ready: " + _failing(r)
        c = client.get(base + "/readyz/consumers")
    except httpx.HTTPError:
        return "down"
    if c.status_code in (200, 404):  # 404: a service from before the consumption signal
        return "ready"
    return "consumers not ready: " + _failing(c)


def _metrics(client: httpx.Client, base: str) -> str | None:
    try:
        r = client.get(base + "/metrics")
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


def kafka_lag(bootstrap: KafkaTarget, groups: Sequence[str], timeout_s: float = 5.0) -> dict[str, float]:
    """``{group: messages behind}``: the sum of :func:`casestream.operations.group_lag` over
    the topics the group has committed on (a partition with no commit counts from its start
    position, the first retained offset), as the console's Flow page counts it. Groups Kafka
    does not know are left out.

    Raises:
        RuntimeError: Kafka did not answer within ``timeout_s``.
    """
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    from casestream.operations.flow import group_lag

    admin = AdminClient(client_config(bootstrap))
    try:
        admin.list_topics(timeout=timeout_s)
    except Exception as e:
        raise RuntimeError(f"kafka {bootstrap_of(bootstrap)}: {e}") from e
    out: dict[str, float] = {}
    for group in groups:  # the client lists one group per request
        try:
            [fut] = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s).values()
            topics = sorted({tp.topic for tp in fut.result().topic_partitions or []
                             if tp.offset >= 0})
        except Exception:  # noqa: BLE001 - an unknown group: no lag to show
            continue
        if topics:
            out[group] = float(sum(p.lag for p in group_lag(bootstrap, group, topics,
                                                             timeout_s=timeout_s)))
    return out


def open_dead_letters(bootstrap: KafkaTarget, consumers: Sequence[str]) -> dict[str, int]:
    """``{consumer: open dead letters}`` from the topics; consumers whose topics cannot be
    read are left out."""
    from casestream.operations import load_dead_letter_state

    out: dict[str, int] = {}
    for consumer in consumers:
        try:
            out[consumer] = load_dead_letter_state(bootstrap, consumer, timeout_s=5.0).depth
        except Exception:  # noqa: BLE001 - unknown here: the gauge (or "-") is shown instead
            continue
    return out


@click.command("status")
@click.argument("services", nargs=-1)
@click.option("--url", "urls", multiple=True, metavar="SVC=URL",
              help="base URL of a service (default http://127.0.0.1:<CASESTREAM_<SVC>_PORT>)")
@click.option("--no-kafka", is_flag=True, help="lag from the services' gauges only")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per service instead")
def status(services: tuple[str, ...], urls: tuple[str, ...], no_kafka: bool, as_json: bool) -> None:
    """Per service: readiness, consumer lag, outbox pending and oldest age, open dead letters, sagas.

    SERVICES restricts the table to those installed services (default: every one).
    Exit status 0 when every service shown is ready, 1 when any is down or not ready (for scripts)."""
    specs = cli_context().services()
    unknown = [name for name in services if name not in specs]
    if unknown:
        raise click.BadParameter(f"unknown service {', '.join(unknown)} (installed: "
                                 f"{', '.join(specs) or 'none'})", param_hint="SERVICES")
    if services:
        specs = {name: specs[name] for name in services}
    bases = {name: f"http://127.0.0.1:{spec.port()}" for name, spec in specs.items()}
    for item in urls:
        name, sep, base = item.partition("=")
        if not sep or name not in bases:
            raise click.UsageError(f"--url wants SVC=URL with SVC one of the discovered "
                                   f"services: {', '.join(bases) or 'none installed'}")
        bases[name] = base.rstrip("/")
    lags: dict[str, float] = {}
    opened: dict[str, int] = {}
    if not no_kafka:
        groups = [c for spec in specs.values() for c in spec.consumers]
        try:
            lags = kafka_lag(cli_context().kafka_client(), groups)
            opened = open_dead_letters(cli_context().kafka_client(), groups)
        except RuntimeError as e:
            click.echo(f"warning: {e}; lag and dead letters from the services' gauges", err=True)
    rows = []
    with httpx.Client(timeout=3.0) as client:
        for name, base in bases.items():
            rows.append(service_status(name, _metrics(client, base), _readiness(client, base),
                                       lags, specs[name].consumers, opened))
    if not rows:
        click.echo("no services installed (entry point group casestream.services)", err=True)
    if as_json:
        for row in rows:
            click.echo(json.dumps(asdict(row)))
    else:
        click.echo(render_table(rows))
    if any(row.ready != "ready" for row in rows):
        raise SystemExit(1)
