"""Watch rules (pure).

Projection rule: a case's view is the state of its last event (``CaseOpened`` -> open,
``CaseSubmitted`` -> submitted, ``CaseClosed`` -> closed, ``CaseReturned`` -> returned), its
aggregate version and when that event occurred. An event whose aggregate version is not
above the view's changes nothing (:func:`apply_case_event`), so applying an event twice is a
no-op (the idempotency rule of a rebuildable projection).

Trigger rule: every watch of a case triggers once per ``CaseClosed`` or ``CaseReturned``
event of that case; the trigger carries the case's outcome (closed) or the reason (returned).
A watch's own version counts its triggers (1, 2, ...): it is the ``aggregate_version`` of
the ``WatchTriggered`` events of aggregate ``watch`` / :func:`watch_id`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

#: Case event type -> the case state it leaves the case in.
CASE_STATES: Mapping[str, str] = {"CaseOpened": "open", "CaseSubmitted": "submitted",
                                  "CaseClosed": "closed", "CaseReturned": "returned"}

#: Case event types that trigger a watch -> the payload field giving the trigger's detail.
TRIGGERS: Mapping[str, str] = {"CaseClosed": "outcome", "CaseReturned": "reason"}


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseView:
    """One case as the watch service sees it.

    Attributes:
        case_id, tenant_id: the case and its tenant.
        state: open, submitted, closed or returned (:data:`CASE_STATES`).
        title: from CaseOpened / CaseSubmitted ("" until one is seen).
        aggregate_version: the case's version after the last applied event (>= 1).
        updated_at: when that event occurred (UTC).
    """

    case_id: str
    tenant_id: str
    state: str
    title: str
    aggregate_version: int
    updated_at: datetime


def apply_case_event(view: CaseView | None, *, event_type: str, case_id: str, tenant_id: str,
                     aggregate_version: int, occurred_at: datetime,
                     payload: Mapping[str, Any]) -> CaseView | None:
    """The view after one case event; ``view`` unchanged (possibly None) when the event is not
    a case state change or is not newer than the view (``aggregate_version`` not above)."""
    state = CASE_STATES.get(event_type)
    if state is None or (view is not None and aggregate_version <= view.aggregate_version):
        return view
    title = str(payload.get("title") or (view.title if view is not None else ""))
    return CaseView(case_id=case_id, tenant_id=tenant_id, state=state, title=title,
                    aggregate_version=aggregate_version, updated_at=occurred_at)


def watch_id(case_id: str, watcher_id: str) -> str:
    """The aggregate id of ``watcher_id``'s watch on ``case_id``: ``<case_id>/<watcher_id>``."""
    return f"{case_id}/{watcher_id}"


def is_final(trigger: str) -> bool:
    """True if the case event ``trigger`` leaves the case unable to change (CaseClosed)."""
    return trigger == "CaseClosed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Watch:
    """``watcher_id`` follows ``case_id``.

    Attributes:
        version: how many times the watch triggered (0 for a new watch).
        created_at: when the watch was created (UTC).
    """

    case_id: str
    tenant_id: str
    watcher_id: str
    version: int = 0
    created_at: datetime

    @property
    def id(self) -> str:
        """The watch's aggregate id (:func:`watch_id`)."""
        return watch_id(self.case_id, self.watcher_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """A watch that fired: the watch after it (version bumped) and the event's payload."""

    watch: Watch
    payload: Mapping[str, Any]


def trigger_for(watch: Watch, *, event_type: str, payload: Mapping[str, Any]) -> Trigger | None:
    """The trigger of ``watch`` for one event of its case, or None if the event triggers
    nothing (see the module docstring)."""
    field = TRIGGERS.get(event_type)
    if field is None:
        return None
    fired = replace(watch, version=watch.version + 1)
    return Trigger(watch=fired, payload={
        "case_id": watch.case_id, "watcher_id": watch.watcher_id, "trigger": event_type,
        "detail": str(payload.get(field) or ""), "final": is_final(event_type)})
