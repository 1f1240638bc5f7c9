"""The catalog of rebuildable projections by name (the ``casestream.projections`` entry points).

What a projection declares (:class:`casestream.handlers.ProjectionSpec`) and the helpers for its
tables live in :mod:`casestream.handlers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from casestream.errors import ConfigError
from casestream.handlers.processing import ProcessingMode
from casestream.handlers.projection import ProjectionSpec
from casestream.handlers.registry import HandlerKind, HandlerRegistry
from casestream.replay.errors import ReplayConfigError
from casestream.service.discovery import projection_refs
from casestream.service.spec import resolve


def known_projections(known: Mapping[str, str] | None = None) -> dict[str, str]:
    """Projection name -> ``"module:attr"``: ``known`` if given, else the installed
    ``casestream.projections`` entry points, sorted by name."""
    return dict(sorted((projection_refs() if known is None else known).items()))


def load_projection(name: str, known: Mapping[str, str] | None = None) -> ProjectionSpec:
    """Import the spec of projection ``name`` (``known``: name -> reference, default the
    discovered projections, :func:`known_projections`).

    Raises:
        ReplayConfigError: unknown name (the message lists the known ones), or the module
            does not import or define a ProjectionSpec.
    """
    known = known_projections(known)
    target = known.get(name)
    if target is None:
        raise ReplayConfigError(f"unknown projection {name!r}; known: "
                                f"{', '.join(known) or 'none installed'}")
    try:
        spec = resolve(target)
    except ConfigError as e:
        raise ReplayConfigError(str(e)) from None
    if not isinstance(spec, ProjectionSpec):
        raise ReplayConfigError(f"{target} is not a ProjectionSpec")
    if spec.name != name:
        raise ReplayConfigError(f"{target} declares projection {spec.name!r}, not {name!r}")
    return spec


def replay_handlers(registry: HandlerRegistry, name: str) -> HandlerRegistry:
    """Check a projection registry at start-up and return it.

    Every registered handler must declare a :class:`HandlerKind`; at least one must be a
    ``PROJECTION`` (the only kind REPLAY runs: ``HandlerKind.runs_in``).

    Raises:
        ReplayConfigError: a handler without a declared kind, or nothing to replay.
    """
    runnable = 0
    registered: Mapping[str, Any] = getattr(registry, "_by_type", {})
    for event_type in sorted(registry.event_types):
        for h in registered.get(event_type, ()):
            if not isinstance(getattr(h, "kind", None), HandlerKind):
                raise ReplayConfigError(
                    f"projection {name}: handler {h.name} for {event_type} declares no handler "
                    f"kind (PROJECTION, PROCESS or SIDE_EFFECT); refusing to replay")
        runnable += len(registry.handlers_for(event_type, ProcessingMode.REPLAY))
    if runnable == 0:
        raise ReplayConfigError(f"projection {name}: no PROJECTION handler to replay")
    return registry
