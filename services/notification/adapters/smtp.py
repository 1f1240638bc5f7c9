"""SMTP mailer (stdlib ``smtplib``): one connection per notice, errors classified.

Classification (RFC 5321 §4.2.1 reply codes): a ``5yz`` reply (permanent negative
completion: recipient or sender refused, message rejected) -> ``MailError(permanent=True)``;
a ``4yz`` reply, a refused or dropped connection, or a timeout -> ``MailError(permanent=False)``
(the sender retries under its bounded policy).
"""

from __future__ import annotations

import smtplib
from email.message import EmailMessage

from services.notification.domain.errors import MailError


class SmtpMailer:
    """:class:`~services.notification.application.ports.Mailer` over plain SMTP.

    Args:
        host, port: the SMTP server (local sink: 127.0.0.1:12525).
        timeout_s: socket timeout per operation, seconds.
    """

    def __init__(self, host: str, port: int, *, timeout_s: float = 10.0):
        self.host = host
        self.port = port
        self.timeout_s = timeout_s

    def send(self, message: EmailMessage) -> None:
        """Send ``message``; raises MailError (see the module docstring)."""
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
                refused = smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as e:
            codes = [code for code, _ in e.recipients.values()]
            raise MailError(f"recipients refused: {e.recipients}",
                            permanent=all(c >= 500 for c in codes)) from e
        except smtplib.SMTPResponseException as e:  # sender refused, data error, ...
            raise MailError(f"SMTP {e.smtp_code}: {e.smtp_error!r}",
                            permanent=e.smtp_code >= 500) from e
        except (smtplib.SMTPException, OSError) as e:  # disconnects, refused, timeouts
            raise MailError(f"SMTP {self.host}:{self.port} unavailable: {e!r}",
                            permanent=False) from e
        if refused:  # some (not all) recipients refused; a notice has exactly one
            raise MailError(f"recipients refused: {refused}", permanent=True)

    def check(self) -> None:
        """Readiness: connect and say NOOP. Raises OSError/SMTPException when down."""
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as smtp:
            smtp.noop()
