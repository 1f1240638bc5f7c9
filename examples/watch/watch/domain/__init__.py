"""The watch domain (pure: no I/O, no casestream): what a case looks like to a watcher, and
when a watch triggers.

Public names: :class:`CaseView` and :func:`apply_case_event` (the projection rule),
:class:`Watch` and :func:`trigger_for` (the trigger rule), :data:`CASE_STATES`,
:data:`TRIGGERS`, :func:`watch_id`, :func:`is_final`.
"""

from watch.domain.model import (
    CASE_STATES,
    TRIGGERS,
    CaseView,
    Trigger,
    Watch,
    apply_case_event,
    is_final,
    trigger_for,
    watch_id,
)

__all__ = ["CASE_STATES", "TRIGGERS", "CaseView", "Trigger", "Watch", "apply_case_event",
           "is_final", "trigger_for", "watch_id"]
