"""Watch use cases (:mod:`watch.application.service`) and their ports
(:mod:`watch.application.ports`)."""

from watch.application.ports import Clock, EventSink, UnitOfWork, WatchRepository
from watch.application.service import (
    AGGREGATE_TYPE,
    SOURCE,
    WATCH_TRIGGERED,
    CaseNotWatched,
    CaseWatch,
    case_watch,
    on_case_event,
    watch_case,
    watch_case_once,
)

__all__ = ["AGGREGATE_TYPE", "SOURCE", "WATCH_TRIGGERED", "CaseNotWatched", "CaseWatch", "Clock",
           "EventSink", "UnitOfWork", "WatchRepository", "case_watch", "on_case_event",
           "watch_case", "watch_case_once"]
