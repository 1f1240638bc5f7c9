"""Contract test bodies for casestream's ports, run against every adapter of a port.

One body per behaviour, each a function of a *backend* (what opens the adapter and reads
back what it did); a test module runs every body of a list on its adapter, e.g.::

    @pytest.mark.parametrize("body", REGISTRY_CONTRACT, ids=lambda f: f.__name__)
    def test_my_registry(body):
        body(MyRegistryBackend())

casestream runs them on its in-memory adapters (unit tests) and on the real ones (Kafka,
PostgreSQL, the registry: integration tests), so the in-memory test kit behaves as
production does; a team runs them on an adapter of its own. A body raises AssertionError
(or the adapter's unexpected error) when the adapter breaks the contract. No pytest import:
the bodies run under any runner.

Lists: :data:`REGISTRY_CONTRACT` (:class:`casestream.events.SchemaRegistry`),
:data:`DEAD_LETTER_CONTRACT` (:class:`casestream.consumer.DeadLetterSink`),
:data:`OUTBOX_SINK_CONTRACT` (an ``EventSink``: :class:`casestream.outbox.OutboxSink`,
:class:`casestream.outbox.MemorySink`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

from casestream.consumer import DeadLetter, DeadLetterSink, Record
from casestream.errors import UnknownSchemaError
from casestream.events import Envelope, SchemaRegistry

__all__ = ["DEAD_LETTER_CONTRACT", "OUTBOX_SINK_CONTRACT", "REGISTRY_CONTRACT", "DeadLetterBackend",
           "OutboxSinkBackend", "RegistryBackend", "raises"]


@contextmanager
def raises(error: type[BaseException]) -> Iterator[None]:
    """The block must raise ``error`` (a subclass counts); AssertionError otherwise."""
    try:
        yield
    except error:
        return
    raise AssertionError(f"expected {error.__name__}, nothing was raised")


# ---------------------------------------------------------------- schema registry

class RegistryBackend(Protocol):
    """``registry``: the adapter under test; ``subject(name)``: a subject name no other test
    uses (a real registry is shared); ``same_schema(a, b)``: equal as Avro schemas (a real
    registry may normalise what it stores)."""

    registry: SchemaRegistry

    def subject(self, name: str) -> str: ...

    def same_schema(self, a: Any, b: Any) -> bool: ...


def _record(name: str, *fields: str) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "contract",
            "fields": [{"name": f, "type": ["null", "string"], "default": None} for f in fields]}


def registering_is_idempotent_and_looked_up(backend: RegistryBackend) -> None:
    reg, subject = backend.registry, backend.subject("Registered-value")
    schema = _record("Registered", "a")
    with raises(UnknownSchemaError):
        reg.lookup(subject, schema)
    schema_id = reg.register(subject, schema)
    assert reg.register(subject, schema) == schema_id
    assert [v.schema_id for v in reg.versions(subject)] == [schema_id], "registering again adds no version"
    assert reg.lookup(subject, schema) == schema_id
    assert backend.same_schema(reg.get_schema(schema_id), schema)
    assert subject in reg.subjects()


def versions_ascend_and_an_unknown_subject_has_none(backend: RegistryBackend) -> None:
    reg, subject = backend.registry, backend.subject("Versioned-value")
    assert reg.versions(subject) == []
    first = reg.register(subject, _record("Versioned", "a"))
    second = reg.register(subject, _record("Versioned", "a", "b"))
    assert first != second
    versions = reg.versions(subject)
    assert [(v.subject, v.version, v.schema_id) for v in versions] == [
        (subject, 1, first), (subject, 2, second)]
    assert backend.same_schema(versions[1].schema, _record("Versioned", "a", "b"))


def a_schema_of_another_subject_is_not_looked_up(backend: RegistryBackend) -> None:
    reg = backend.registry
    mine, other = backend.subject("Mine-value"), backend.subject("Other-value")
    schema = _record("Mine", "a")
    reg.register(mine, schema)
    with raises(UnknownSchemaError):
        reg.lookup(other, schema)


def an_unknown_schema_id_is_unknown(backend: RegistryBackend) -> None:
    with raises(UnknownSchemaError):
        backend.registry.get_schema(2_000_000_000)


def compatibility_is_per_subject(backend: RegistryBackend) -> None:
    """Before a level is set a subject answers None or the registry's default (Apicurio's
    ccompat API answers its global ``BACKWARD``); setting one subject's changes no other."""
    reg = backend.registry
    subject, other = backend.subject("Compat-value"), backend.subject("Plain-value")
    reg.register(subject, _record("Compat", "a"))
    reg.register(other, _record("Plain", "a"))
    default = reg.get_compatibility(other)
    assert default in (None, "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                       "FULL", "FULL_TRANSITIVE", "NONE")
    reg.set_compatibility(subject, "full_transitive")
    assert reg.get_compatibility(subject) == "FULL_TRANSITIVE"
    assert reg.get_compatibility(other) == default


REGISTRY_CONTRACT: list[Callable[[RegistryBackend], None]] = [
    registering_is_idempotent_and_looked_up, versions_ascend_and_an_unknown_subject_has_none,
    a_schema_of_another_subject_is_not_looked_up, an_unknown_schema_id_is_unknown,
    compatibility_is_per_subject]
"""Every :class:`~casestream.events.SchemaRegistry` body."""


# ---------------------------------------------------------------- dead-letter sink

class DeadLetterBackend(Protocol):
    """``sink()``: a fresh sink (its own topic); ``topic``: the topic the dead letters' source
    records name; ``delivered()``: the records the sink made durable, in order (a real sink's
    topic read back; key, value and the source's headers as sent)."""

    topic: str

    def sink(self) -> DeadLetterSink: ...

    def delivered(self) -> list[Record]: ...


def dead_letter(topic: str, offset: int, *, value: bytes | None = None,
                event_id: str | None = None) -> DeadLetter:
    """A dead letter of record ``topic[0]@offset`` (headers ``id``, ``type`` when ``event_id``)."""
    headers = (("id", event_id.encode()), ("type", b"ContractTested")) if event_id else ()
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    record = Record(topic=topic, partition=0, offset=offset, key=f"k-{offset}".encode(),
                    value=value if value is not None else f"v-{offset}".encode(),
                    headers=headers, timestamp_ms=1_772_366_400_000 + offset)
    return DeadLetter(record=record, error_class="permanent", reason="contract",
                      message=f"failed at {offset}", attempts=1, first_failure=at,
                      last_failure=at, event_id=event_id,
                      event_type="ContractTested" if event_id else None)


def sent_dead_letters_are_delivered_in_order_unchanged(backend: DeadLetterBackend) -> None:
    sink = backend.sink()
    sent = [dead_letter(backend.topic, n, event_id=f"e-{n}") for n in range(3)]
    for dl in sent:
        sink.send(dl)
    sink.flush()
    got = backend.delivered()
    assert [(r.key, r.value, r.header("id")) for r in got] == [
        (dl.record.key, dl.record.value, dl.event_id) for dl in sent]


def an_undecodable_record_is_kept_byte_for_byte(backend: DeadLetterBackend) -> None:
    sink = backend.sink()
    raw = bytes(range(256))
    sink.send(dead_letter(backend.topic, 7, value=raw))
    sink.flush()
    got = backend.delivered()
    assert [(r.key, r.value, r.header("id")) for r in got] == [(b"k-7", raw, None)]


def flushing_with_nothing_sent_delivers_nothing(backend: DeadLetterBackend) -> None:
    sink = backend.sink()
    sink.flush()
    sink.flush()
    assert backend.delivered() == []


DEAD_LETTER_CONTRACT: list[Callable[[DeadLetterBackend], None]] = [
    sent_dead_letters_are_delivered_in_order_unchanged, an_undecodable_record_is_kept_byte_for_byte,
    flushing_with_nothing_sent_delivers_nothing]
"""Every :class:`~casestream.consumer.DeadLetterSink` body."""


# ---------------------------------------------------------------- outbox sink

class EventSink(Protocol):
    def append(self, events: Sequence[Envelope]) -> None: ...


class OutboxSinkBackend(Protocol):
    """``transaction()``: a unit of work with the sink bound to it (committed on a clean exit,
    rolled back when the block raises); ``stored()``: the events committed, in append order;
    ``event(aggregate_id, version)``: a new event its codec can encode (a type of its catalog)."""

    def transaction(self) -> AbstractContextManager[EventSink]: ...

    def stored(self) -> list[Envelope]: ...

    def event(self, aggregate_id: str, version: int) -> Envelope: ...


def _facts(events: Sequence[Envelope]) -> list[tuple[str, str, int, str, dict[str, Any]]]:
    return [(e.event_id, e.aggregate_id, e.aggregate_version, e.correlation_id, dict(e.payload))
            for e in events]


def appended_events_commit_in_order(backend: OutboxSinkBackend) -> None:
    first = [backend.event("a-1", 1), backend.event("a-1", 2)]
    second = [backend.event("a-2", 1)]
    with backend.transaction() as sink:
        sink.append(first)
        sink.append([])
    with backend.transaction() as sink:
        sink.append(second)
    assert _facts(backend.stored()) == _facts(first + second)


def a_rolled_back_unit_of_work_appends_nothing(backend: OutboxSinkBackend) -> None:
    kept = [backend.event("a-1", 1)]
    with backend.transaction() as sink:
        sink.append(kept)
    try:
        with backend.transaction() as sink:
            sink.append([backend.event("a-1", 2)])
            raise RuntimeError("the use case failed after appending")
    except RuntimeError:
        pass
    assert _facts(backend.stored()) == _facts(kept)


OUTBOX_SINK_CONTRACT: list[Callable[[OutboxSinkBackend], None]] = [
    appended_events_commit_in_order, a_rolled_back_unit_of_work_appends_nothing]
"""Every ``EventSink`` body (the sink a use case appends its events to)."""
