"""Parse ``--from`` / ``--to`` of ``casestream replay`` (pure, stdlib only).

``--from``:
    ``earliest`` (default)           every partition from its low watermark;
    an ISO-8601 time                 per partition, the first offset whose Kafka timestamp
                                     (= published_at) is >= the time (``offsets_for_times``);
    ``topic:partition:offset,...``   explicit next offsets; partitions not listed start at
                                     earliest.
``--to``:
    ``now`` (default)                read until caught up, then swap and hand over;
    an ISO-8601 time                 stop before the first message with timestamp > time;
                                     the shadow tables are left built, not swapped (a
                                     point-in-time rebuild cannot hand over to live).

A time without offset is taken as UTC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from casestream.replay.errors import ReplayConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class StartSpec:
    """Where a replay starts. Exactly one of: earliest, ``at`` (time), ``offsets``."""

    at: datetime | None = None
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def earliest(self) -> bool:
        """True if every partition starts at its low watermark."""
        return self.at is None and not self.offsets

    def text(self) -> str:
        """Canonical text (stored with the checkpoint to tell a resume from a new run)."""
        if self.at is not None:
            return self.at.isoformat()
        if self.offsets:
            return ",".join(f"{t}:{p}:{o}" for (t, p), o in sorted(self.offsets.items()))
        return "earliest"


@dataclass(frozen=True, slots=True, kw_only=True)
class EndSpec:
    """Where a replay ends: ``until`` None = now (caught up, then swap)."""

    until: datetime | None = None

    @property
    def now(self) -> bool:
        """True if the replay runs until caught up and hands over to live."""
        return self.until is None

    def text(self) -> str:
        """Canonical text."""
        return "now" if self.until is None else self.until.isoformat()


def parse_time(text: str) -> datetime:
    """ISO-8601 (``2026-11-30T06:00:00Z``, ``2026-11-30``) → aware datetime (UTC if naive).

    Raises:
        ReplayConfigError: not an ISO-8601 time.
    """
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(raw)
    except ValueError as e:
        raise ReplayConfigError(f"not an ISO-8601 time: {text!r}") from e
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def parse_from(text: str | None, topics: tuple[str, ...] = ()) -> StartSpec:
    """Parse ``--from`` (see module docstring); ``topics`` (if given) bounds explicit offsets.

    Raises:
        ReplayConfigError: malformed value, negative offset/partition, unknown topic.
    """
    if text is None or text.strip().lower() in ("", "earliest"):
        return StartSpec()
    raw = text.strip()
    if ":" in raw and not _looks_like_time(raw):
        offsets: dict[tuple[str, int], int] = {}
        for part in raw.split(","):
            pieces = part.strip().rsplit(":", 2)
            if len(pieces) != 3:
                raise ReplayConfigError(f"--from: expected topic:partition:offset, got {part!r}")
            topic, p, o = pieces
            try:
                partition, offset = int(p), int(o)
            except ValueError as e:
                raise ReplayConfigError(f"--from: partition and offset must be integers: {part!r}") from e
            if partition < 0 or offset < 0:
                raise ReplayConfigError(f"--from: negative partition/offset in {part!r}")
            if topics and topic not in topics:
                raise ReplayConfigError(f"--from: topic {topic!r} is not read by this projection "
                                        f"({', '.join(topics)})")
            offsets[(topic, partition)] = offset
        return StartSpec(offsets=offsets)
    try:
        return StartSpec(at=parse_time(raw))
    except ReplayConfigError as e:
        raise ReplayConfigError(f"--from: {e} (earliest | ISO-8601 time, UTC if no zone | "
                                "topic:partition:offset,...)") from None


def parse_to(text: str | None) -> EndSpec:
    """Parse ``--to`` (``now`` or an ISO-8601 time). Raises ReplayConfigError."""
    if text is None or text.strip().lower() in ("", "now"):
        return EndSpec()
    try:
        return EndSpec(until=parse_time(text))
    except ReplayConfigError as e:
        raise ReplayConfigError(f"--to: {e} (now | ISO-8601 time, UTC if no zone)") from None


def _looks_like_time(raw: str) -> bool:
    return len(raw) >= 10 and raw[:4].isdigit() and raw[4] == "-" and raw[7] == "-"
