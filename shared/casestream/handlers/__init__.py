"""Handlers and projections: what a service writes to react to events and to keep read models.

Public API (the one place a service imports these names from)::

    from casestream.handlers import HandlerRegistry, HandlerKind, HandlerContext
    from casestream.handlers import ProjectionSpec, TableNames, create_table_unless_exists, max_applied_at

    registry = HandlerRegistry()

    @registry.on("InvoiceIssued", kind=HandlerKind.PROJECTION)
    def project(ctx: HandlerContext, event: Envelope) -> None:
        ctx.cursor.execute("insert into invoices ... on conflict do nothing", (...))

The same registry runs live (``casestream.consumer``) and in a replay (``casestream.replay``),
through one runner (``casestream.handlers.runner.HandlerRunner``).

Modules: ``registry`` (registration, handler kinds, the context, the outbox port),
``processing`` (LIVE / REPLAY), ``guard`` (the aggregate-version rule), ``cursors`` (the cursor
handlers share; psycopg), ``projection`` (what a rebuildable projection declares and the helpers
for its tables; psycopg), ``runner`` (run grouping, contexts, sync and async calls, verdicts;
used by both engines). The registry, kind, context, mode and guard names import eagerly (no
driver); the cursor, projection and runner names lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports
from casestream.handlers.guard import AggregateState, FirstSeenPolicy, Verdict, decide
from casestream.handlers.processing import ProcessingMode
from casestream.handlers.registry import (
    DiscardingOutbox,
    HandlerContext,
    HandlerKind,
    HandlerRegistry,
    OutboxAppender,
    RegisteredHandler,
)

if TYPE_CHECKING:
    from casestream.handlers.cursors import SharedCursor
    from casestream.handlers.projection import (
        ProjectionConfigError,
        ProjectionSpec,
        TableNames,
        create_table_unless_exists,
        insert_batch_registry,
        json_batch_registry,
        max_applied_at,
    )
    from casestream.handlers.runner import HandlerRunner

# Lazy: these modules import psycopg.
_LAZY = {
    **{name: "casestream.handlers.projection" for name in (
        "ProjectionConfigError", "ProjectionSpec", "TableNames", "create_table_unless_exists",
        "insert_batch_registry", "json_batch_registry", "max_applied_at")},
    "SharedCursor": "casestream.handlers.cursors",
    "HandlerRunner": "casestream.handlers.runner",
}

__all__ = sorted([
    "AggregateState", "DiscardingOutbox", "FirstSeenPolicy", "HandlerContext", "HandlerKind",
    "HandlerRegistry", "OutboxAppender", "ProcessingMode", "RegisteredHandler", "Verdict", "decide",
    *_LAZY,
])

__getattr__ = lazy_exports(__name__, _LAZY, globals())
