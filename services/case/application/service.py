"""Case use cases: open, submit and the regulator's workflow commands (idempotent), read and
search, and apply the saga's close/return requests.

Every write loads the aggregate, calls one domain command, then in the same unit of work
saves the new state (optimistic version check), appends the mapped integration events
to the outbox and, for an idempotent request, stores the response. Nothing is written
when any step raises.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from services.case.application.commands import (
    AppealCase,
    CorrectNotice,
    AssignOfficer,
    CaseQuery,
    CaseView,
    CaseWrite,
    CloseCase,
    EvidenceView,
    OpenCase,
    RequestEvidence,
    ReturnCase,
    StartReview,
    SubmitCase,
    SubmitEvidence,
    WithdrawCase,
)
from casestream.http import Idempotency, IdempotentRequest, StoredResponse
from services.case.application.errors import PreconditionFailed
from services.case.application.integration import Causation, to_envelopes
from services.case.application.ports import Clock, IdFactory, UnitOfWork, UnitOfWorkFactory
from services.case.domain.case import Case
from casestream.errors import ConcurrencyError
from services.case.domain.errors import CaseNotFound, EvidenceNotFound, InvalidTransition
from services.case.domain.values import CaseContent, priority_of

log = logging.getLogger(__name__)

DEADLINE_ACTOR = "evidence-deadlines"
"""Actor of the events the evidence deadline worker records."""

Render = Callable[[CaseView], StoredResponse]
"""Turns the resulting case into the HTTP response to send (and to store for replay)."""

Replayed = bool
"""True when a response comes from the idempotency store rather than a new write."""


class CaseService:
    """The case service's use cases, over a unit-of-work factory, a clock and an id source.

    Args:
        uow: opens one transaction per call.
        clock: the time events occur at.
        new_id: new case ids (UUID text).
        idempotency_ttl: how long a stored response is replayed (then the key may be reused).

    Attributes:
        idempotency: the Idempotency-Key component (``casestream.http.Idempotency``) on the
            same clock; the HTTP adapter claims keys and answers through it.
    """

    def __init__(self, *, uow: UnitOfWorkFactory, clock: Clock, new_id: IdFactory,
                 idempotency_ttl: timedelta) -> None:
        self._uow = uow
        self._clock = clock
        self._new_id = new_id
        self.idempotency = Idempotency(ttl=idempotency_ttl, clock=clock.now)

    # --- HTTP commands ----------------------------------------------------------------

    def open_case(self, cmd: OpenCase, render: Render,
                  request: IdempotentRequest | None = None) -> tuple[StoredResponse, Replayed]:
        """Open a case: insert it at version 1 and append CaseOpened v3 to the outbox.

        Raises:
            CaseValidationError: content breaks a rule (services.case.domain.values).
            IdempotencyConflict, RequestInFlight: see :meth:`submit_case`.
        """
        content = CaseContent(title=cmd.title, summary=cmd.summary, severity=cmd.severity,
                              evidence_count=cmd.evidence_count,
                              reporter_email=cmd.reporter_email,
                              priority=priority_of(cmd.priority))
        with self._uow() as uow:
            replay = self._replay(uow, request)
            if replay is not None:
                return replay, True
            case = Case.open(case_id=self._new_id(), tenant_id=cmd.tenant_id, content=content,
                             actor_id=cmd.actor_id, at=self._clock.now())
            uow.cases.add(case)
            uow.outbox.append(to_envelopes(case.pull_events(), Causation(traceparent=cmd.traceparent)))
            return self._respond(uow, request, render(CaseView.of(case))), False

    def submit_case(self, cmd: SubmitCase, request: IdempotentRequest,
                    render: Render) -> tuple[StoredResponse, Replayed]:
        """Submit an open case exactly once per idempotency key.

        Same key + same request -> the stored response (replayed). Otherwise the case
        moves OPEN -> SUBMITTED at version+1, CaseSubmitted v1 goes to the outbox, and the
        rendered response is stored under the key, all in one transaction.

        Raises:
            RequestInFlight: another transaction is processing the same key.
            IdempotencyConflict: the key was used for a different request.
            CaseNotFound: no such case for the tenant.
            PreconditionFailed: ``cmd.expected_version`` differs from the case's version.
            InvalidTransition: the case is not OPEN.
            casestream.errors.ConcurrencyError: the case changed concurrently.
        """
        with self._uow() as uow:
            replay = self._replay(uow, request)
            if replay is not None:
                return replay, True
            case = self._load(uow, cmd.tenant_id, cmd.case_id)
            if cmd.expected_version is not None and cmd.expected_version != case.version:
                raise PreconditionFailed(case.id, cmd.expected_version, case.version)
            case.submit(actor_id=cmd.actor_id, at=self._clock.now(), note=cmd.note)
            self._save(uow, case, Causation(traceparent=cmd.traceparent))
            return self._respond(uow, request, render(CaseView.of(case))), False

    def apply(self, cmd: CaseWrite, request: IdempotentRequest,
              render: Render) -> tuple[StoredResponse, Replayed]:
        """Run one workflow command (assign, request/submit evidence, start review, withdraw,
        appeal) exactly once per idempotency key, as :meth:`submit_case` does.

        An assignment of the officer already assigned writes no event (and still stores the
        response under the key). Evidence content is stored in the same transaction.

        Raises:
            RequestInFlight, IdempotencyConflict, CaseNotFound, PreconditionFailed,
            InvalidTransition (naming the rule), CaseValidationError, ConcurrencyError.
        """
        with self._uow() as uow:
            replay = self._replay(uow, request)
            if replay is not None:
                return replay, True
            case = self._load(uow, cmd.tenant_id, cmd.case_id)
            if cmd.expected_version is not None and cmd.expected_version != case.version:
                raise PreconditionFailed(case.id, cmd.expected_version, case.version)
            self._change(uow, case, cmd)
            if case.pending_events:
                self._save(uow, case, Causation(traceparent=cmd.traceparent))
            return self._respond(uow, request, render(CaseView.of(case))), False

    def _change(self, uow: UnitOfWork, case: Case, cmd: CaseWrite) -> None:
        now, actor = self._clock.now(), cmd.actor_id
        match cmd:
            case AssignOfficer(officer_id=officer):
                case.assign(officer_id=officer, actor_id=actor, at=now)
            case RequestEvidence(description=text, due_at=due):
                case.request_evidence(request_id=self._new_id(), description=text, due_at=due,
                                      actor_id=actor, at=now)
            case SubmitEvidence(name=name, media_type=media, content=content):
                digest = hashlib.sha256(content).hexdigest()
                event = case.submit_evidence(evidence_id=self._new_id(), name=name,
                                             media_type=media, content=content, sha256=digest,
                                             actor_id=actor, at=now)
                uow.evidence.add(EvidenceView(
                    id=event.evidence_id, case_id=case.id, request_id=event.request_id,
                    name=event.name, media_type=event.media_type, size_bytes=event.size_bytes,
                    sha256=digest, submitted_by=actor, submitted_at=now), content)
            case StartReview():
                case.start_review(actor_id=actor, at=now)
            case WithdrawCase(reason=reason):
                case.withdraw(reason=reason, actor_id=actor, at=now)
            case AppealCase(reason=reason):
                case.appeal(reason=reason, actor_id=actor, at=now)
            case CorrectNotice(reason=reason, penalty_cents=penalty):
                case.correct_notice(reason=reason, penalty_cents=penalty, actor_id=actor, at=now)
            case _:
                raise TypeError(f"no workflow command {type(cmd).__name__}")

    def run_evidence_deadlines(self, grace: timedelta, limit: int = 100) -> int:
        """Remind (EvidenceOverdue) the cases whose evidence is past its due date, and
        escalate (CaseEscalated -> manual_review) those reminded ``grace`` ago; one
        transaction per case, so a conflict with a concurrent write (evidence arriving)
        skips that case until the next run. Returns how many cases changed.

        Raises:
            StorageUnavailable: the database cannot be reached.
        """
        with self._uow() as uow:
            due = uow.cases.evidence_deadlines_due(self._clock.now(), limit)
        changed = 0
        for tenant_id, case_id in due:
            try:
                with self._uow() as uow:
                    case = self._load(uow, tenant_id, case_id)
                    now = self._clock.now()
                    if case.mark_overdue(grace=grace, actor_id=DEADLINE_ACTOR, at=now) or \
                            case.escalate(actor_id=DEADLINE_ACTOR, at=now):
                        self._save(uow, case, Causation())
                        changed += 1
            except (ConcurrencyError, InvalidTransition, CaseNotFound) as e:
                log.info("evidence deadline of case %s skipped this run: %s", case_id, e)
        return changed

    def search_cases(self, query: CaseQuery, after_case: str | None = None) -> list[CaseView]:
        """The tenant's cases matching ``query`` (see :class:`CaseQuery`), one keyset page;
        ``after_case`` (the last case of the previous page) sets ``query.after``.

        Raises:
            CaseNotFound: ``after_case`` is no case of the tenant.
        """
        with self._uow() as uow:
            if after_case is not None:
                last = self._load(uow, query.tenant_id, after_case)
                query = replace(query, after=(last.opened_at, last.id))
            return [CaseView.of(c) for c in uow.cases.search(query)]

    def list_evidence(self, tenant_id: str, case_id: str) -> list[EvidenceView]:
        """The case's evidence items, oldest first. Raises CaseNotFound."""
        with self._uow() as uow:
            self._load(uow, tenant_id, case_id)
            return uow.evidence.list(tenant_id, case_id)

    def evidence_content(self, tenant_id: str, case_id: str, evidence_id: str) -> bytes:
        """The content of one evidence item. Raises CaseNotFound, EvidenceNotFound."""
        with self._uow() as uow:
            self._load(uow, tenant_id, case_id)
            content = uow.evidence.content(tenant_id, case_id, evidence_id)
        if content is None:
            raise EvidenceNotFound(case_id, evidence_id)
        return content

    def get_case(self, tenant_id: str, case_id: str) -> CaseView:
        """Return the case as the tenant sees it. Raises CaseNotFound."""
        with self._uow() as uow:
            return CaseView.of(self._load(uow, tenant_id, case_id))

    def purge_idempotency_records(self, limit: int = 1000) -> int:
        """Delete up to ``limit`` expired idempotency records; return how many."""
        with self._uow() as uow:
            return self.idempotency.purge(uow.idempotency, limit)

    # --- saga requests (unit of work owned by the consumer runtime) -------------------

    def close_case(self, uow: UnitOfWork, cmd: CloseCase) -> bool:
        """Close a submitted or appealed case (CaseClosed v1); False if it was already closed identically.

        Raises:
            CaseNotFound, InvalidTransition, CaseValidationError, ConcurrencyError.
        """
        case = self._load(uow, cmd.tenant_id, cmd.case_id)
        changed = case.close(outcome=cmd.outcome, penalty_cents=cmd.penalty_cents,
                             actor_id=cmd.actor_id, at=self._clock.now())
        if changed:
            self._save(uow, case, cmd.causation)
        return changed

    def return_case(self, uow: UnitOfWork, cmd: ReturnCase) -> bool:
        """Return a submitted case (CaseReturned v1); False if it was already returned.

        Raises:
            CaseNotFound, InvalidTransition, CaseValidationError, ConcurrencyError.
        """
        case = self._load(uow, cmd.tenant_id, cmd.case_id)
        changed = case.return_(reason=cmd.reason, actor_id=cmd.actor_id, at=self._clock.now())
        if changed:
            self._save(uow, case, cmd.causation)
        return changed

    # --- internals --------------------------------------------------------------------

    @staticmethod
    def _load(uow: UnitOfWork, tenant_id: str, case_id: str) -> Case:
        case = uow.cases.get(tenant_id, case_id)
        if case is None:
            raise CaseNotFound(case_id)
        return case

    @staticmethod
    def _save(uow: UnitOfWork, case: Case, causation: Causation) -> None:
        uow.cases.update(case)
        uow.outbox.append(to_envelopes(case.pull_events(), causation,
                                       case.content.reporter_email))

    def _replay(self, uow: UnitOfWork, request: IdempotentRequest | None) -> StoredResponse | None:
        return self.idempotency.begin(uow.idempotency, request)

    def _respond(self, uow: UnitOfWork, request: IdempotentRequest | None,
                 response: StoredResponse) -> StoredResponse:
        return self.idempotency.complete(uow.idempotency, request, response)
