"""Handler registry: dispatch of decoded events by event type (no if-chains).

Pure module (stdlib only). Usage::

    registry = HandlerRegistry()

    @registry.on("CaseSubmitted", kind=HandlerKind.PROCESS)
    def start_saga(ctx: HandlerContext, event: Envelope) -> None:
        ctx.conn.execute("insert into saga ...", (...))
        ctx.outbox.append(ctx.conn, [new_event(...)])

    registry.ignore("CaseAssigned")   # known, deliberately not handled (matters in strict mode)

    @registry.on_batch("CaseOpened", kind=HandlerKind.PROJECTION)
    def project(ctx: HandlerContext, events: Sequence[Envelope]) -> None:
        ctx.conn.cursor().executemany("insert ... on conflict ...", [row(e) for e in events])

Handler kinds:

- ``PROJECTION``  — updates a read model in the consumer's database only. Runs in LIVE and REPLAY.
- ``PROCESS``     — changes the service's own state and may append follow-up events to the
  outbox (sagas, decisions). Runs in LIVE only.
- ``SIDE_EFFECT`` — talks to the outside world (SMTP, HTTP). Runs in LIVE only; the runtime
  never runs a batch holding one of these on its fast path (each message gets its own
  savepoint and is attempted once per delivery), see ``casestream.consumer.batch``. A handler
  that only writes rows (a notice recorded for a sender worker to mail later) is ``PROCESS``.

A handler is ``fn(ctx: HandlerContext, event: Envelope) -> None``. A *batch handler*
(``on_batch``) is ``fn(ctx, events: Sequence[Envelope]) -> None``: on the runtime's fast path it
is called once per run of consecutive events of the batch that have the same handlers (so the
order of events is kept; ``ctx.positions`` gives each event's topic/partition/offset), and on the
savepoint path with a one-event list, so a failure is still pinned to its message. Handlers of
one run are called one after the other, each with the whole run: handlers that depend on each
other's effects for the same event should be a single handler. It runs inside the batch
transaction, within a savepoint of its own message; it must use ``ctx.conn`` for every database
effect so that the effect, the inbox row and the version-guard row commit or roll back together.
A handler needs no savepoint of its own (``ctx.conn.transaction()``): when it raises, the runtime
rolls its fast-path batch back and applies the messages again each in a savepoint; one of its
own costs two round trips to PostgreSQL per event (``SAVEPOINT``, ``RELEASE``: each a pipeline
sync on the fast path).
A handler may be an ``async def`` coroutine function (an HTTP call with an async client, say).
The runtime awaits it on an event loop of the applying thread; with
``ConsumerSettings(key_concurrency=N)``, on the consumer's one handler loop
(``casestream.consumer.handlerloop``), where the fast path runs the per-event coroutine
handlers of every running unit concurrently, up to N calls at once over different aggregates,
each aggregate's events one after the other in offset order (``casestream.consumer.batch_fast``). Its
database effects still go through ``ctx.conn`` (a plain, blocking psycopg connection): keep
them between awaits, never across one, and short (a statement whose result is read blocks the
loop, and with it every unit's calls, for its round trip). The savepoint path, batch handlers and replay await
one call at a time.
To steer the runtime it raises :class:`casestream.errors.RetryableError` (transient, retried with
backoff, bounded) or :class:`casestream.errors.PoisonMessageError` (dead-lettered at once); any
other exception is treated as retryable-bounded (then dead-lettered).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from casestream.handlers.processing import ProcessingMode

if TYPE_CHECKING:  # pragma: no cover - typing only
    from casestream.events.envelope import Envelope


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

    Satisfied by ``casestream.outbox.writer.OutboxWriter``: ``append(conn, envelopes)`` inserts the
    encoded events into the outbox table using ``conn`` (no commit).
    """

    def append(self, conn: Any, events: Sequence[Envelope]) -> Any: ...


class DiscardingOutbox:
    """Outbox used in REPLAY mode and when a consumer has no outbox: drops and counts appends."""

    __slots__ = ("discarded",)

    def __init__(self) -> None:
        self.discarded = 0

    def append(self, conn: Any, events: Sequence[Envelope]) -> None:
        """Drop ``events`` (REPLAY must not emit commands); count them."""
        self.discarded += len(events)


@dataclass(frozen=True, slots=True, kw_only=True)
class HandlerContext:
    """What a handler gets besides the event.

    Attributes:
        conn: the psycopg connection, inside the batch transaction and the message's savepoint.
        outbox: appends follow-up events in the same transaction (``append(conn, events)``).
        mode: LIVE or REPLAY.
        consumer: the consumer name (= Kafka group id = inbox consumer), e.g. ``"billing.invoices"``.
        topic, partition, offset: where the message came from (for logging / audit columns);
            for a batch handler, the first event's.
        positions: for a batch handler, (topic, partition, offset) of each event, in order.
        cursor: a psycopg cursor on ``conn`` (property, made on first use).
    """

    conn: Any
    outbox: OutboxAppender
    mode: ProcessingMode
    consumer: str
    topic: str = ""
    partition: int = -1
    offset: int = -1
    positions: tuple[tuple[str, int, int], ...] = ()
    #: ``shared(conn)`` -> the cursor the handlers of this call share; None: one of its own
    shared_cursor: Callable[[Any], Any] | None = field(default=None, repr=False, compare=False)
    _cursor: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def cursor(self) -> Any:
        """A cursor on ``conn`` for the handler's statements: ``ctx.cursor.execute(sql, params)``.

        Cheaper than ``conn.execute``, which makes a cursor per call (in pipeline mode ~20 µs
        of client CPU per statement, about half of a one-upsert handler's cost). Handlers
        called one after the other on a connection share one cursor over their batches (per
        worker thread and connection; ``casestream.handlers.cursors``), so: read a
        statement's rows (``fetchone``/``fetchall``) before the next statement on it, do not
        close it, and do not change its settings (``row_factory``, ``adapters``, ``format``):
        make a cursor of your own for that (``ctx.conn.cursor(row_factory=...)``), or to read
        rows while sending other statements. Calls awaited concurrently (coroutine handlers
        of a key-parallel consumer) get a cursor each."""
        cur = self._cursor
        if cur is None:
            cur = (self.shared_cursor(self.conn) if self.shared_cursor is not None
                   else self.conn.cursor())
            object.__setattr__(self, "_cursor", cur)
        return cur


Handler = Callable[[HandlerContext, "Envelope"], "None | Awaitable[None]"]
BatchHandler = Callable[[HandlerContext, Sequence["Envelope"]], "None | Awaitable[None]"]


@dataclass(frozen=True, slots=True)
class RegisteredHandler:
    """One registration: the function, its kind, the event type it handles, batch or not."""

    event_type: str
    kind: HandlerKind
    fn: Callable[..., Any]
    batch: bool = False
    #: True for an ``async def`` handler: a call returns a coroutine the caller awaits
    awaits: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "awaits", inspect.iscoroutinefunction(self.fn))

    def call(self, ctx: HandlerContext, event: Envelope) -> Any:
        """Call the handler for one event (a batch handler gets a one-event list); returns
        what it returns (a coroutine for an ``async def`` handler)."""
        if self.batch:
            return self.fn(ctx, (event,))
        return self.fn(ctx, event)

    @property
    def name(self) -> str:
        """Qualified function name, for logs and DLQ headers."""
        return getattr(self.fn, "__qualname__", repr(self.fn))


@dataclass(slots=True)
class HandlerRegistry:
    """Event type -> ordered handlers. Several handlers per type run in registration order."""

    _by_type: dict[str, list[RegisteredHandler]] = field(default_factory=dict)
    _ignored: set[str] = field(default_factory=set)
    _cache: dict[tuple[str, ProcessingMode], tuple[RegisteredHandler, ...]] = field(
        default_factory=dict)
    _side_effects: dict[tuple[str, ProcessingMode], bool] = field(default_factory=dict)

    def on(self, event_type: str, *, kind: HandlerKind) -> Callable[[Handler], Handler]:
        """Decorator registering ``fn`` for ``event_type``; returns ``fn`` unchanged.

        Raises:
            ValueError: ``event_type`` is empty or ``kind`` is not a HandlerKind.
        """
        self._check(event_type, kind)

        def register(fn: Handler) -> Handler:
            self._by_type.setdefault(event_type, []).append(RegisteredHandler(event_type, kind, fn))
            self._cache.clear()
            self._side_effects.clear()
            return fn

        return register

    def add(self, event_type: str, fn: Handler, *, kind: HandlerKind) -> None:
        """Non-decorator form of :meth:`on`."""
        self.on(event_type, kind=kind)(fn)

    def on_batch(self, event_type: str, *,
                 kind: HandlerKind) -> Callable[[BatchHandler], BatchHandler]:
        """Decorator registering a batch handler ``fn(ctx, events)`` for ``event_type``.

        Raises:
            ValueError: ``event_type`` is empty, ``kind`` is not a HandlerKind, or ``kind`` is
                ``SIDE_EFFECT`` (side effects are applied one message at a time).
        """
        self._check(event_type, kind)
        if kind is HandlerKind.SIDE_EFFECT:
            raise ValueError("SIDE_EFFECT handlers cannot be batch handlers")

        def register(fn: BatchHandler) -> BatchHandler:
            self._by_type.setdefault(event_type, []).append(
                RegisteredHandler(event_type, kind, fn, batch=True))
            self._cache.clear()
            self._side_effects.clear()
            return fn

        return register

    def add_batch(self, event_type: str, fn: BatchHandler, *, kind: HandlerKind) -> None:
        """Non-decorator form of :meth:`on_batch`."""
        self.on_batch(event_type, kind=kind)(fn)

    @staticmethod
    def _check(event_type: str, kind: HandlerKind) -> None:
        if not event_type:
            raise ValueError("event_type must be a non-empty string")
        if not isinstance(kind, HandlerKind):
            raise ValueError(f"kind must be a HandlerKind, got {kind!r}")

    def ignore(self, *event_types: str) -> None:
        """Declare event types as known but deliberately unhandled (not dead-lettered in strict mode)."""
        self._ignored.update(event_types)

    def handlers_for(self, event_type: str, mode: ProcessingMode) -> tuple[RegisteredHandler, ...]:
        """The handlers to run for ``event_type`` in ``mode``, in registration order."""
        key = (event_type, mode)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = tuple(
                h for h in self._by_type.get(event_type, ()) if h.kind.runs_in(mode))
        return hit

    def awaits(self, mode: ProcessingMode) -> bool:
        """True if a coroutine (``async def``) handler the fast path may run (``PROJECTION``
        or ``PROCESS``) runs in ``mode``."""
        return any(h.awaits and h.kind is not HandlerKind.SIDE_EFFECT and h.kind.runs_in(mode)
                   for hs in self._by_type.values() for h in hs)

    def knows(self, event_type: str) -> bool:
        """True if ``event_type`` has a handler (any kind) or was declared with :meth:`ignore`."""
        return event_type in self._by_type or event_type in self._ignored

    def has_side_effects(self, event_type: str, mode: ProcessingMode) -> bool:
        """True if a ``SIDE_EFFECT`` handler would run for ``event_type`` in ``mode``."""
        key = (event_type, mode)
        hit = self._side_effects.get(key)
        if hit is None:
            hit = self._side_effects[key] = any(
                h.kind is HandlerKind.SIDE_EFFECT for h in self.handlers_for(event_type, mode))
        return hit

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
