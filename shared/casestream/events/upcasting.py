"""Upcasters: pure functions that lift an old stored event to what handlers read today.

Pure (stdlib only). Two kinds of step, both keyed by ``(event_type, version)``:

* **payload step** (``register`` / ``add``): ``fn(payload) -> payload`` takes the payload of
  ``version`` (a mapping; must not be mutated) and returns a new dict shaped as
  ``version + 1`` of the same event type. Pattern: pyeventsourcing's ``upcast_vN_vN+1``.
* **event step** (``register_event`` / ``add_event``): ``fn(event) -> iterable of events``
  takes the whole :class:`~casestream.events.envelope.Envelope` at ``version`` and returns
  zero, one or several envelopes, each of any event type and version it declares in
  ``produces`` (as Axon's ``EventMultiUpcaster``): drop an event, split a generic legacy
  event into typed facts, rename an event type, correct an envelope field. Build results with
  ``dataclasses.replace(event, event_type=..., event_version=..., payload=...)``.

Rules an event step obeys (checked on every event; a breach makes the message poison):

* every result keeps the stored event's ``aggregate_type``, ``aggregate_id`` and
  ``aggregate_version``: the events derived from one stored event are **one step of the
  aggregate** for the version guard (applied, deduplicated, held and dead-lettered together);
* the first result keeps the stored ``event_id``; result ``i >= 1`` gets
  :func:`derived_event_id` ``(stored id, i)`` whatever the step put there, so the ids are the
  same on every decode (live, replay, dead-letter re-drive) and the inbox deduplicates them;
* each result's ``(event_type, event_version)`` is one the step declared in ``produces``;
  results are lifted further by the chain (a result may itself be split again).

The same chain runs in live consumption, replay and dead-letter re-drive (the codec applies it
on decode), so every path yields the same events in the same order; handlers only ever see
newest shapes. :meth:`UpcasterChain.verify` checks the chain once at start-up: a missing step,
a loop, or a step producing an unknown type or version fails the service before an old event
arrives.

Errors: :class:`~casestream.errors.UpcasterChainError` (duplicate registration, missing,
dangling or looping step, at start-up); :class:`UpcastError` (a step broke a rule above while
upcasting one event; the codec turns it into a poison message).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from casestream.errors import SchemaError, UpcasterChainError
from casestream.events.envelope import Envelope

__all__ = ["EventUpcaster", "UpcastError", "Upcaster", "UpcasterChain", "VersionCatalog",
           "derived_event_id"]

Upcaster = Callable[[Mapping[str, Any]], dict[str, Any]]
EventUpcaster = Callable[[Envelope], Iterable[Envelope]]

#: Namespace of :func:`derived_event_id` (a fixed UUID: ids must never change between releases).
DERIVED_ID_NAMESPACE = uuid.UUID("6f1c2f4e-3b9a-5d2e-9a47-0c5b8e1d7a33")
#: Event steps applied to one stored event at most (deeper means a loop the verifier missed).
MAX_DEPTH = 32
_FIXED = ("aggregate_type", "aggregate_id", "aggregate_version")


class UpcastError(SchemaError):
    """An event step broke a rule while upcasting one stored event (names the step and field)."""


def derived_event_id(source_event_id: str, index: int) -> str:
    """Event id of result ``index`` (>= 1) of an event step applied to ``source_event_id``.

    UUID version 5 (RFC 9562, "UUID Version 5") of ``"<source id>#<index>"`` in a fixed
    namespace: the same inputs give the same id in every process and release.
    """
    return str(uuid.uuid5(DERIVED_ID_NAMESPACE, f"{source_event_id}#{index}"))


class VersionCatalog(Protocol):
    """What :meth:`UpcasterChain.verify` needs from a catalog (``casestream.events.catalog.Catalog`` fits)."""

    def newest_versions(self) -> Mapping[str, int]:
        """``{event_type: newest version}``."""
        ...


@dataclass(frozen=True, slots=True)
class _EventStep:
    fn: EventUpcaster
    produces: frozenset[tuple[str, int]]

    @property
    def name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))


class UpcasterChain:
    """Registry of upcasters keyed by ``(event_type, version)``.

    Example::

        chain = UpcasterChain()

        @chain.register("CaseOpened", 1)
        def case_opened_v1_v2(p): return {**p, "priority": "NORMAL"}

        @chain.register_event("CaseUpdated", 1, produces=[("CaseRetitled", 1), ("CaseReprioritized", 1)])
        def split_case_updated(e):
            if "title" in e.payload:
                yield replace(e, event_type="CaseRetitled", event_version=1, payload={"title": ...})
            ...

        chain.verify(catalog)                       # at start-up
        chain.upcast("CaseOpened", 1, payload)      # payload steps only -> (3, payload_v3)
        chain.upcast_event(envelope)                # every step -> [Envelope, ...]
    """

    __slots__ = ("_events", "_steps")

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}
        self._events: dict[tuple[str, int], _EventStep] = {}

    def register(self, event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator registering ``fn`` as the payload step ``from_version -> from_version + 1``.

        Raises UpcasterChainError if a step is already registered for that key or ``from_version < 1``.
        """

        def deco(fn: Upcaster) -> Upcaster:
            self.add(event_type, from_version, fn)
            return fn

        return deco

    def add(self, event_type: str, from_version: int, fn: Upcaster) -> None:
        """Register ``fn`` as the payload step ``(event_type, from_version) -> from_version + 1``.

        Raises UpcasterChainError on a duplicate step or ``from_version < 1``.
        """
        key = self._free(event_type, from_version)
        self._steps[key] = fn

    def register_event(self, event_type: str, version: int, *,
                       produces: Iterable[tuple[str, int]]) -> Callable[[EventUpcaster], EventUpcaster]:
        """Decorator registering ``fn(event) -> events`` as the event step of ``(event_type, version)``.

        Args:
            event_type, version: the stored events the step takes.
            produces: every ``(event_type, version)`` the step may return (checked against the
                catalog by :meth:`verify`, and on each result).

        Raises UpcasterChainError if a step is already registered for that key, ``version < 1``
        or ``produces`` is malformed.
        """

        def deco(fn: EventUpcaster) -> EventUpcaster:
            self.add_event(event_type, version, fn, produces=produces)
            return fn

        return deco

    def add_event(self, event_type: str, version: int, fn: EventUpcaster, *,
                  produces: Iterable[tuple[str, int]]) -> None:
        """Non-decorator form of :meth:`register_event`."""
        key = self._free(event_type, version)
        out: set[tuple[str, int]] = set()
        for p in produces:
            if (not isinstance(p, tuple) or len(p) != 2 or not isinstance(p[0], str) or not p[0]
                    or not isinstance(p[1], int) or isinstance(p[1], bool) or p[1] < 1):
                raise UpcasterChainError(f"{event_type} v{version}: produces entries are "
                                         f"(event_type, version >= 1) tuples, got {p!r}")
            out.add(p)
        self._events[key] = _EventStep(fn, frozenset(out))

    def _free(self, event_type: str, version: int) -> tuple[str, int]:
        if version < 1:
            raise UpcasterChainError(f"{event_type}: from_version must be >= 1, got {version}")
        key = (event_type, version)
        if key in self._steps or key in self._events:
            raise UpcasterChainError(f"{event_type}: upcaster v{version}->v{version + 1} registered twice")
        return key

    def include(self, other: UpcasterChain) -> UpcasterChain:
        """Add every step of ``other`` to this chain; returns this chain.

        Raises UpcasterChainError if a step is registered on both.
        """
        for (event_type, from_version), fn in other._steps.items():
            self.add(event_type, from_version, fn)
        for (event_type, version), step in other._events.items():
            self.add_event(event_type, version, step.fn, produces=step.produces)
        return self

    def steps(self) -> list[tuple[str, int]]:
        """Registered ``(event_type, version)`` keys of both kinds, sorted."""
        return sorted([*self._steps, *self._events])

    def event_steps(self) -> dict[tuple[str, int], frozenset[tuple[str, int]]]:
        """``{(event_type, version): produces}`` of every event step."""
        return {k: s.produces for k, s in self._events.items()}

    def payload_only(self, event_type: str, version: int) -> bool:
        """True if the chain from ``(event_type, version)`` meets no event step (1:1 upcasting)."""
        if not self._events:
            return True
        steps = self._steps
        while (event_type, version) in steps:
            version += 1
        return (event_type, version) not in self._events

    def upcast(self, event_type: str, version: int, payload: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]]:
        """Apply every payload step from ``version`` upwards (stops before an event step).

        Returns:
            ``(reached_version, payload)``. With no step for ``(event_type, version)`` the
            payload is returned unchanged (same object).

        Raises:
            Whatever a step raises (a bug or an invalid old payload): the codec turns it into
            a PoisonMessageError.
        """
        steps = self._steps
        step = steps.get((event_type, version))
        while step is not None:
            payload = step(payload)
            version += 1
            step = steps.get((event_type, version))
        return version, payload

    def upcast_event(self, event: Envelope) -> list[Envelope]:
        """Every step from ``event`` (its ``event_type`` / ``event_version`` as stored) on.

        Returns:
            The resulting events in order (zero, one or several), each at a version with no
            further step; ids, aggregate fields as the module docstring states.

        Raises:
            UpcastError: a step broke a rule (names the step and the field) or the steps went
                deeper than :data:`MAX_DEPTH`.
            Whatever a step raises itself.
        """
        if event.event_version is None:
            raise UpcastError(f"{event.event_type} {event.event_id}: event_version is None")
        out: list[Envelope] = []
        self._lift(event, out, 0)
        return out

    def _lift(self, event: Envelope, out: list[Envelope], depth: int) -> None:
        version = event.event_version
        assert version is not None
        reached, payload = self.upcast(event.event_type, version, event.payload)
        if reached != version:
            event = dataclasses.replace(event, event_version=reached, payload=payload)
        step = self._events.get((event.event_type, reached))
        if step is None:
            out.append(event)
            return
        if depth >= MAX_DEPTH:
            raise UpcastError(f"{event.event_type} {event.event_id}: more than {MAX_DEPTH} event "
                              "steps in a row (a loop in the upcaster chain)")
        for i, result in enumerate(step.fn(event)):
            self._lift(self._checked(step, event, i, result), out, depth + 1)

    @staticmethod
    def _checked(step: _EventStep, source: Envelope, i: int, result: Any) -> Envelope:
        where = f"upcaster {step.name} ({source.event_type} v{source.event_version}) result {i}"
        if not isinstance(result, Envelope):
            raise UpcastError(f"{where}: is {type(result).__name__}, not an Envelope")
        for name in _FIXED:
            if getattr(result, name) != getattr(source, name):
                raise UpcastError(f"{where}: {name} may not change "
                                  f"({getattr(source, name)!r} -> {getattr(result, name)!r})")
        if (result.event_type, result.event_version) not in step.produces:
            raise UpcastError(f"{where}: produced {result.event_type} v{result.event_version}, "
                              f"not declared in produces {sorted(step.produces)}")
        if i == 0:
            if result.event_id != source.event_id:
                raise UpcastError(f"{where}: event_id of the first result may not change "
                                  f"({source.event_id!r} -> {result.event_id!r})")
            return result
        return dataclasses.replace(result, event_id=derived_event_id(source.event_id, i))

    def verify(self, catalog: VersionCatalog | Mapping[str, int]) -> None:
        """Check the chain against the catalog; call at start-up.

        Every ``(event_type, v)`` below the type's newest version N needs a payload step
        ``v -> v+1`` or an event step; a payload step from N or above, an event step above N,
        a step for an event type the catalog does not know, an event step producing a type or
        version the catalog does not hold, and a loop of steps are errors.

        Raises:
            UpcasterChainError: one line listing every problem.
        """
        newest = dict(catalog.newest_versions() if hasattr(catalog, "newest_versions") else catalog)
        problems: list[str] = []
        for event_type, n in newest.items():
            for v in range(1, n):
                if (event_type, v) not in self._steps and (event_type, v) not in self._events:
                    problems.append(f"missing upcaster {event_type} v{v}->v{v + 1}")
        for event_type, v in sorted(self._steps):
            if event_type not in newest:
                problems.append(f"upcaster for unknown event type {event_type} (v{v}->v{v + 1})")
            elif v >= newest[event_type]:
                problems.append(
                    f"upcaster {event_type} v{v}->v{v + 1} goes beyond the newest version v{newest[event_type]}"
                )
        for (event_type, v), step in sorted(self._events.items()):
            if event_type not in newest:
                problems.append(f"event upcaster {step.name} for unknown event type {event_type} v{v}")
                continue
            if v > newest[event_type]:
                problems.append(f"event upcaster {step.name} for {event_type} v{v} beyond the newest "
                                f"version v{newest[event_type]}")
            for t, pv in sorted(step.produces):
                if t not in newest or pv > newest[t]:
                    problems.append(f"event upcaster {step.name} ({event_type} v{v}) produces "
                                    f"{t} v{pv}, which is not in the catalog")
        if not problems:
            loop = self._find_loop()
            if loop:
                problems.append("upcaster loop " + " -> ".join(f"{t} v{v}" for t, v in loop))
        if problems:
            raise UpcasterChainError("upcaster chain incomplete: " + "; ".join(problems))

    def _next(self, node: tuple[str, int]) -> list[tuple[str, int]]:
        if node in self._steps:
            return [(node[0], node[1] + 1)]
        step = self._events.get(node)
        return sorted(step.produces) if step is not None else []

    def _find_loop(self) -> list[tuple[str, int]]:
        """A cycle of steps as the list of its nodes (first repeated last), or ``[]``."""
        done: set[tuple[str, int]] = set()
        for start in sorted(self._events):
            path: list[tuple[str, int]] = []
            on_path: set[tuple[str, int]] = set()
            stack: list[tuple[tuple[str, int], int]] = [(start, 0)]
            while stack:
                node, i = stack.pop()
                if i == 0:
                    if node in on_path:
                        return [*path[path.index(node):], node]
                    if node in done:
                        continue
                    path.append(node)
                    on_path.add(node)
                nxt = self._next(node)
                if i < len(nxt):
                    stack.append((node, i + 1))
                    stack.append((nxt[i], 0))
                else:
                    done.add(node)
                    on_path.discard(node)
                    path.pop()
        return []
