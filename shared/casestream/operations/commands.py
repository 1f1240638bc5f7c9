"""Operator commands on dead letters: re-drive and discard, each recorded as an action.

The CLI (``casestream dlq redrive|discard``) and the web console call these same
functions, so an action has one effect and one audit record whichever way it is taken.
"""

from __future__ import annotations

from collections.abc import Sequence

from casestream.consumer.deadletters import DeadLetterError, redrive
from casestream.consumer.records import Record
from casestream.kafka.config import KafkaTarget
from casestream.operations.actions import (
    ACTION_DISCARD,
    ACTION_REDRIVE,
    OperatorAction,
    record_action,
)

__all__ = ["redrive_dead_letters", "discard_dead_letters", "Actor"]


class Actor:
    """Who acts: ``name`` (a token's ``sub``, or the login name at the CLI), the tenant of
    their token (None: the CLI, an operator of every tenant) and their roles."""

    __slots__ = ("name", "tenant", "roles")

    def __init__(self, name: str, *, tenant: str | None = None, roles: Sequence[str] = ()) -> None:
        self.name, self.tenant, self.roles = name, tenant, tuple(sorted(roles))


def _label(r: Record) -> str:
    return f"{r.partition}:{r.offset}"


def redrive_dead_letters(bootstrap: KafkaTarget, consumer: str, records: Sequence[Record], *,
                         actor: Actor, reason: str, accept_gap: bool = False,
                         actions_topic: str | None = None,
                         params: dict[str, str] | None = None) -> OperatorAction:
    """Re-drive ``records`` (entries of ``<consumer>.dlq``) to ``<consumer>.redrive`` and
    record the action (outcome ``ok``, or ``failed`` with the error, which is raised again;
    ``params`` recorded with it).

    Raises:
        ActionLogError: ``reason`` is empty or too long (checked before anything is sent), or
            the action could not be recorded.
        DeadLetterError: the re-drive failed (a reference, a delivery error).
    """
    def action(outcome: str, detail: str) -> OperatorAction:
        return OperatorAction(actor=actor.name, tenant=actor.tenant, roles=actor.roles,
                              action=ACTION_REDRIVE, target=consumer, reason=reason,
                              items=tuple(_label(r) for r in records), outcome=outcome, detail=detail,
                              params=dict(params or {}))

    action("ok", "")  # validates the reason before anything is sent
    try:
        n = redrive(bootstrap, records, f"{consumer}.redrive", accept_gap=accept_gap)
    except DeadLetterError as e:
        record_action(bootstrap, action("failed", str(e)[:1000]), topic=actions_topic)
        raise
    done = action("ok", f"re-drove {n} dead letter(s) to {consumer}.redrive"
                  + (" (accepting version gaps)" if accept_gap else ""))
    record_action(bootstrap, done, topic=actions_topic)
    return done


def discard_dead_letters(bootstrap: KafkaTarget, consumer: str, records: Sequence[Record], *,
                         actor: Actor, reason: str, actions_topic: str | None = None) -> OperatorAction:
    """Mark ``records`` (entries of ``<consumer>.dlq``) as discarded: they leave the open
    dead letters without being processed. The dead-letter topic itself is not changed.

    Raises:
        ActionLogError: ``reason`` is empty or too long, or the action could not be recorded.
    """
    done = OperatorAction(actor=actor.name, tenant=actor.tenant, roles=actor.roles,
                          action=ACTION_DISCARD, target=consumer, reason=reason,
                          items=tuple(_label(r) for r in records),
                          detail=f"discarded {len(records)} dead letter(s) of {consumer}.dlq")
    record_action(bootstrap, done, topic=actions_topic)
    return done
