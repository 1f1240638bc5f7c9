"""Dead letters grouped by failure: one cause, hundreds of entries, one line and one action.

Pure (no driver): works on a :class:`~casestream.operations.deadletters.DeadLetterState`.

- **Failure class** of an entry, from its ``dlq.error.reason`` (and error class) header:
  ``corrupt_bytes`` (empty, too short, bad magic byte, Avro decode, trailing bytes),
  ``unknown_schema_id`` (an id the registry does not have, or not of the catalog),
  ``schema_resolution`` (the writer's record does not resolve into the reader's),
  ``invalid_event`` (envelope/payload validation), ``upcast`` (an upcaster failed),
  ``unknown_event_type``, ``reused_event_id``, ``guard_gap`` (a missing aggregate version
  not filled in time), ``timeout`` (retries exhausted on ``TimeoutError`` or a statement
  timeout), ``handler_error`` (retries exhausted on any other exception),
  ``handler_rejected`` (a handler raised ``PoisonMessageError``), ``oversize`` (the message is
  too large for the dead-letter topic: a reference entry), ``other``.
- **Retryable**: whether re-driving as is can succeed. ``guard_gap``, ``timeout``,
  ``handler_error``, ``oversize`` and ``other`` can (a dependency is back, the gap filled);
  every other class fails again the same way until a fix is deployed (:data:`NON_RETRYABLE`):
  re-drive those after the deploy.
- **Fingerprint**: the first 12 hex digits of SHA-256 over (consumer, failure class,
  exception type, event type, normalised message) — the message with UUIDs, hex ids,
  numbers and quoted values replaced, so entries differing only in ids share a group
  (as Wolverine's failure fingerprints and NServiceBus ServicePulse's failed-message groups do).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from casestream.operations.deadletters import DeadLetterEntry, DeadLetterState

__all__ = ["FailureGroup", "NON_RETRYABLE", "failure_class", "failure_fingerprint", "failure_groups",
           "find_failure_group", "normalise_message", "retry_warning"]

_BY_REASON = {
    "empty": "corrupt_bytes", "empty_value": "corrupt_bytes", "too_short": "corrupt_bytes",
    "bad_magic_byte": "corrupt_bytes", "avro_decode": "corrupt_bytes",
    "trailing_bytes": "corrupt_bytes",
    "unknown_schema_id": "unknown_schema_id", "unknown_subject": "unknown_schema_id",
    "schema_resolution": "schema_resolution", "validation": "invalid_event", "upcast": "upcast",
    "unknown_event_type": "unknown_event_type", "reused_event_id": "reused_event_id",
    "version_gap": "guard_gap", "poison": "handler_rejected",
}
_TIMEOUTS = ("TimeoutError", "QueryCanceled")

NON_RETRYABLE = frozenset({"corrupt_bytes", "unknown_schema_id", "schema_resolution",
                           "invalid_event", "upcast", "unknown_event_type", "reused_event_id",
                           "handler_rejected"})
"""Failure classes a re-drive as is fails again with: re-drive them after a fix is deployed."""

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d+)?")


def failure_class(entry: DeadLetterEntry) -> str:
    """The failure class of a dead letter (module docstring)."""
    if entry.reference:
        return "oversize"
    reason = entry.reason or ""
    if reason in _BY_REASON:
        return _BY_REASON[reason]
    if reason.startswith("retries_exhausted"):
        named = f"{reason} {entry.error_class or ''}"
        return "timeout" if any(t in named for t in _TIMEOUTS) else "handler_error"
    return "other"


def normalise_message(message: str | None) -> str:
    """``message`` with UUIDs, hex ids, quoted values and numbers replaced by ``<uuid>``,
    ``<hex>``, ``<value>``, ``<n>`` (what varies between entries of one cause)."""
    text = _UUID.sub("<uuid>", message or "")
    text = _QUOTED.sub("<value>", text)
    text = _HEX.sub("<hex>", text)
    return _NUMBER.sub("<n>", text).strip()


def failure_fingerprint(consumer: str, klass: str, error_class: str | None,
                        event_type: str | None, normalised: str) -> str:
    """12 hex digits naming a failure group (module docstring)."""
    text = "\x1f".join((consumer, klass, error_class or "", event_type or "", normalised))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """Dead letters of one consumer sharing a fingerprint.

    ``first_seen``/``last_seen``: the earliest first failure and the latest last failure of
    its entries (ISO-8601 UTC strings); ``sample``: its newest entry; ``entries`` in topic order.
    """

    fingerprint: str
    consumer: str
    failure_class: str
    error_class: str | None
    event_type: str | None
    message: str
    entries: tuple[DeadLetterEntry, ...]

    @property
    def count(self) -> int:
        return len(self.entries)

    @property
    def retryable(self) -> bool:
        return self.failure_class not in NON_RETRYABLE

    @property
    def first_seen(self) -> str | None:
        seen = [e.first_failure or e.last_failure for e in self.entries]
        return min((s for s in seen if s), default=None)

    @property
    def last_seen(self) -> str | None:
        return max((e.last_failure for e in self.entries if e.last_failure), default=None)

    @property
    def sample(self) -> DeadLetterEntry:
        return self.entries[-1]

    def summary(self) -> dict[str, object]:
        """JSON-ready fields (the sample as its label and raw message)."""
        return {"consumer": self.consumer, "fingerprint": self.fingerprint,
                "failure_class": self.failure_class, "retryable": self.retryable,
                "count": self.count, "event_type": self.event_type, "error_class": self.error_class,
                "message": self.message, "first_seen": self.first_seen, "last_seen": self.last_seen,
                "sample": self.sample.label, "sample_message": self.sample.message,
                "labels": [e.label for e in self.entries]}


def failure_groups(state: DeadLetterState, *, only_open: bool = True) -> list[FailureGroup]:
    """The groups of ``state``'s entries (open ones only by default), largest first."""
    grouped: dict[str, list[DeadLetterEntry]] = {}
    keys: dict[str, tuple[str, str | None, str | None, str]] = {}
    for e in state.entries:
        if only_open and not e.open:
            continue
        klass, message = failure_class(e), normalise_message(e.message)
        fp = failure_fingerprint(state.consumer, klass, e.error_class, e.event_type, message)
        grouped.setdefault(fp, []).append(e)
        keys[fp] = (klass, e.error_class, e.event_type, message)
    groups = [FailureGroup(fp, state.consumer, *keys[fp], tuple(es)) for fp, es in grouped.items()]
    return sorted(groups, key=lambda g: (-g.count, g.last_seen or "", g.fingerprint))


def find_failure_group(state: DeadLetterState, fingerprint: str, *,
                       only_open: bool = True) -> FailureGroup | None:
    """The group of ``state`` whose fingerprint starts with ``fingerprint`` (at least 4 hex
    digits; None when none or several match)."""
    if len(fingerprint) < 4:
        return None
    found = [g for g in failure_groups(state, only_open=only_open)
             if g.fingerprint.startswith(fingerprint.lower())]
    return found[0] if len(found) == 1 else None


def retry_warning(entries: Sequence[DeadLetterEntry]) -> str | None:
    """One line warning that re-driving ``entries`` as is will fail again (some are of a
    :data:`NON_RETRYABLE` class), None when none is."""
    classes = sorted({failure_class(e) for e in entries} & NON_RETRYABLE)
    if not classes:
        return None
    n = sum(failure_class(e) in NON_RETRYABLE for e in entries)
    return (f"{n} of {len(entries)} dead letter(s) failed with a non-retryable class "
            f"({', '.join(classes)}): re-driven as is they fail again the same way; "
            "re-drive them after a fix is deployed")
