"""Replay: rebuild a projection from its topics into shadow tables, swap, hand over.

Public API::

    from casestream.replay import Replayer, ReplayOptions, load_projection, parse_from, parse_to

    spec = load_projection("billing.ledger")
    replayer = Replayer(spec, codec=codec, dsn=spec.dsn(), bootstrap=bootstrap,
                        event_types=catalog.event_types, reporter=ProgressReporter(...))
    replayer.plan(ReplayOptions(...))   # --dry-run
    replayer.run(ReplayOptions(...))    # rebuild, swap, hand over
    # part of the history: ReplayOptions(start=..., merge=True) or only_range=True, else
    # run() raises PartialReplayRefused before writing anything (Plan.mode says which)

What a projection declares (``ProjectionSpec``) and the helpers for its tables live in
``casestream.handlers``; the names this package used to export for them still resolve, with a
``DeprecationWarning``.

Modules: ``projection`` (the catalog of projections by name, the start-up check of a
registry), ``engine`` (phases), ``parallel`` (worker processes of the bulk), ``applier``
(in-memory guard around ``casestream.handlers.runner``, no I/O of its own),
``checkpoint`` (PostgreSQL checkpoint tables), ``names`` (index/constraint names across a
swap, the live-table copy of a merge), ``source`` (Kafka reading), ``positions``
(``--from``/``--to``), ``progress`` (terminal / plain progress lines), ``status``
(``--list``), ``errors``.
"""

from casestream._lazy import moved_exports
from casestream.replay.engine import Mode, Plan, ReplayOptions, ReplayResult, Replayer
from casestream.replay.errors import PartialReplayRefused, ReplayConfigError, ReplayError, ReplayHandlerError
from casestream.replay.positions import EndSpec, StartSpec, parse_from, parse_to
from casestream.replay.progress import Progress, ProgressReporter
from casestream.replay.projection import known_projections, load_projection, replay_handlers

__all__ = [
    "EndSpec", "Mode", "PartialReplayRefused", "Plan", "Progress", "ProgressReporter",
    "ReplayConfigError", "ReplayError", "ReplayHandlerError", "ReplayOptions", "ReplayResult",
    "Replayer", "StartSpec", "known_projections", "load_projection", "parse_from", "parse_to",
    "replay_handlers",
]

#: names that moved to casestream.handlers (deprecated here)
_MOVED = dict.fromkeys((
    "ProjectionSpec", "TableNames", "create_table_unless_exists", "insert_batch_registry",
    "json_batch_registry", "max_applied_at",
), "casestream.handlers")


def _missing(name: str) -> None:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__getattr__ = moved_exports(__name__, _MOVED, _missing)
