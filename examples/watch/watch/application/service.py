"""Use cases of the watch service.

HTTP: :func:`watch_case_once` (PUT, under an optional ``Idempotency-Key``: the platform's
``casestream.http.Idempotency``), :func:`case_watch` (GET). Consumer ``watch.triggers``:
:func:`on_case_event` turns a ``CaseClosed`` / ``CaseReturned`` of a watched case into one
``WatchTriggered`` event per watch, appended in the consumer's transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from casestream.events import Envelope, new_event
from casestream.http import Idempotency, IdempotentRequest, StoredResponse
from watch.application.ports import Clock, EventSink, UnitOfWork, WatchRepository
from watch.domain import CaseView, Watch, trigger_for

#: What the service writes into its events' ``source`` and (for automatic steps) ``actor_id``.
SOURCE = "watch"
#: The event this service publishes (subject ``acme.watch.WatchTriggered``).
WATCH_TRIGGERED = "WatchTriggered"
AGGREGATE_TYPE = "watch"


class CaseNotWatched(LookupError):
    """Nothing is known about the case in this tenant: no projected case and no watch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseWatch:
    """What ``GET /watch/cases/{id}`` answers: the projected case (None until its first event
    arrived) and who watches it (sorted)."""

    case_id: str
    case: CaseView | None
    watchers: tuple[str, ...]


def watch_case(uow: UnitOfWork, clock: Clock, *, tenant_id: str, case_id: str,
               watcher_id: str) -> tuple[Watch, bool]:
    """``watcher_id`` watches ``case_id`` (idempotent); returns the watch and whether it is
    new. The case need not be projected yet: events are eventually consistent."""
    with uow() as repo:
        return repo.add_watch(Watch(case_id=case_id, tenant_id=tenant_id,
                                    watcher_id=watcher_id, created_at=clock.now()))


def watch_case_once(uow: UnitOfWork, clock: Clock, keys: Idempotency,
                    claim: IdempotentRequest | None, render: Callable[[Watch, bool], StoredResponse],
                    *, tenant_id: str, case_id: str, watcher_id: str) -> tuple[StoredResponse, bool]:
    """:func:`watch_case` under an ``Idempotency-Key`` (``claim``; None: no key): the answer
    ``render(watch, created)`` gives is stored in the watch's own transaction and replayed
    for the key (second value True).

    Raises:
        casestream.http.RequestInFlight, casestream.http.IdempotencyConflict: 409 answers.
    """
    with uow() as repo:
        stored = keys.begin(repo.idempotency, claim)
        if stored is not None:
            return stored, True
        watch, created = repo.add_watch(Watch(case_id=case_id, tenant_id=tenant_id,
                                              watcher_id=watcher_id, created_at=clock.now()))
        return keys.complete(repo.idempotency, claim, render(watch, created)), False


def case_watch(uow: UnitOfWork, *, tenant_id: str, case_id: str) -> CaseWatch:
    """The case and its watchers.

    Raises:
        CaseNotWatched: neither a projected case nor a watch in ``tenant_id``.
    """
    with uow() as repo:
        case = repo.case(tenant_id, case_id)
        watchers = tuple(sorted(w.watcher_id for w in repo.watches_of(tenant_id, case_id)))
    if case is None and not watchers:
        raise CaseNotWatched(case_id)
    return CaseWatch(case_id=case_id, case=case, watchers=watchers)


def on_case_event(repo: WatchRepository, sink: EventSink, event: Envelope) -> list[Envelope]:
    """Fire every watch of the event's case that ``event`` triggers; returns the events
    appended to ``sink`` (each watch's version bumped in ``repo``)."""
    emitted: list[Envelope] = []
    for watch in repo.watches_of(event.tenant_id, event.aggregate_id):
        fired = trigger_for(watch, event_type=event.event_type, payload=event.payload)
        if fired is None:
            continue
        repo.save_watch(fired.watch)
        emitted.append(new_event(
            event_type=WATCH_TRIGGERED, aggregate_type=AGGREGATE_TYPE,
            aggregate_id=fired.watch.id, aggregate_version=fired.watch.version,
            payload=fired.payload, tenant_id=event.tenant_id, source=SOURCE, actor_id=SOURCE,
            correlation_id=event.correlation_id, causation_id=event.event_id,
            traceparent=event.traceparent))
    sink.append(emitted)
    return emitted
