"""The demo workload: real cases through the live suite, journeys printed, trails checked.

``python -m services.demo`` (what ``make demo`` runs after starting the infrastructure)
starts the five services as processes (``--replicas N``, ``make demo REPLICAS=N``: N
instances of each, sharing databases, consumer groups and outbox shards; instance i's
consumers join as static group members ``CASESTREAM_INSTANCE_ID=demo-i``), opens and submits cases over the case service's
HTTP API, waits until each case reaches a final state, reads each case's audit timeline
and prints the journey, then a summary line such as::

    demo: 25/25 cases reached a final state (15 closed, 5 returned ...) in 14.2 s

Then it drives the regulator's journeys (``services.journeys``: no violation, violation with
a PDF notice, decision failure returned, withdrawal, appeal upheld -> correction notice,
appeal rejected -> party told, supervisor correction, evidence overdue escalated to manual
review; the case service runs with ``journeys.DEMO_CASE_SETTINGS`` unless those
variables are set), prints each, and keeps one
notice PDF at ``--notice-pdf`` (default ``.local/demo-notice.pdf``, taken from the SMTP
sink's maildir, ``CASESTREAM_SMTP_MAILDIR``) and the upheld appeal's correction notice PDF
beside it (``demo-correction.pdf``).

It exits 0 only if every case reached a final state, every audit trail is complete and
every journey is complete.
The end-to-end tests reuse :func:`open_and_submit`, :func:`wait_final` and
:func:`check_trail`.

The case mix is deterministic: the decision service fails any case whose title contains
``[fail-decision]`` (the saga then returns the case: compensation); severity >= 3 with
evidence is a violation (notice sent by SMTP, then closed); the rest close with no violation.
"""

from __future__ import annotations

import argparse
import email.policy
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from casestream.service import CONSOLE_HINT, ServiceStack, StackError, console_process, replica_env, service_port

#: The suite's services, the ones a case's journey passes through.
SUITE = ("case", "audit", "saga", "decision", "notification")

FINAL_CASE_STATES = frozenset({"closed", "returned"})

EXPECTED_TRAIL: dict[str, tuple[str, ...]] = {
    "violation": ("CaseOpened", "CaseSubmitted", "DecisionRequested", "ViolationDetermined",
                  "PenaltyProposed", "NoticeRequested", "NoticeIssued", "CaseCloseRequested", "CaseClosed",
                  "SagaCompleted"),
    "no_violation": ("CaseOpened", "CaseSubmitted", "DecisionRequested", "NoViolationFound",
                     "CaseCloseRequested", "CaseClosed", "SagaCompleted"),
    "decision_failed": ("CaseOpened", "CaseSubmitted", "DecisionRequested", "DecisionFailed",
                        "CaseReturnRequested", "CaseReturned", "SagaCompensated"),
}
"""Event types every complete audit trail contains, by expected outcome, in causal order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CaseSpec:
    """One case to drive: its request body and the outcome the rules should give."""

    title: str
    severity: int
    evidence_count: int
    expected: str  # a key of EXPECTED_TRAIL
    tenant: str = "tenant-a"

    def body(self) -> dict[str, object]:
        return {
            "title": self.title,
            "summary": f"Inspection report for {self.title}",
            "severity": self.severity,
            "evidence_count": self.evidence_count,
            "reporter_email": "inspector@example.org",
            "priority": "NORMAL",
        }


@dataclass(slots=True)
class CaseRun:
    """A driven case: the spec, the case id, and what was observed."""

    spec: CaseSpec
    case_id: str
    status: str = "submitted"
    trail: tuple[str, ...] = ()


def case_mix(count: int, *, failures: int | None = None) -> list[CaseSpec]:
    """A deterministic mix of ``count`` cases: a fifth decision failures, then violations
    and no-violations alternating."""
    failures = count // 5 if failures is None else failures
    specs = []
    for i in range(count):
        if i < failures:
            specs.append(CaseSpec(title=f"Case {i:03d} [fail-decision]", severity=4,
                                  evidence_count=2, expected="decision_failed"))
        elif i % 2 == 0:
            specs.append(CaseSpec(title=f"Case {i:03d} unlicensed trading", severity=4,
                                  evidence_count=1 + i % 3, expected="violation"))
        else:
            specs.append(CaseSpec(title=f"Case {i:03d} late filing", severity=1,
                                  evidence_count=0, expected="no_violation"))
    return specs


def case_url(path: str = "") -> str:
    return f"http://127.0.0.1:{service_port('case')}{path}"


def audit_url(path: str = "") -> str:
    return f"http://127.0.0.1:{service_port('audit')}{path}"


def headers(tenant: str, **extra: str) -> dict[str, str]:
    """Request headers acting as officer ``demo-officer`` of ``tenant``, plus ``extra``.

    The bearer token is minted locally (HS256, microseconds) with the key the services
    verify with: ``CASESTREAM_AUTH_*``, by default the development key (``casestream.auth.tokens``).
    """
    from casestream.auth import ROLE_OFFICER, dev_token

    token = dev_token(tenant, (ROLE_OFFICER,), subject="demo-officer")
    return {"Authorization": f"Bearer {token}", **extra}


def open_and_submit(client: httpx.Client, spec: CaseSpec, base: str | None = None) -> CaseRun:
    """Open a case and submit it with an Idempotency-Key through the case service at ``base``
    (default: :func:`case_url`); return the run.

    Raises:
        httpx.HTTPStatusError: the case service refused either request.
    """
    base = case_url() if base is None else base
    opened = client.post(f"{base}/cases", json=spec.body(), headers=headers(spec.tenant))
    opened.raise_for_status()
    case_id = opened.json()["id"]
    submitted = client.post(f"{base}/cases/{case_id}/submit", json={},
                            headers=headers(spec.tenant, **{"Idempotency-Key": str(uuid.uuid4())}))
    submitted.raise_for_status()
    return CaseRun(spec, case_id)


def case_status(client: httpx.Client, run: CaseRun) -> str:
    response = client.get(case_url(f"/cases/{run.case_id}"), headers=headers(run.spec.tenant))
    response.raise_for_status()
    return response.json()["status"]


def audit_trail(client: httpx.Client, run: CaseRun) -> tuple[str, ...]:
    response = client.get(audit_url(f"/audit/cases/{run.case_id}"), headers=headers(run.spec.tenant))
    if response.status_code == 404:
        return ()
    response.raise_for_status()
    return tuple(e["event_type"] for e in response.json()["events"])


def check_trail(run: CaseRun) -> list[str]:
    """Problems with ``run.trail``: missing expected events, or events recorded twice."""
    problems = []
    expected = EXPECTED_TRAIL[run.spec.expected]
    missing = [t for t in expected if t not in run.trail]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    doubled = sorted({t for t in run.trail if run.trail.count(t) > 1})
    if doubled:
        problems.append(f"recorded twice: {', '.join(doubled)}")
    return problems


def wait_final(client: httpx.Client, runs: Sequence[CaseRun], timeout_s: float) -> None:
    """Poll until every case is in a final state with a complete audit trail, or time out."""
    deadline = time.monotonic() + timeout_s
    pending = list(runs)
    while pending and time.monotonic() < deadline:
        still = []
        for run in pending:
            try:
                run.status = case_status(client, run)
                if run.status in FINAL_CASE_STATES:
                    run.trail = audit_trail(client, run)
            except httpx.HTTPError:
                still.append(run)  # a restarting service is not a verdict
                continue
            if run.status not in FINAL_CASE_STATES or check_trail(run):
                still.append(run)
        pending = still
        if pending:
            time.sleep(0.25)


def summarize(runs: Iterable[CaseRun], elapsed_s: float) -> tuple[bool, str]:
    runs = list(runs)
    final = [r for r in runs if r.status in FINAL_CASE_STATES]
    closed = sum(r.status == "closed" for r in runs)
    returned = sum(r.status == "returned" for r in runs)
    incomplete = [r for r in runs if check_trail(r)]
    ok = len(final) == len(runs) and not incomplete
    line = (f"demo: {len(final)}/{len(runs)} cases reached a final state "
            f"({closed} closed, {returned} returned), "
            f"{len(runs) - len(incomplete)}/{len(runs)} audit trails complete, in {elapsed_s:.1f} s")
    return ok, line


def print_journey(run: CaseRun) -> None:
    problems = check_trail(run)
    mark = "ok " if not problems and run.status in FINAL_CASE_STATES else "BAD"
    print(f"{mark} {run.spec.title:<34} {run.case_id}  {run.status:<9} "
          f"{' → '.join(run.trail) or '(no audit trail)'}")
    for problem in problems:
        print(f"      {problem}")


def keep_notice_pdf(case_id: str, target: Path, kind: str = "notice") -> Path | None:
    """Copy the PDF attached to the ``kind`` notice (``notice`` or ``correction``) of
    ``case_id`` (from the SMTP sink's maildir, ``CASESTREAM_SMTP_MAILDIR``) to ``target``;
    None if no such mail is there."""
    import email
    import os

    maildir = Path(os.environ.get("CASESTREAM_SMTP_MAILDIR", ".local/smtp/maildir"))
    for path in sorted(maildir.glob("*.eml")):
        message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        if (message.get("X-Casestream-Case-Id") != case_id
                or message.get("X-Casestream-Notice-Kind", "notice") != kind):
            continue
        for part in message.iter_attachments():  # type: ignore[attr-defined]
            if part.get_content_type() == "application/pdf":
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(part.get_content())
                return target
    return None


def run_journeys(client: httpx.Client, timeout_s: float, notice_pdf: Path) -> bool:
    """Drive every regulator journey, print each, keep one notice PDF; True if all complete."""
    from services import journeys

    started = time.monotonic()
    runs = [journeys.drive(client, j) for j in journeys.JOURNEYS]
    print(f"demo: {len(runs)} regulator journeys driven; waiting for them ...", flush=True)
    journeys.wait_journeys(client, runs, timeout_s)
    for run in runs:
        journeys.print_journey(run)
    complete = sum(not r.problems() for r in runs)
    print(f"demo: {complete}/{len(runs)} regulator journeys complete in "
          f"{time.monotonic() - started:.1f} s")
    violation = next(r for r in runs if r.journey.name == "violation")
    kept = keep_notice_pdf(violation.case_id, notice_pdf)
    print(f"demo: notice PDF of case {violation.case_id} kept at {kept}" if kept else
          f"demo: no notice PDF found for case {violation.case_id}")
    upheld = next(r for r in runs if r.journey.name == "appeal_upheld")
    correction = keep_notice_pdf(upheld.case_id, notice_pdf.with_name("demo-correction.pdf"),
                                 kind="correction")
    print(f"demo: correction notice PDF of case {upheld.case_id} kept at {correction}"
          if correction else f"demo: no correction notice PDF found for case {upheld.case_id}")
    return complete == len(runs) and kept is not None and correction is not None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.demo",
        description="Start the five services, drive cases through them, print each journey.")
    parser.add_argument("--cases", type=int, default=25, help="number of cases (default 25)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for all cases to finish (default 120)")
    parser.add_argument("--replicas", type=int, default=1, metavar="N",
                        help="instances of every service (default 1): separate processes"
                             " sharing their service's database, consumer groups and outbox"
                             " shards, instance i on the service's port + 100*(i-1); cases"
                             " are opened through the case instances in turn")
    parser.add_argument("--log-dir", default=".local/demo-logs",
                        help="where service logs go (default .local/demo-logs)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the services and the console running after the summary, until Ctrl-C")
    parser.add_argument("--no-console", action="store_true",
                        help="do not start the operations console (casestream console)")
    parser.add_argument("--notice-pdf", default=".local/demo-notice.pdf",
                        help="where one notice PDF is kept (default .local/demo-notice.pdf)")
    args = parser.parse_args(argv)
    if not 1 <= args.replicas <= 5:
        parser.error("--replicas must be 1..5")

    import os
    from contextlib import ExitStack

    from services.journeys import DEMO_CASE_SETTINGS

    for name, value in DEMO_CASE_SETTINGS.items():  # the overdue journey escalates in seconds
        os.environ.setdefault(name, value)
    def instance_env(i: int) -> dict[str, str]:
        env = replica_env(SUITE, i)
        if args.replicas > 1:  # static group members: a restarted instance takes its partitions back
            env["CASESTREAM_INSTANCE_ID"] = f"{os.environ.get('CASESTREAM_INSTANCE_ID', 'demo')}-{i}"
        return env

    stacks = [ServiceStack(env=instance_env(i),
                           log_dir=Path(args.log_dir) / f"instance-{i}" if args.replicas > 1
                           else Path(args.log_dir))
              for i in range(1, args.replicas + 1)]
    later = ExitStack()
    try:
        print(f"demo: starting the {len(SUITE)} suite services"
              + (f", {args.replicas} instances of each," if args.replicas > 1 else "")
              + f" (logs in {args.log_dir}) ...", flush=True)
        stacks[0].register_schemas()
        for stack in stacks:  # one instance of each at a time: fewer processes importing at once
            for name in SUITE:
                stack.start(name)
            stack.wait_ready(list(SUITE))
        bases = [f"http://127.0.0.1:{service_port('case', stack.env)}" for stack in stacks]
        if not args.no_console:
            base = later.enter_context(console_process(log_dir=Path(args.log_dir)))
            print(f"demo: console on {base} ({CONSOLE_HINT})", flush=True)
        started = time.monotonic()
        with httpx.Client(timeout=10.0) as client:
            runs = [open_and_submit(client, spec, bases[i % len(bases)])
                    for i, spec in enumerate(case_mix(args.cases))]
            print(f"demo: {len(runs)} cases opened and submitted; waiting for their journeys ...",
                  flush=True)
            wait_final(client, runs, args.timeout)
            elapsed = time.monotonic() - started
            for run in runs:
                print_journey(run)
            ok, line = summarize(runs, elapsed)
            print(line, flush=True)
            journeys_ok = run_journeys(client, args.timeout, Path(args.notice_pdf))
        if args.keep:
            print("demo: services and console keep running (--keep); Ctrl-C stops them", flush=True)
            try:
                while True:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
        return 0 if ok and journeys_ok else 1
    except StackError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    except httpx.HTTPError as e:
        print(f"demo: the case service refused a request: {e}", file=sys.stderr)
        return 1
    finally:
        later.close()
        for stack in reversed(stacks):
            stack.stop_all()


if __name__ == "__main__":
    raise SystemExit(main())
