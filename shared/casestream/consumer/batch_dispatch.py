"""Triage and dispatch of one batch: decode failures, verdicts, handler calls.

Mixed into :class:`casestream.consumer.batch.BatchProcessor` (uses its ``consumer``,
``handlers``, ``settings``, ``mode``, ``outbox`` and ``redrive_topic`` attributes and its
``_failed`` step from ``batch_failures``): sorting decoded records into items or failures,
deciding the :class:`~casestream.consumer.batch_model.Action` of one record (version guard,
duplicates, re-drive ``accept-gap``, strict types), and calling its per-event or batch
handlers inside their tracing spans.
"""

from __future__ import annotations

from typing import Any

from casestream import telemetry
from casestream.consumer.batch_model import Action, BatchResult, Decoded, _Item
from casestream.consumer.records import Record
from casestream.consumer.deadletters import H_ACCEPT_GAP, DeadLetter
from casestream.errors import PoisonMessageError
from casestream.consumer.guard import Verdict, decide
from casestream.consumer.handlers import HandlerContext
from casestream.consumer.inbox import GuardRow


class DispatchMixin:
    """Decode triage, verdicts and handler dispatch of :class:`BatchProcessor`."""

    # ------------------------------------------------------------------ decode

    def _triage(self, decoded: Decoded, result: BatchResult,
                dead: list[DeadLetter]) -> list[_Item]:
        """Decoded items in order; decode failures dead-lettered (poison) or cut (retryable)."""
        items: list[_Item] = []
        for rec, env, err in decoded.entries:
            tp = rec.tp
            if tp in result.rewinds:
                continue
            result.commits[tp] = rec.offset + 1
            if err is not None:
                self._failed(rec, err, None, result, dead)
                continue
            items.append(_Item(rec, env))
        return items

    # ------------------------------------------------------------------ verdicts

    def _action(self, item: _Item, known: set[str], seen: set[str],
                guards: dict[tuple[str, str], GuardRow]) -> Action:
        env = item.env
        if env.event_id in known or env.event_id in seen:
            return Action.DUPLICATE
        g = guards.get(item.key)
        last = g.last_version if g is not None else None
        try:
            verdict = decide(last, env.aggregate_version, self.settings.first_seen)
        except ValueError as e:
            raise PoisonMessageError(str(e), reason="validation") from e
        if verdict is Verdict.STALE:
            return Action.STALE
        if verdict is Verdict.GAP:
            if item.rec.topic == self.redrive_topic and item.rec.header(H_ACCEPT_GAP) == "true":
                return Action.ACCEPT_GAP
            return Action.HOLD
        if self.settings.strict_types and not self.handlers.knows(env.event_type):
            return Action.UNKNOWN_STRICT
        return Action.APPLY

    def _runs(self, apply: list[_Item]) -> list[tuple[list[_Item], tuple[Any, ...]]]:
        """Split ``apply`` into runs: consecutive events whose handlers are all batch handlers
        and identical form one run; every other event is a run of its own. Order is kept."""
        runs: list[tuple[list[_Item], tuple[Any, ...]]] = []
        for it in apply:
            hs = self.handlers.handlers_for(it.env.event_type, self.mode)
            batchable = bool(hs) and all(h.batch for h in hs)
            if batchable and runs and runs[-1][1] == hs:
                runs[-1][0].append(it)
            else:
                runs.append(([it], hs if batchable else ()))
        return runs

    def _run_batch(self, conn: Any, run: list[_Item], hs: tuple[Any, ...]) -> None:
        first = run[0].rec
        ctx = HandlerContext(conn=conn, outbox=self.outbox, mode=self.mode,
                             consumer=self.consumer, topic=first.topic,
                             partition=first.partition, offset=first.offset,
                             positions=tuple((i.rec.topic, i.rec.partition, i.rec.offset)
                                             for i in run))
        events = [i.env for i in run]
        with telemetry.consume_batch_span(self.consumer, [(i.rec, i.env) for i in run]):
            for h in hs:
                h.fn(ctx, events)

    def _run_handlers(self, conn: Any, rec: Record, env: Any) -> int:
        """Run the handlers of ``env``; returns 1 if the type has none (counted as unknown)."""
        hs = self.handlers.handlers_for(env.event_type, self.mode)
        if not hs:
            return 0 if self.handlers.knows(env.event_type) else 1
        ctx = HandlerContext(conn=conn, outbox=self.outbox, mode=self.mode,
                             consumer=self.consumer, topic=rec.topic, partition=rec.partition,
                             offset=rec.offset, positions=((rec.topic, rec.partition, rec.offset),))
        with telemetry.consume_span(self.consumer, rec, env):
            for h in hs:
                h.call(ctx, env)
        return 0
