"""Use case: answer a ``DecisionRequested`` (semantic idempotency: one decision per case).

- First request for a case: the rules decide, the decision is stored, and the reply event
  (aggregate ``decision``, id = case id, version 1) is appended to the outbox — all in the
  caller's transaction, together with the consumer runtime's inbox row.
- A later *different* request for the same case (a retry by the saga, or a new saga after
  the case was returned and submitted again): the rules are not run again; the stored
  decision is re-addressed to the asking saga and the same verdict is emitted again with
  the next aggregate versions. A violation is announced as ``ViolationDetermined`` then
  ``PenaltyProposed`` (amount and reason), one version each. A redelivery of the *same* request never reaches here (inbox).

Reply envelope: correlation id and tenant of the request, causation id = the request's
event id, traceparent propagated, actor ``decision-engine``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from casestream.events import Envelope, new_event
from services.decision.application.ports import DecisionStore, EventSink
from services.decision.domain.decision import Decision
from services.decision.domain.appeal import rule_on_appeal
from services.decision.domain.rules import RULES_VERSION, CaseFacts, decide

log = logging.getLogger(__name__)

AGGREGATE_TYPE = "decision"
SOURCE = "decision"
ACTOR = "decision-engine"


def facts_from(event: Envelope) -> CaseFacts:
    """The rules' input from a ``DecisionRequested`` envelope.

    Raises:
        KeyError / ValueError: the payload lacks ``case_id``, ``severity`` or ``evidence_count``.
    """
    p = event.payload
    return CaseFacts(case_id=str(p["case_id"]), severity=int(p["severity"]),
                     evidence_count=int(p["evidence_count"]), title=str(p.get("title") or ""))


class Decider:
    """Answers decision requests.

    Args:
        clock: returns the current time (timezone-aware UTC).
    """

    def __init__(self, *, clock: Callable[[], datetime]):
        self.clock = clock

    def handle(self, store: DecisionStore, sink: EventSink, request: Envelope) -> Decision:
        """Decide (or re-announce) the case of ``request``; return the stored decision.

        Raises:
            casestream.errors.ConcurrencyError: the decision changed concurrently (retry).
        """
        facts = facts_from(request)
        saga_id = request.aggregate_id  # DecisionRequested is a saga event: aggregate id = saga id
        existing = store.get(facts.case_id)
        if existing is None:
            decision = Decision(case_id=facts.case_id, tenant_id=request.tenant_id,
                                saga_id=saga_id, verdict=decide(facts),
                                rules_version=RULES_VERSION, decided_at=self.clock(),
                                request_event_id=request.event_id, version=1)
            decision = replace(decision, version=decision.events_per_announcement)
            if store.insert(decision):
                sink.append(self._replies(decision, request))
                return decision
            existing = store.get(facts.case_id)
            assert existing is not None  # insert refused only because a decision exists
        step = existing.events_per_announcement
        store.readdress(facts.case_id, saga_id=saga_id, expected_version=existing.version,
                        step=step)
        decision = replace(existing, saga_id=saga_id, version=existing.version + step)
        log.info("case %s already decided (%s); re-announced to saga %s as version %d",
                 decision.case_id, decision.verdict.outcome.value, saga_id, decision.version)
        sink.append(self._replies(decision, request))
        return decision

    def _replies(self, decision: Decision, request: Envelope) -> list[Envelope]:
        """The announcement's events, versions ending at ``decision.version``."""
        replies = decision.replies()
        first = decision.version - len(replies) + 1
        return [new_event(event_type=event_type, aggregate_type=AGGREGATE_TYPE,
                          aggregate_id=decision.case_id, aggregate_version=first + i,
                          payload=payload, tenant_id=request.tenant_id,
                          source=SOURCE, actor_id=ACTOR, correlation_id=request.correlation_id,
                          causation_id=request.event_id, traceparent=request.traceparent,
                          occurred_at=self.clock())
                for i, (event_type, payload) in enumerate(replies)]


def appeal_replies(request: Envelope, *, now: datetime) -> list[Envelope]:
    """The answer to an ``AppealDecisionRequested``: ``AppealUpheld`` or ``AppealRejected``
    (rule :func:`~services.decision.domain.appeal.rule_on_appeal`).

    Stateless: the verdict is a pure function of the request, so nothing is stored; a
    redelivered request never reaches here (inbox), and the appeal saga issues its request
    once. Reply: aggregate ``decision``, id = the asking saga's id, version 1; correlation
    id, tenant and traceparent of the request, causation id = the request.

    Raises:
        KeyError / ValueError: the payload lacks ``case_id`` or ``reason``.
    """
    p = request.payload
    case_id, saga_id = str(p["case_id"]), request.aggregate_id
    verdict = rule_on_appeal(str(p["reason"]))
    payload: dict[str, object] = {"case_id": case_id, "saga_id": saga_id, "reason": verdict.reason}
    if verdict.upheld:
        payload["penalty_cents"] = verdict.penalty_cents
    log.info("appeal of case %s %s", case_id, "upheld" if verdict.upheld else "rejected")
    return [new_event(event_type="AppealUpheld" if verdict.upheld else "AppealRejected",
                      aggregate_type=AGGREGATE_TYPE, aggregate_id=saga_id, aggregate_version=1,
                      payload=payload, tenant_id=request.tenant_id, source=SOURCE, actor_id=ACTOR,
                      correlation_id=request.correlation_id, causation_id=request.event_id,
                      traceparent=request.traceparent, occurred_at=now)]
