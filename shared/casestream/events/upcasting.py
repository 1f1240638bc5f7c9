"""Upcasters: pure functions that lift an old event payload one version up, chained to the newest.

Pure (stdlib only). An upcaster for ``(event_type, from_version)`` takes the payload of
``from_version`` (a mapping; must not be mutated) and returns a new dict shaped as
``from_version + 1``. The same chain runs in live consumption, replay and dead-letter
re-drive (the codec applies it on decode), so handlers only ever see the newest shape.

Pattern: pyeventsourcing's ``upcast_vN_vN+1`` steps; the chain is checked once at start-up by
:meth:`UpcasterChain.verify`, so a missing step fails the service before an old event arrives.

Errors: :class:`~casestream.errors.UpcasterChainError` (duplicate registration, missing or
dangling step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from casestream.errors import UpcasterChainError

__all__ = ["Upcaster", "UpcasterChain", "VersionCatalog"]

Upcaster = Callable[[Mapping[str, Any]], dict[str, Any]]


class VersionCatalog(Protocol):
    """What :meth:`UpcasterChain.verify` needs from a catalog (``casestream.events.catalog.Catalog`` fits)."""

    def newest_versions(self) -> Mapping[str, int]:
        """``{event_type: newest version}``."""
        ...


class UpcasterChain:
    """Registry of upcasters keyed by ``(event_type, from_version)``.

    Example::

        chain = UpcasterChain()

        @chain.register("CaseOpened", 1)
        def case_opened_v1_v2(p): return {**p, "priority": "NORMAL"}

        chain.verify(catalog)                       # at start-up
        chain.upcast("CaseOpened", 1, payload)      # -> (3, payload_v3)
    """

    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
        """Decorator registering ``fn`` as the step ``from_version -> from_version + 1``.

        Raises UpcasterChainError if that step is already registered or ``from_version < 1``.
        """

        def deco(fn: Upcaster) -> Upcaster:
            self.add(event_type, from_version, fn)
            return fn

        return deco

    def add(self, event_type: str, from_version: int, fn: Upcaster) -> None:
        """Register ``fn`` as the step ``(event_type, from_version) -> from_version + 1``.

        Raises UpcasterChainError on a duplicate step or ``from_version < 1``.
        """
        if from_version < 1:
            raise UpcasterChainError(f"{event_type}: from_version must be >= 1, got {from_version}")
        key = (event_type, from_version)
        if key in self._steps:
            raise UpcasterChainError(f"{event_type}: upcaster v{from_version}->v{from_version + 1} registered twice")
        self._steps[key] = fn

    def include(self, other: UpcasterChain) -> UpcasterChain:
        """Add every step of ``other`` to this chain; returns this chain.

        Raises UpcasterChainError if a step is registered on both.
        """
        for (event_type, from_version), fn in other._steps.items():
            self.add(event_type, from_version, fn)
        return self

    def steps(self) -> list[tuple[str, int]]:
        """Registered ``(event_type, from_version)`` keys, sorted."""
        return sorted(self._steps)

    def upcast(self, event_type: str, version: int, payload: Mapping[str, Any]) -> tuple[int, Mapping[str, Any]]:
        """Apply every registered step from ``version`` upwards.

        Returns:
            ``(reached_version, payload)``: after :meth:`verify` passed, ``reached_version``
            is the catalog's newest version of ``event_type``. With no step for
            ``(event_type, version)`` the payload is returned unchanged (same object).

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

    def verify(self, catalog: VersionCatalog | Mapping[str, int]) -> None:
        """Check the chain against the catalog; call at start-up.

        Every event type with newest version N needs steps 1->2, ..., N-1->N; a step from
        N or above, or for an event type the catalog does not know, is dangling.

        Raises:
            UpcasterChainError: listing every missing and dangling step.
        """
        newest = dict(catalog.newest_versions() if hasattr(catalog, "newest_versions") else catalog)
        problems: list[str] = []
        for event_type, n in newest.items():
            for v in range(1, n):
                if (event_type, v) not in self._steps:
                    problems.append(f"missing upcaster {event_type} v{v}->v{v + 1}")
        for event_type, v in sorted(self._steps):
            if event_type not in newest:
                problems.append(f"upcaster for unknown event type {event_type} (v{v}->v{v + 1})")
            elif v >= newest[event_type]:
                problems.append(
                    f"upcaster {event_type} v{v}->v{v + 1} goes beyond the newest version v{newest[event_type]}"
                )
        if problems:
            raise UpcasterChainError("upcaster chain incomplete: " + "; ".join(problems))
