"""The regulator's journeys through the live suite: each path a case can take, driven over
the case service's HTTP API, with the events its audit timeline must show in order.

Paths (:data:`JOURNEYS`; the decision rules of ``services.decision.domain.rules`` decide):

- ``no_violation``: assigned, reviewed, submitted; severity 1 -> no violation, closed;
- ``violation``: assigned, evidence requested and submitted, submitted; severity 4 with
  evidence -> violation, penalty proposed, notice (PDF attached) issued, closed;
- ``decision_failed``: the ``[fail-decision]`` marker -> the decision fails and the saga
  returns the case (compensation);
- ``withdrawn``: evidence requested, then the case is withdrawn before its decision;
- ``appeal_upheld``: a ``violation`` journey, then the party appeals within the window with
  grounds naming a licence: the appeal saga (a second saga, started by AppealSubmitted) has
  the appeal upheld (rule ``appeal-new-grounds``, ``services.decision.domain.appeal``), a
  correction notice (PDF) is sent — the first notice stays in the trail — and the case
  closes again without a penalty;
- ``appeal_rejected``: the same, with grounds naming no new evidence: the appeal is
  rejected, the party is told by mail and the case closes again with its penalty;
- ``corrected``: a ``violation`` journey, then a supervisor corrects the sent notice
  (``POST /cases/{id}/correction``): the notice-correction saga sends a correction notice
  (PDF) through the same path as an upheld appeal; the first notice stays in the trail;
- ``evidence_pending``: evidence requested and not (yet) submitted: the case waits, and the
  officer workload counts it overdue once the due date passed;
- ``evidence_overdue``: evidence due in :data:`SOON_S` seconds never arrives: the deadline
  worker reminds (EvidenceOverdue; the notification service mails the party one reminder,
  EvidenceReminderSent), then escalates to manual review (CaseEscalated) after
  ``CASESTREAM_CASE_EVIDENCE_GRACE_S`` (the demo and the e2e test run the case service with
  :data:`DEMO_CASE_SETTINGS`).

:func:`drive` runs one journey up to the point where the saga takes over, :func:`finish`
applies the step that follows the first saga's end (the appeal, with the journey's
``appeal_grounds``), :func:`wait_journeys` polls until
each case reached its final status and its timeline holds the expected events in order.
``python -m services.demo`` runs them after the case mix; ``tests/e2e`` asserts them.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx

from services.demo import audit_url, case_url, headers

EVIDENCE = b"%PDF-1.4\n% ledger of April (evidence sample)\n"

SOON_S = 2.0
"""Due date of the ``evidence_overdue`` journey's request, seconds ahead."""

DEMO_CASE_SETTINGS = {"CASESTREAM_CASE_EVIDENCE_GRACE_S": "2",
                      "CASESTREAM_CASE_DEADLINE_INTERVAL_S": "0.5"}
"""Case service settings that let the overdue journey escalate within seconds."""

_DECIDED = ("CaseSubmitted", "DecisionRequested")
_CLOSED = ("CaseCloseRequested", "CaseClosed", "SagaCompleted")
_VIOLATION = (*_DECIDED, "ViolationDetermined", "PenaltyProposed", "NoticeRequested",
              "NoticeIssued", *_CLOSED)
_EVIDENCED = ("CaseOpened", "CaseAssigned", "EvidenceRequested", "EvidenceSubmitted")
_VIOLATION_STEPS = ("assign", "request_evidence", "submit_evidence", "submit")

UPHOLDING_GROUNDS = "the licence for the depot was granted before the inspection"
"""Appeal grounds the decision rule upholds (they name a licence)."""
REJECTED_GROUNDS = "the penalty is too high for a first offence"
"""Appeal grounds the decision rule rejects (no new evidence, licence or permit)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Journey:
    """One path: how the case is opened, the workflow steps before the saga, the status it
    ends in, and the event types its audit timeline shows, in order."""

    name: str
    title: str
    severity: int
    steps: tuple[str, ...]
    final_status: str
    trail: tuple[str, ...]
    notices: int = 0
    corrections: int = 0
    appeal_grounds: str | None = None
    correction_reason: str | None = None

    @property
    def appeal(self) -> bool:
        """True if the party appeals once the first saga closed the case."""
        return self.appeal_grounds is not None

    @property
    def repeats(self) -> frozenset[str]:
        """Event types the trail may hold twice: the decision's announcement, and with an
        appeal the second saga's close (the case closes again)."""
        twice = {"ViolationDetermined", "PenaltyProposed"}
        if self.appeal:
            twice |= set(_CLOSED)
        if self.correction_reason is not None:
            twice.add("SagaCompleted")
        return frozenset(twice)


JOURNEYS: tuple[Journey, ...] = (
    Journey(name="no_violation", title="Late filing of the annual return", severity=1,
            steps=("assign", "review", "submit"), final_status="closed",
            trail=("CaseOpened", "CaseAssigned", "ReviewStarted", *_DECIDED, "NoViolationFound",
                   "CaseCloseRequested", "CaseClosed", "SagaCompleted")),
    Journey(name="violation", title="Unlicensed trading at the market", severity=4,
            steps=("assign", "request_evidence", "submit_evidence", "submit"),
            final_status="closed", notices=1,
            trail=("CaseOpened", "CaseAssigned", "EvidenceRequested", "EvidenceSubmitted",
                   *_VIOLATION)),
    Journey(name="decision_failed", title="Disputed licence [fail-decision]", severity=4,
            steps=("assign", "submit"), final_status="returned",
            trail=("CaseOpened", "CaseAssigned", *_DECIDED, "DecisionFailed",
                   "CaseReturnRequested", "CaseReturned", "SagaCompensated")),
    Journey(name="withdrawn", title="Complaint withdrawn by the reporter", severity=2,
            steps=("assign", "request_evidence", "withdraw"), final_status="withdrawn",
            trail=("CaseOpened", "CaseAssigned", "EvidenceRequested", "CaseWithdrawn")),
    Journey(name="appeal_upheld", title="Overcharging at the depot", severity=3,
            steps=_VIOLATION_STEPS, final_status="closed", notices=1, corrections=1,
            appeal_grounds=UPHOLDING_GROUNDS,
            trail=(*_EVIDENCED, *_VIOLATION, "AppealSubmitted", "AppealDecisionRequested",
                   "AppealUpheld", "CorrectionNoticeRequested", "CorrectionNoticeIssued",
                   *_CLOSED)),
    Journey(name="appeal_rejected", title="Short weight at the bakery", severity=3,
            steps=_VIOLATION_STEPS, final_status="closed", notices=1,
            appeal_grounds=REJECTED_GROUNDS,
            trail=(*_EVIDENCED, *_VIOLATION, "AppealSubmitted", "AppealDecisionRequested",
                   "AppealRejected", "AppealRejectionNoticeRequested",
                   "AppealRejectionNoticeSent", *_CLOSED)),
    Journey(name="corrected", title="Expired food licence at the kiosk", severity=3,
            steps=_VIOLATION_STEPS, final_status="closed", notices=1, corrections=1,
            correction_reason="the penalty was computed on the wrong severity",
            trail=(*_EVIDENCED, *_VIOLATION, "NoticeCorrectionOrdered",
                   "CorrectionNoticeRequested", "CorrectionNoticeIssued", "SagaCompleted")),
    Journey(name="evidence_overdue", title="Unanswered request for the ledger", severity=3,
            steps=("assign", "request_evidence_soon"), final_status="manual_review",
            trail=("CaseOpened", "CaseAssigned", "EvidenceRequested", "EvidenceOverdue",
                   "CaseEscalated")),
    Journey(name="evidence_pending", title="Missing hygiene certificate", severity=3,
            steps=("assign", "request_evidence"), final_status="awaiting_evidence",
            trail=("CaseOpened", "CaseAssigned", "EvidenceRequested")),
)


@dataclass(slots=True)
class JourneyRun:
    """A driven journey: the case id and what was observed."""

    journey: Journey
    case_id: str
    tenant: str
    officer: str
    status: str = ""
    trail: tuple[str, ...] = ()
    appealed: bool = False
    corrected: bool = False
    answers: list[int] = field(default_factory=list)

    def problems(self) -> list[str]:
        """What is wrong with the observed status and trail (empty: the journey is complete)."""
        out = []
        if self.status != self.journey.final_status:
            out.append(f"status {self.status or '?'}, expected {self.journey.final_status}")
        if not in_order(self.journey.trail, self.trail):
            out.append(f"timeline lacks, in order: {' → '.join(self.journey.trail)}")
        doubled = sorted({t for t in self.trail if self.trail.count(t) > 1
                          and t not in self.journey.repeats})
        if doubled:
            out.append(f"recorded twice: {', '.join(doubled)}")
        return out


def in_order(expected: Sequence[str], seen: Sequence[str]) -> bool:
    """True when ``expected`` is a subsequence of ``seen`` (same order, gaps allowed)."""
    it = iter(seen)
    return all(any(s == e for s in it) for e in expected)


def _write(client: httpx.Client, run: JourneyRun, path: str, body: dict[str, object] | None,
           version: int, *, supervisor: bool = False) -> int:
    extra = {"Idempotency-Key": str(uuid.uuid4()), "If-Match": f'"{version}"'}
    response = client.post(case_url(f"/cases/{run.case_id}/{path}"), json=body or {},
                           headers=supervisor_headers(run.tenant, **extra) if supervisor
                           else headers(run.tenant, **extra))
    response.raise_for_status()
    run.answers.append(response.status_code)
    return int(response.json()["version"])


def drive(client: httpx.Client, journey: Journey, *, tenant: str = "tenant-a",
          officer: str | None = None) -> JourneyRun:
    """Open a case and run ``journey``'s steps over HTTP (each with an Idempotency-Key and
    If-Match on the version the previous answer gave).

    Raises:
        httpx.HTTPStatusError: the case service refused a step.
    """
    body = {"title": journey.title, "summary": f"Inspection report: {journey.title}",
            "severity": journey.severity, "evidence_count": 1,
            "reporter_email": "party@example.org", "priority": "NORMAL"}
    opened = client.post(case_url("/cases"), json=body, headers=headers(tenant))
    opened.raise_for_status()
    run = JourneyRun(journey, opened.json()["id"], tenant, officer or f"officer-{journey.name}")
    version = 1
    due = (datetime.now(UTC) + timedelta(days=14)).isoformat()
    for step in journey.steps:
        match step:
            case "assign":
                version = _write(client, run, "assignment", {"officer_id": run.officer}, version)
            case "review":
                version = _write(client, run, "review", None, version)
            case "request_evidence":
                version = _write(client, run, "evidence-requests",
                                 {"description": "the sales ledger of April", "due_at": due},
                                 version)
            case "request_evidence_soon":
                soon = (datetime.now(UTC) + timedelta(seconds=SOON_S)).isoformat()
                version = _write(client, run, "evidence-requests",
                                 {"description": "the sales ledger of April", "due_at": soon},
                                 version)
            case "submit_evidence":
                version = _write(client, run, "evidence", {
                    "name": "ledger.pdf", "media_type": "application/pdf",
                    "content_base64": base64.b64encode(EVIDENCE).decode()}, version)
            case "withdraw":
                version = _write(client, run, "withdrawal", {"reason": "the reporter withdrew"},
                                 version)
            case "submit":
                version = _write(client, run, "submit", None, version)
    return run


def status_of(client: httpx.Client, run: JourneyRun) -> tuple[str, int]:
    """The case's status and version."""
    response = client.get(case_url(f"/cases/{run.case_id}"), headers=headers(run.tenant))
    response.raise_for_status()
    body = response.json()
    return body["status"], int(body["version"])


def timeline(client: httpx.Client, run: JourneyRun) -> tuple[str, ...]:
    """The event types of the case's audit timeline, in its order."""
    response = client.get(audit_url(f"/audit/cases/{run.case_id}"), headers=headers(run.tenant))
    if response.status_code == 404:
        return ()
    response.raise_for_status()
    return tuple(e["event_type"] for e in response.json()["events"])


def supervisor_headers(tenant: str, **extra: str) -> dict[str, str]:
    """Request headers acting as supervisor ``demo-supervisor`` of ``tenant``, plus ``extra``
    (the token minted as :func:`services.demo.headers` does)."""
    from casestream.auth import ROLE_SUPERVISOR, dev_token

    token = dev_token(tenant, (ROLE_SUPERVISOR,), subject="demo-supervisor")
    return {"Authorization": f"Bearer {token}", **extra}


def finish(client: httpx.Client, run: JourneyRun) -> None:
    """The step after the first saga, once the audit trail shows it completed (so the step
    follows it in the timeline): the party appeals (journeys with ``appeal_grounds``), or a
    supervisor corrects the sent notice (``correction_reason``); each once."""
    j = run.journey
    if (j.appeal_grounds is None or run.appealed) and (j.correction_reason is None
                                                       or run.corrected):
        return
    status, version = status_of(client, run)
    if status != "closed" or "SagaCompleted" not in timeline(client, run):
        return
    if j.appeal_grounds is not None:
        _write(client, run, "appeal", {"reason": j.appeal_grounds}, version)
        run.appealed = True
    else:
        _write(client, run, "correction", {"reason": j.correction_reason, "penalty_cents": 50_000},
               version, supervisor=True)
        run.corrected = True


def wait_journeys(client: httpx.Client, runs: Sequence[JourneyRun], timeout_s: float) -> None:
    """Poll until every run is complete (:meth:`JourneyRun.problems` empty) or time out;
    appeals are filed as their cases close."""
    deadline = time.monotonic() + timeout_s
    pending = list(runs)
    while pending and time.monotonic() < deadline:
        still = []
        for run in pending:
            try:
                finish(client, run)
                run.status, _ = status_of(client, run)
                run.trail = timeline(client, run)
            except httpx.HTTPError:
                still.append(run)  # a restarting service is not a verdict
                continue
            if run.problems():
                still.append(run)
        pending = still
        if pending:
            time.sleep(0.25)


def print_journey(run: JourneyRun) -> None:
    """One line per journey: ok/BAD, name, case id, status and the timeline."""
    problems = run.problems()
    print(f"{'ok ' if not problems else 'BAD'} {run.journey.name:<16} {run.case_id}  "
          f"{run.status:<10} {' → '.join(run.trail) or '(no audit trail)'}")
    for problem in problems:
        print(f"      {problem}")
