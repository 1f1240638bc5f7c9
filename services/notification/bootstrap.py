"""Wiring of the notification service — the only place that builds adapters.

``build()`` reads :class:`NotificationSettings`, applies the migrations (outbox, then
``migrations/*.sql``), prepares the codec, and returns a
:class:`~casestream.service.process.ServiceProcess` with three workers:

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

from pathlib import Path

from casestream.service import wiring
from casestream.migrations import Migration
from casestream.retry import RetryPolicy
from casestream.consumer import HandlerRegistry
from casestream.http import DeadlinePool
from casestream.outbox import OutboxWriter
from casestream.service import ServiceProcess
from services.notification.adapters import handlers
from services.notification.adapters.http import build_app
from services.notification.adapters.postgres import PgNoticeQueries
from services.notification.adapters.sender_worker import SenderWorker
from services.notification.adapters.smtp import SmtpMailer
from services.notification.application.sender import NoticeSender
from services.notification.settings import NotificationSettings

NAME = "notification"
MIGRATIONS = Path(__file__).parent / "migrations"


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return wiring.service_migrations(MIGRATIONS)


def send_policy(settings: NotificationSettings) -> RetryPolicy:
    """The bounded SMTP retry policy from the settings (doubling, no jitter)."""
    return RetryPolicy(max_attempts=settings.send_max_attempts, jitter=0.0,
                       initial_delay_s=settings.send_first_backoff_s,
                       max_delay_s=settings.send_max_backoff_s)


def build(settings: NotificationSettings | None = None) -> ServiceProcess:
    """Build the notification service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: bad settings, unreachable database, schema or
            registry problems (``run_service`` prints them as one line, exit status 2).
    """
    settings = settings or wiring.read_settings(NotificationSettings, NAME)
    base = wiring.groundwork(settings, NAME, migrations())
    codec = base.codec

    pool = wiring.connection_pool(settings.dsn, NAME, settings.pool_size)
    outbox = OutboxWriter(codec)
    registry = handlers.register(HandlerRegistry(), clock=wiring.utc_now,
                                 also_known=wiring.event_types_on(base.catalog, handlers.TOPICS))
    consumer = wiring.consumer_runtime(handlers, registry, codec, pool, settings,
                                       batch_size=settings.consumer_batch, outbox=outbox)
    mailer = SmtpMailer(settings.smtp_host, settings.smtp_port, timeout_s=settings.smtp_timeout_s)
    sender = SenderWorker(pool, settings.dsn,
                          NoticeSender(policy=send_policy(settings), clock=wiring.utc_now),
                          mailer, outbox, interval_s=settings.sender_interval_s)
    relay = wiring.outbox_relay(pool, settings, NAME)

    return ServiceProcess(
        name=NAME, app=build_app(PgNoticeQueries(DeadlinePool(pool)), edge=base.edge),
        host=settings.host, port=settings.port,
        workers={"consumer": consumer.run, "sender": sender, "relay": relay.run},
        readiness=wiring.readiness(pool, "notice", consumer, settings),
        closers=[codec.close, pool.close],
    )
