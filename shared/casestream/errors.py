"""The exception tree of the casestream library.

Every exception the library defines derives from :class:`CasestreamError`, so a caller can
catch the whole family at one boundary. Driver errors (psycopg, confluent-kafka, fastavro,
httpx) are translated where they are caught, with ``raise ... from e``. Classes defined in
a subpackage are named with their module; the rest live here::

    CasestreamError
    ├── ConfigError                 a setting is missing or invalid; raised at start-up
    │   ├── ProjectionConfigError   handlers.projection: a projection's declaration does not fit its tables
    │   ├── ConsumerFenced          consumer.runtime: another static member joined with this group.instance.id
    │   └── ForkedClientError       forks: a client made before os.fork() used in the forked process
    ├── SchemaError                 a schema, catalog or upcaster problem
    │   ├── UnknownSchemaError      subject, version or schema id not known
    │   ├── IncompatibleSchemaError a version breaks its subject's compatibility mode
    │   ├── UpcasterChainError      an upcaster step is missing (raised at start-up)
    │   ├── UpcastError             events.upcasting: an event upcaster broke a rule on one event
    │   ├── CatalogError            events.catalog: catalog or schema file missing or invalid
    │   ├── InvalidEventError       events.codec: an event to encode does not fit its schema
    │   └── CheckInputError         schemacheck.model: a schema check's input is unusable
    ├── EnvelopeError               events.envelope: an envelope field is invalid (a ValueError)
    ├── ConcurrencyError            optimistic aggregate-version check failed (expected != current)
    ├── HandlerError                steers message handling in the consumer runtime
    │   ├── RetryableError          transient: retried with backoff, bounded, then dead-lettered
    │   │   ├── RegistryUnavailable the schema registry did not answer or answered garbage
    │   │   │   └── RegistryAuthError the registry refused the credentials (HTTP 401/403)
    │   │   └── GuardConflict       consumer.inbox: a guard row changed under a batch
    │   └── PoisonMessageError      never succeeds on retry: dead-lettered at once (bad wire
    │                               format, unknown schema id, resolution or validation failure)
    ├── DeadLetterError             consumer.deadletters: a dead-letter topic write or read failed
    ├── ActionLogError              operations.actions: an operator action is invalid or not recorded
    ├── OutboxRowTooLarge           outbox.writer: an encoded event is larger than a message can be
    ├── OutboxDatabaseError         outbox.admin: an outbox database did not answer or a statement failed
    │   └── NoOutboxTable           outbox.admin: the database has no outbox table
    ├── CdcError                    outbox.cdc: CDC of an outbox cannot be used, or a handover step failed
    ├── ConnectError                outbox.connect: the Kafka Connect REST API refused or did not answer
    ├── AuthError                   auth.tokens: authentication or authorisation failed
    │   ├── InvalidToken            auth.tokens: no usable bearer token (HTTP 401)
    │   └── AccessDenied            auth.tokens: a required role is missing (HTTP 403)
    ├── DeadlineExceeded            http.deadline: the request's deadline passed
    ├── HttpProblem                 http.problem: a request answered with an RFC 9457 problem
    │   ├── IdempotencyConflict     http.idempotency: an Idempotency-Key reused for another request (409)
    │   └── RequestInFlight         http.idempotency: a request with the key is still in progress (409)
    ├── DependencyDown              telemetry.readiness: a dependency failed a readiness probe
    ├── ReplayError                 replay.errors: a replay could not run or finish
    │   ├── ReplayConfigError       replay.errors: bad projection, handlers or options
    │   │   └── PartialReplayRefused replay.errors: a swap over part of the history, not asked for
    │   ├── ReplayHandlerError      replay.errors: a projection handler raised
    │   └── _CatchUpTimeout         replay.engine: the locked catch-up ran out of time (internal)
    ├── StackError                  service.devstack: a local service did not start or exited
    ├── ToxiproxyError              testing.toxiproxy: the fault proxy did not start or refused a request
    ├── Busy                        console.app: every slot for an expensive console read is taken (503)
    └── _Ineligible                 consumer.batch_model: the fast path gives a batch up (internal)

The consumer runtime classifies any other exception a handler raises as retryable
(``casestream.consumer.failures``). The CLI's usage errors derive from
``click.ClickException`` (``casestream.cli.main.ConfigurationError``), which click turns
into exit status 2.
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
    """An upcaster chain has a missing, dangling or looping step; raised at start-up, never on an old event."""


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
    """A message-handling failure that tells the consumer runtime what to do: retry
    (:class:`RetryableError`) or dead-letter at once (:class:`PoisonMessageError`)."""


class RetryableError(HandlerError):
    """A transient failure: the runtime retries the message with the consumer's
    :class:`casestream.retry.RetryPolicy`, then dead-letters it when the policy is exhausted."""


class RegistryUnavailable(RetryableError):
    """The schema registry is unreachable, timed out, or answered something unparseable."""


class RegistryAuthError(RegistryUnavailable):
    """The schema registry refused the request's credentials (HTTP 401: none, wrong, expired)
    or their rights (HTTP 403). Set through the registry client properties
    (``basic.auth.user.info``, ``bearer.auth.*``)."""


class PoisonMessageError(HandlerError):
    """A message that can never be processed: the runtime dead-letters it at once.

    Attributes:
        reason: a short machine-readable reason, e.g. ``bad_magic_byte``, ``unknown_schema_id``,
            ``schema_resolution``, ``validation``, ``version_gap``.
    """

    def __init__(self, message: str, *, reason: str = "poison"):
        super().__init__(message)
        self.reason = reason
