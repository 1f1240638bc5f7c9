"""Errors of the notification service::

    NotificationError          root
    └── MailError              an SMTP attempt failed; ``permanent`` says whether a retry
                               can help (5xx reply, refused recipient) or not (connection
                               refused, timeout, 4xx reply: transient)
"""

from __future__ import annotations


class NotificationError(Exception):
    """Root of every error raised by the notification service."""


class MailError(NotificationError):
    """An SMTP attempt failed.

    Attributes:
        permanent: True if retrying cannot help (RFC 5321 5yz reply), False if it may (4yz,
            connection or timeout errors).
    """

    def __init__(self, message: str, *, permanent: bool):
        super().__init__(message)
        self.permanent = permanent
