"""Use case: send one due PENDING notice and record its outcome (the sender worker's step).

One call = one unit of work (the caller's transaction):

1. claim the oldest due PENDING notice (``FOR UPDATE SKIP LOCKED``: several senders never
   send the same notice concurrently);
2. if its recipient is undeliverable (``@fail.invalid``) it FAILS at once, no SMTP;
3. otherwise the notice document (PDF, deterministic) is rendered and the mail (deterministic
   Message-ID, the PDF attached) is sent over SMTP *while the row is locked*;
4. success: SENT + ``NoticeIssued`` (by kind: :data:`~.events.SENT_EVENTS`) appended to the outbox; transient failure: attempts+1
   and ``next_attempt_at`` by the :class:`~casestream.retry.RetryPolicy`, or FAILED + ``NoticeFailed`` once the
   attempts are used up; permanent failure (5yz): FAILED + ``NoticeFailed`` at once;
5. the caller commits.

Exactly one SMTP notice per case and kind — what holds and what does not:

- a request is recorded once (unique case id + kind, same transaction as the inbox row);
- a notice is sent only by the holder of its row lock, and once SENT is never claimed again;
- a process killed before step 3 (or during it, before the SMTP server accepted the DATA)
  rolls back: the row is PENDING again and is sent by the next sender — no mail was
  delivered, so none is doubled;
- **the remaining window**: the SMTP server accepted the mail (``250`` after DATA) but the
  process died (or the database connection broke) before the commit of step 5. The row is
  PENDING again and the mail is sent a second time, *with the same Message-ID*, so the
  duplicate is recognisable (RFC 5322 §3.6.4) and a de-duplicating MTA or reader drops it.
  The window is the time between the server's ``250`` and our COMMIT — a few milliseconds
  on this machine. Closing it fully needs an SMTP server that can be asked "did you accept
  Message-ID X?" (not part of SMTP) or a two-phase handshake we do not have.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from casestream.retry import RetryPolicy

from services.notification.application.events import announce, reply_for
from services.notification.application.ports import EventSink, Mailer, NoticeDocument, NoticeStore
from services.notification.domain.errors import MailError
from services.notification.domain.notice import (
    Notice,
    NoticeStatus,
    compose,
    has_document,
    undeliverable_reason,
)

log = logging.getLogger(__name__)


class NoticeSender:
    """Sends due notices one per call.

    Args:
        policy: backoff of transient SMTP failures; ``max_attempts`` bounds the SMTP attempts
            of a notice (a notice records no first-failure time: ``max_elapsed_s`` is unused).
        clock: returns the current time (timezone-aware UTC).
        render: renders the notice document attached to the mail (PDF bytes); None sends
            the text alone. Its SHA-256 goes into ``NoticeIssued.document_sha256``.
    """

    def __init__(self, *, policy: RetryPolicy, clock: Callable[[], datetime],
                 render: NoticeDocument | None = None):
        self.policy = policy
        self.clock = clock
        self.render = render

    def send_next(self, store: NoticeStore, mailer: Mailer, sink: EventSink) -> Notice | None:
        """Claim, send and record one due notice; None if none is due.

        Returns the notice as saved (SENT, FAILED, or PENDING with a later attempt).
        Database errors propagate (the caller's transaction then rolls back: nothing sent
        is marked, see the module docstring).
        """
        now = self.clock()
        notice = store.claim_due(now)
        if notice is None:
            return None
        reason = undeliverable_reason(notice.recipient_email)
        if reason is not None:
            return self._fail(store, sink, notice, reason=reason, now=now)
        document = (self.render(notice) if self.render is not None and has_document(notice)
                    else None)
        try:
            mailer.send(compose(notice, date=now, document=document))
        except MailError as e:
            attempts = notice.attempts + 1
            error = str(e)[:500]
            if e.permanent:
                return self._fail(store, sink, replace(notice, attempts=attempts),
                                  reason=f"SMTP refused the notice: {error}", now=now)
            retry_at = self.next_attempt_at(attempts, now)
            if retry_at is None:
                return self._fail(store, sink, replace(notice, attempts=attempts),
                                  reason=f"SMTP failed {attempts} times; last error: {error}",
                                  now=now)
            log.warning("notice of case %s: attempt %d failed (%s); retry at %s",
                        notice.case_id, attempts, error, retry_at.isoformat())
            pending = replace(notice, attempts=attempts, next_attempt_at=retry_at,
                              last_error=error)
            store.save(pending)
            return pending
        sent = replace(notice, status=NoticeStatus.SENT, attempts=notice.attempts + 1,
                       last_error=None, version=notice.version + 1,
                       document_sha256=hashlib.sha256(document).hexdigest() if document else None)
        store.save(sent)
        announce(sink, reply_for(sent, reason=None, now=now))
        log.info("notice of case %s sent to %s as %s", sent.case_id, sent.recipient_email,
                 sent.message_id)
        return sent

    def next_attempt_at(self, attempts_made: int, now: datetime) -> datetime | None:
        """When to try again after ``attempts_made`` (>= 1) failed SMTP attempts, or None to
        give up: ``now + policy.delay(attempts_made)`` until the policy is exhausted."""
        if self.policy.exhausted(attempts_made):
            return None
        return now + timedelta(seconds=self.policy.delay(attempts_made))

    def _fail(self, store: NoticeStore, sink: EventSink, notice: Notice, *, reason: str,
              now: datetime) -> Notice:
        failed = replace(notice, status=NoticeStatus.FAILED, last_error=reason,
                         version=notice.version + 1)
        store.save(failed)
        announce(sink, reply_for(failed, reason=reason, now=now))
        log.warning("notice of case %s failed: %s", failed.case_id, reason)
        return failed
