"""The notification service: sends the violation notice of a case over SMTP, exactly once.

It consumes ``NoticeRequested`` from the saga topic (consumer ``notification.requests``,
a PROCESS handler, skipped in replay) and records the notice as *pending* in the same
transaction as the inbox row. A separate sender worker claims pending notices
(``FOR UPDATE SKIP LOCKED``), sends each over SMTP with a deterministic Message-ID, and in
the same transaction marks it sent and appends ``NoticeIssued`` (or, after bounded retries
or a permanent failure, marks it failed and appends ``NoticeFailed``). The same consumer
reads ``EvidenceOverdue`` from the case topic and mails the party one evidence reminder per
case and evidence request (``EvidenceReminderSent``). See
:mod:`services.notification.application.sender` for the remaining crash window.

Layers: ``domain`` (pure) <- ``application`` <- ``adapters`` (PostgreSQL, SMTP, handler,
HTTP) <- ``bootstrap``. Run: ``python -m services.notification``.
"""

from casestream.service import ServiceSpec, TopicSpec

SERVICE = ServiceSpec(
    name="notification", module="services.notification", description="issues notices to parties (SMTP)",
    settings="services.notification.settings:NotificationSettings", build="services.notification.bootstrap:build",
    consumers=('notification.requests',), outbox=True,
    subscriptions={'notification.requests': ('outbox.event.saga', 'outbox.event.case')},
    # retention 90 days: audit.timeline rebuilds from it
    topics=(TopicSpec("outbox.event.notice", partitions=6, retention_ms=7776000000),))
