"""Wiring of the notification service — the only place that builds adapters.

``build()`` reads :class:`NotificationSettings`, applies the migrations (outbox, then
``migrations/*.sql``), prepares the codec, and returns a
:class:`~casestream.service.ServiceProcess` with three workers:

- ``consumer``: consumer runtime ``notification.requests`` on ``outbox.event.saga``
  (records NoticeRequested as pending notices);
- ``sender``: :class:`SenderWorker` (SMTP to CASESTREAM_SMTP_HOST:PORT, bounded retries);
- ``relay``: the outbox relay of the notification database.

HTTP: ``/notices`` routes behind the shared edge (bearer tokens, tenant scoping, load
shedding, rate limits, request deadlines: ``casestream.http``; reads through
``DeadlinePool``) plus ``/healthz``/``/readyz`` (PostgreSQL, consumer assignment;
SMTP is deliberately not a readiness condition: notices wait as pending while it is down).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from casestream import wiring
from casestream.catalog import load_catalog
from casestream.consumer.runtime import ConsumerRuntime
from casestream.consumer.settings import ConsumerSettings
from casestream.errors import ConfigError
from casestream.handlers import HandlerRegistry
from casestream.http.edge import edge_policy
from casestream.http.pgdeadline import DeadlinePool
from casestream.kafka_config import producer_config
from casestream.outbox import OUTBOX_MIGRATION, OutboxWriter
from casestream.relay.core import OutboxRelay
from casestream.service import ServiceProcess, configure_logging
from casestream.telemetry.readiness import dependency_checks
from services.notification.adapters import handlers
from services.notification.adapters.http import build_app
from services.notification.adapters.postgres import PgNoticeQueries
from services.notification.adapters.sender_worker import SenderWorker
from services.notification.adapters.smtp import SmtpMailer
from services.notification.application.sender import NoticeSender
from services.notification.domain.retry import SendPolicy
from services.notification.settings import NotificationSettings

NAME = "notification"
MIGRATIONS = Path(__file__).parent / "migrations"


def utc_now() -> datetime:
    """Timezone-aware UTC now."""
    return datetime.now(UTC)


def read_settings() -> NotificationSettings:
    """NotificationSettings from the environment.

    Raises:
        ConfigError: a variable has an invalid value (the message names it).
    """
    try:
        return NotificationSettings()
    except ValidationError as e:
        raise ConfigError(f"invalid notification settings: {e}") from e


def migrations() -> list[object]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return [OUTBOX_MIGRATION, *sorted(MIGRATIONS.glob("*.sql"))]


def send_policy(settings: NotificationSettings) -> SendPolicy:
    """The bounded SMTP retry policy from the settings."""
    return SendPolicy(max_attempts=settings.send_max_attempts,
                      first_backoff=timedelta(seconds=settings.send_first_backoff_s),
                      max_backoff=timedelta(seconds=settings.send_max_backoff_s))


def build(settings: NotificationSettings | None = None) -> ServiceProcess:
    """Build the notification service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: bad settings, unreachable database, schema or
            registry problems (``run_service`` prints them as one line, exit status 2).
    """
    settings = settings or read_settings()
    configure_logging(NAME, settings.log_level)
    edge = edge_policy(settings, NAME)
    dsn = settings.database_url(settings.database)
    wiring.migrate(dsn, migrations(), service=NAME)
    catalog = load_catalog()
    codec = wiring.prepared_codec(settings, catalog)

    pool = ConnectionPool(dsn, min_size=2, max_size=settings.pool_size, open=True,
                          kwargs={"application_name": NAME})
    outbox = OutboxWriter(codec)
    topic_types = [t for t in catalog.event_types
                   if catalog.subject_for(t).topic in handlers.TOPICS]
    registry = handlers.register(HandlerRegistry(), clock=utc_now, also_known=topic_types)
    consumer = ConsumerRuntime(handlers.CONSUMER, handlers.TOPICS, registry, codec, pool,
                               settings.consumer_config(),
                               ConsumerSettings(batch_size=settings.consumer_batch),
                               outbox=outbox)
    mailer = SmtpMailer(settings.smtp_host, settings.smtp_port, timeout_s=settings.smtp_timeout_s)
    sender = SenderWorker(pool, dsn, NoticeSender(policy=send_policy(settings), clock=utc_now),
                          mailer, outbox, interval_s=settings.sender_interval_s)
    relay = OutboxRelay(pool, producer_config(settings.kafka_bootstrap,
                                              client_id="notification.relay"),
                        name="notification.relay")

    database_ready = wiring.database_ready(pool, "notice")

    consumer_ready = wiring.consumer_ready(consumer)

    return ServiceProcess(
        name=NAME, app=build_app(PgNoticeQueries(DeadlinePool(pool)), edge=edge),
        host=settings.host,
        port=settings.port,
        workers={"consumer": consumer.run, "sender": sender, "relay": relay.run},
        readiness={"postgres": database_ready, "consumer": consumer_ready,
                   **dependency_checks(settings.kafka_bootstrap, settings.registry_url)},
        closers=[codec.close, pool.close],
    )
