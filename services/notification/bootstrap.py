"""Wiring of the notification service — the only place that builds adapters.

Workers: ``consumer`` (``notification.requests`` on ``outbox.event.saga``: records
NoticeRequested and the other notice requests as pending notices; on ``outbox.event.case``:
records each EvidenceOverdue as a pending evidence reminder), ``sender`` (:class:`SenderWorker`: SMTP to
CASESTREAM_SMTP_HOST:PORT, bounded retries), ``relay``. HTTP: ``/notices`` behind the shared
edge. SMTP is deliberately not a readiness condition: notices wait as pending while it is down.
"""

from __future__ import annotations

from pathlib import Path

from casestream.handlers import HandlerRegistry
from casestream.migrations import Migration
from casestream.retry import RetryPolicy
from casestream.service import ServiceBuilder, ServiceProcess, service_migrations
from services import schemas_dir
from services.notification import SERVICE
from services.notification.adapters import handlers
from services.notification.adapters.http import build_app
from services.notification.adapters.postgres import PgNoticeQueries
from services.notification.adapters.sender_worker import SenderWorker
from services.notification.adapters.pdf import render_notice_pdf
from services.notification.adapters.smtp import SmtpMailer
from services.notification.application.sender import NoticeSender
from services.notification.settings import NotificationSettings

MIGRATIONS = SERVICE.migrations_folder()  # ServiceSpec.migrations


def migrations() -> list[Migration | Path]:
    """The outbox migration, then this service's ``migrations/*.sql`` in name order."""
    return service_migrations(MIGRATIONS)


def send_policy(settings: NotificationSettings) -> RetryPolicy:
    """The bounded SMTP retry policy from the settings (doubling, no jitter)."""
    return RetryPolicy(max_attempts=settings.send_max_attempts, jitter=0.0,
                       initial_delay_s=settings.send_first_backoff_s,
                       max_delay_s=settings.send_max_backoff_s)


def build(settings: NotificationSettings | None = None) -> ServiceProcess:
    """Build the notification service process (see the module docstring).

    Raises:
        casestream.errors.CasestreamError: see :class:`casestream.service.ServiceBuilder`.
    """
    b = ServiceBuilder(SERVICE, settings, schemas=schemas_dir()).start()
    s = b.settings
    b.consumer(handlers.CONSUMER, handlers.TOPICS, handlers.register(HandlerRegistry(), clock=b.clock),
               emits=True)
    mailer = SmtpMailer(s.smtp_host, s.smtp_port, timeout_s=s.smtp_timeout_s)
    b.worker("sender", SenderWorker(b.pool, s.dsn, NoticeSender(policy=send_policy(s), clock=b.clock,
                                                              render=render_notice_pdf),
                                    mailer, b.outbox, interval_s=s.sender_interval_s))
    b.relay()
    return b.build(app=build_app(PgNoticeQueries(b.request_pool), edge=b.edge), ready_table="notice")
