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

Modules: ``projection`` (what a rebuildable projection declares; catalog by name; the
JSON-batch PROJECTION handlers, ``create_table_unless_exists``, the ``max_applied_at`` freshness),
``engine`` (phases), ``applier`` (guard + REPLAY dispatch, no I/O of its own),
``checkpoint`` (PostgreSQL checkpoint tables), ``names`` (index/constraint names across a
swap, the live-table copy of a merge), ``source`` (Kafka reading), ``positions``
(``--from``/``--to``), ``progress`` (terminal / plain progress lines), ``status``
(``--list``), ``errors``.
"""

from casestream.replay.engine import Mode, Plan, ReplayOptions, ReplayResult, Replayer
from casestream.replay.errors import PartialReplayRefused, ReplayConfigError, ReplayError, ReplayHandlerError
from casestream.replay.positions import EndSpec, StartSpec, parse_from, parse_to
from casestream.replay.progress import Progress, ProgressReporter
from casestream.replay.projection import (
    ProjectionSpec,
    TableNames,
    create_table_unless_exists,
    insert_batch_registry,
    json_batch_registry,
    known_projections,
    load_projection,
    max_applied_at,
    replay_handlers,
)

__all__ = [
    "EndSpec", "Mode", "PartialReplayRefused", "Plan", "Progress", "ProgressReporter", "ProjectionSpec",
    "ReplayConfigError", "ReplayError", "ReplayHandlerError", "ReplayOptions", "ReplayResult",
    "Replayer", "StartSpec", "TableNames", "create_table_unless_exists", "insert_batch_registry", "json_batch_registry", "known_projections", "load_projection", "max_applied_at", "parse_from", "parse_to", "replay_handlers",
]
