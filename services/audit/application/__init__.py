"""Audit application layer: record and read use cases, ports, views."""

from services.audit.application.service import case_timeline, entry_from, record_event
from services.audit.application.views import CaseTimeline, TimelineEvent

__all__ = ["CaseTimeline", "TimelineEvent", "case_timeline", "entry_from", "record_event"]
