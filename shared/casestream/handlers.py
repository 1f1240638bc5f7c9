"""Handler registry: dispatch of decoded events by event type (no if-chains).

Pure module (stdlib only). Usage::

    registry = HandlerRegistry()

    @registry.on("CaseSubmitted", kind=HandlerKind.PROCESS)
    def start_saga(ctx: HandlerContext, event: Envelope) -> None:
        ctx.conn.execute("insert into saga ...", (...))
        ctx.outbox.append(ctx.conn, [new_event(...)])

    registry.ignore("CaseAssigned")   # known, deliberately not handled (matters in strict mode)

Handler kinds (rule source: DESIGN §6):

- ``PROJECTION``  — updates a read model in the consumer's database only. Runs in LIVE and REPLAY.
- ``PROCESS``     — changes the service's own state and may append follow-up events to the
  outbox (sagas, decisions). Runs in LIVE only.
- ``SIDE_EFFECT`` — talks to the outside world (SMTP, HTTP). Runs in LIVE only; the runtime
  never runs a batch holding one of these on its fast path (each message gets its own
  savepoint and is attempted once per delivery), see ``casestream.consumer.batch``.

A handler is ``fn(ctx: HandlerContext, event: Envelope) -> None``. It runs inside the batch
transaction, within a savepoint of its own message; it must use ``ctx.conn`` for every database
effect so that the effect, the inbox row and the version-guard row commit or roll back together.
To steer the runtime it raises :class:`casestream.errors.RetryableError` (transient, retried with
backoff, bounded) or :class:`casestream.errors.PoisonMessageError` (dead-lettered at once); any
other exception is treated as retryable-bounded (then dead-lettered).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from casestream.processing import ProcessingMode

if TYPE_CHECKING:  # pragma: no cover - typing only
    from casestream.envelope import Envelope


class HandlerKind(enum.Enum):
    """What a handler does; decides whether it runs in replay and on the batch fast path."""

    PROJECTION = "projection"
    PROCESS = "process"
    SIDE_EFFECT = "side_effect"

    def runs_in(self, mode: ProcessingMode) -> bool:
        """True if handlers of this kind run in ``mode`` (REPLAY runs projections only)."""
        return mode is ProcessingMode.LIVE or self is HandlerKind.PROJECTION


class OutboxAppender(Protocol):
    """Port for appending follow-up events in the caller's transaction.

    Satisfied by ``casestream.outbox.OutboxWriter``: ``append(conn, envelopes)`` inserts the
    encoded events into the outbox table using ``conn`` (no commit).
    """

    def append(self, conn: Any, events: Sequence[Envelope]) -> Any: ...


class DiscardingOutbox:
    """Outbox used in REPLAY mode and when a consumer has no outbox: drops and counts appends."""

    __slots__ = ("discarded",)

    def __init__(self) -> None:
        self.discarded = 0

    def append(self, conn: Any, events: Sequence[Envelope]) -> None:
        """Drop ``events`` (REPLAY must not emit commands, DESIGN §6); count them."""
        self.discarded += len(events)


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerContext:
    """What a handler gets besides the event.

    Attributes:
        conn: the psycopg connection, inside the batch transaction and the message's savepoint.
        outbox: appends follow-up events in the same transaction (``append(conn, events)``).
        mode: LIVE or REPLAY.
        consumer: the consumer name (= Kafka group id = inbox consumer), e.g. ``"audit.journal"``.
        topic, partition, offset: where the message came from (for logging / audit columns).
    """

    conn: Any
    outbox: OutboxAppender
    mode: ProcessingMode
    consumer: str
    topic: str = ""
    partition: int = -1
    offset: int = -1


Handler = Callable[[HandlerContext, "Envelope"], None]


@dataclass(frozen=True, slots=True)
class RegisteredHandler:
    """One registration: the function, its kind and the event type it handles."""

    event_type: str
    kind: HandlerKind
    fn: Handler

    @property
    def name(self) -> str:
        """Qualified function name, for logs and DLQ headers."""
        return getattr(self.fn, "__qualname__", repr(self.fn))


@dataclass(slots=True)
class HandlerRegistry:
    """Event type -> ordered handlers. Several handlers per type run in registration order."""

    _by_type: dict[str, list[RegisteredHandler]] = field(default_factory=dict)
    _ignored: set[str] = field(default_factory=set)

    def on(self, event_type: str, *, kind: HandlerKind) -> Callable[[Handler], Handler]:
        """Decorator registering ``fn`` for ``event_type``; returns ``fn`` unchanged.

        Raises:
            ValueError: ``event_type`` is empty or ``kind`` is not a HandlerKind.
        """
        if not event_type:
            raise ValueError("event_type must be a non-empty string")
        if not isinstance(kind, HandlerKind):
            raise ValueError(f"kind must be a HandlerKind, got {kind!r}")

        def register(fn: Handler) -> Handler:
            self._by_type.setdefault(event_type, []).append(RegisteredHandler(event_type, kind, fn))
            return fn

        return register

    def add(self, event_type: str, fn: Handler, *, kind: HandlerKind) -> None:
        """Non-decorator form of :meth:`on`."""
        self.on(event_type, kind=kind)(fn)

    def ignore(self, *event_types: str) -> None:
        """Declare event types as known but deliberately unhandled (not dead-lettered in strict mode)."""
        self._ignored.update(event_types)

    def handlers_for(self, event_type: str, mode: ProcessingMode) -> tuple[RegisteredHandler, ...]:
        """The handlers to run for ``event_type`` in ``mode``, in registration order."""
        return tuple(h for h in self._by_type.get(event_type, ()) if h.kind.runs_in(mode))

    def knows(self, event_type: str) -> bool:
        """True if ``event_type`` has a handler (any kind) or was declared with :meth:`ignore`."""
        return event_type in self._by_type or event_type in self._ignored

    def has_side_effects(self, event_type: str, mode: ProcessingMode) -> bool:
        """True if a ``SIDE_EFFECT`` handler would run for ``event_type`` in ``mode``."""
        return any(h.kind is HandlerKind.SIDE_EFFECT for h in self.handlers_for(event_type, mode))

    @property
    def event_types(self) -> frozenset[str]:
        """Every event type with at least one handler."""
        return frozenset(self._by_type)

    def merge(self, others: Iterable[HandlerRegistry]) -> HandlerRegistry:
        """A new registry with this one's registrations followed by ``others``'."""
        merged = HandlerRegistry()
        for reg in (self, *others):
            for event_type, hs in reg._by_type.items():
                merged._by_type.setdefault(event_type, []).extend(hs)
            merged._ignored |= reg._ignored
        return merged
