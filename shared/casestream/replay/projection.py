"""What a rebuildable projection declares, and the catalog of projections by name.

A service makes a projection rebuildable by exposing a :class:`ProjectionSpec` in one of its
adapter modules (``services/<svc>/adapters/...``) and listing it in :data:`KNOWN`. The spec
names the topics, the database, the live tables and the consumer that keeps them up to date,
and gives three functions that take *table names* (live or shadow):

- ``create_tables(conn, names)`` — create the tables ``names`` (live name → actual name) empty,
  with the projection's current DDL (so a changed handler's new column exists in the shadow);
- ``registry(names, event_types)`` — a :class:`~casestream.consumer.handlers.HandlerRegistry` whose
  handlers write into ``names``; only ``PROJECTION`` handlers run in a replay;
- ``freshness(conn, names)`` — when the tables last changed (None if empty).

Handover rule: every projection write must be idempotent per event (``ON CONFLICT
(event_id) DO NOTHING`` or an aggregate-version-guarded upsert), because after the swap the
live consumer re-reads the events between its own position and the rebuilt tables' end and
must change nothing for them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from casestream.consumer.handlers import HandlerKind, HandlerRegistry
from casestream.consumer.processing import ProcessingMode
from casestream.replay.errors import ReplayConfigError

TableNames = Mapping[str, str]

#: Projection name -> "module:attribute" of its ProjectionSpec (imported lazily). Batch
#: statements read their one JSON parameter as ``jsonb``: on ``json`` every ``r->>k``
#: re-parses the row's text (~40-55 vs ~28 µs per row, bench/README.md "Replay").
KNOWN: dict[str, str] = {
    "audit.timeline": "services.audit.adapters.replay:PROJECTION",
    "case.dashboard": "services.case.adapters.dashboard:PROJECTION",
    "decision.statistics": "services.decision.adapters.statistics:PROJECTION",
}

SHADOW_SUFFIX = "_shadow"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectionSpec:
    """A rebuildable read model.

    Attributes:
        name: projection name, e.g. ``"audit.timeline"``.
        description: one line for ``--list``.
        topics: topics its handlers read.
        live_consumer: consumer name (= Kafka group id) maintaining the live tables.
        tables: live table names, in swap order.
        dsn: settings-based database URL of the service owning the tables (no arguments).
        create_tables: ``fn(conn, names)`` creating ``names.values()`` empty.
        registry: ``fn(names, event_types) -> HandlerRegistry`` writing into ``names``.
        freshness: ``fn(conn, names) -> datetime | None``.
    """

    name: str
    description: str
    topics: tuple[str, ...]
    live_consumer: str
    tables: tuple[str, ...]
    dsn: Callable[[], str]
    create_tables: Callable[[Any, TableNames], None]
    registry: Callable[[TableNames, Iterable[str]], HandlerRegistry]
    freshness: Callable[[Any, TableNames], datetime | None]

    def live_names(self) -> dict[str, str]:
        """live name -> live name."""
        return {t: t for t in self.tables}

    def shadow_names(self) -> dict[str, str]:
        """live name -> shadow name (``<table>_shadow``)."""
        return {t: t + SHADOW_SUFFIX for t in self.tables}


def load_projection(name: str, known: Mapping[str, str] = KNOWN) -> ProjectionSpec:
    """Import the spec of projection ``name``.

    Raises:
        ReplayConfigError: unknown name, or the module does not define a ProjectionSpec.
    """
    target = known.get(name)
    if target is None:
        raise ReplayConfigError(f"unknown projection {name!r}; known: {', '.join(sorted(known))}")
    module_name, _, attr = target.partition(":")
    spec = getattr(importlib.import_module(module_name), attr, None)
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
