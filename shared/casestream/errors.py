"""The exception tree of the casestream common library.

Every error the library raises derives from :class:`CasestreamError`, so a caller can
catch the whole family at one boundary. Driver errors (psycopg, confluent-kafka, fastavro,
HTTP) are translated where they are caught, with ``raise ... from e``::

    CasestreamError
    ├── ConfigError                 bad or missing setting; raised at start-up
    ├── SchemaError                 a schema or catalog problem
    │   ├── UnknownSchemaError      subject, version or schema id not known
    │   ├── IncompatibleSchemaError a version breaks its subject's compatibility mode
    │   └── UpcasterChainError      an upcaster step is missing (raised at start-up)
    ├── RegistryUnavailable         the schema registry did not answer or answered garbage
    ├── ConcurrencyError            optimistic aggregate-version check failed (expected != current)
    ├── HandlerError                raised by message handlers to steer the consumer runtime
    │   ├── RetryableError          transient: retried with backoff (serialization failure,
    │   │                           deadlock, lost connection, timeout)
    │   └── PoisonMessageError      never succeeds on retry: dead-lettered at once (bad
    │                               wire format, unknown schema id, resolution or validation failure)
    └── RelayError                  the outbox relay could not publish (classified retryable or not)
"""

from __future__ import annotations


class CasestreamError(Exception):
    """Root of every error raised by the casestream common library."""


class ConfigError(CasestreamError):
    """A setting is missing or invalid; raised at start-up, names the setting."""


class SchemaError(CasestreamError):
    """A schema, catalog or upcaster problem."""


class UnknownSchemaError(SchemaError):
    """A subject, version or schema id is not known to the catalog or registry."""


class IncompatibleSchemaError(SchemaError):
    """A schema version breaks its subject's compatibility mode."""


class UpcasterChainError(SchemaError):
    """An upcaster chain has a missing step; raised at start-up, never on an old event."""


class RegistryUnavailable(CasestreamError):
    """The schema registry is unreachable, timed out, or answered something unparseable."""


class ConcurrencyError(CasestreamError):
    """Optimistic concurrency failed: the aggregate is no longer at the expected version.

    Attributes:
        aggregate_type, aggregate_id: the aggregate concerned.
        expected: the version the command was based on.
        actual: the version found (None if the aggregate does not exist).
    """

    def __init__(self, aggregate_type: str, aggregate_id: str, expected: int, actual: int | None):
        super().__init__(
            f"{aggregate_type} {aggregate_id}: expected version {expected}, found {actual}"
        )
        self.aggregate_type = aggregate_type
        self.aggregate_id = aggregate_id
        self.expected = expected
        self.actual = actual


class HandlerError(CasestreamError):
    """Raised by a message handler to tell the consumer runtime how to treat a failure."""


class RetryableError(HandlerError):
    """A transient failure: the runtime retries with exponential backoff and jitter, bounded."""


class PoisonMessageError(HandlerError):
    """A message that can never be processed: the runtime dead-letters it at once.

    Attributes:
        reason: a short machine-readable reason, e.g. ``bad_magic_byte``, ``unknown_schema_id``,
            ``schema_resolution``, ``validation``, ``version_gap``.
    """

    def __init__(self, message: str, *, reason: str = "poison"):
        super().__init__(message)
        self.reason = reason


class RelayError(CasestreamError):
    """The outbox relay could not publish a row.

    Attributes:
        retryable: True for transient broker errors (rescheduled with backoff), False for
            errors that cannot succeed (e.g. MSG_SIZE_TOO_LARGE): the row is marked failed.
    """

    def __init__(self, message: str, *, retryable: bool):
        super().__init__(message)
        self.retryable = retryable
