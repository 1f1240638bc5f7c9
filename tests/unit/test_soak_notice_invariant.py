"""The soak's "one notice per violating case" invariant reads the SMTP sink's maildir: a
correction notice or an appeal-rejection mail of the same case is not a second notice."""

from __future__ import annotations

from email.message import EmailMessage
from pathlib import Path
from types import SimpleNamespace

import pytest

from services.demo import CaseRun, CaseSpec
from services.soak import Checker


def mail(maildir: Path, name: str, case_id: str, kind: str | None,
         message_id: str | None = None) -> None:
    msg = EmailMessage()
    msg["To"] = "party@example.org"
    if message_id is not None:
        msg["Message-ID"] = message_id
    msg["X-Casestream-Case-Id"] = case_id
    if kind is not None:  # mails of earlier releases carry no kind: a notice
        msg["X-Casestream-Notice-Kind"] = kind
    msg.set_content(f"case {case_id}")
    (maildir / name).write_bytes(bytes(msg))


def run(case_id: str, violating: bool) -> CaseRun:
    spec = CaseSpec(title="t", severity=4 if violating else 1, evidence_count=1,
                    expected="violation" if violating else "no_violation")
    trail = ("CaseSubmitted", "ViolationDetermined") if violating else ("CaseSubmitted",)
    return CaseRun(spec=spec, case_id=case_id, trail=trail)


def checker(maildir: Path) -> Checker:
    return Checker(SimpleNamespace(env={}), {}, maildir)  # type: ignore[arg-type]


def test_corrections_and_rejections_do_not_count_as_notices(tmp_path: Path) -> None:
    mail(tmp_path, "1.eml", "case-a", "notice")
    mail(tmp_path, "2.eml", "case-a", "correction")
    mail(tmp_path, "3.eml", "case-b", None)
    mail(tmp_path, "4.eml", "case-b", "appeal_rejection")
    check = checker(tmp_path).notices([run("case-a", True), run("case-b", True),
                                       run("case-c", False)])
    assert check.ok, check.detail
    assert check.detail == "2 violating cases, 2 notices"


def test_a_second_notice_of_a_case_still_fails(tmp_path: Path) -> None:
    mail(tmp_path, "1.eml", "case-a", "notice")
    mail(tmp_path, "2.eml", "case-a", None)
    check = checker(tmp_path).notices([run("case-a", True)])
    assert not check.ok and "case-a: 2" in check.detail


def test_a_notice_mailed_again_with_its_message_id_is_one_notice(tmp_path: Path) -> None:
    # the sender died between the SMTP server's 250 and its commit: same notice, same Message-ID
    mail(tmp_path, "1.eml", "case-a", "notice", "<case-a@notice.casestream>")
    mail(tmp_path, "2.eml", "case-a", "notice", "<case-a@notice.casestream>")
    check = checker(tmp_path).notices([run("case-a", True)])
    assert check.ok, check.detail
    assert check.detail == "1 violating cases, 1 notices (1 sent again with the same Message-ID)"


def test_two_message_ids_for_one_case_are_two_notices(tmp_path: Path) -> None:
    mail(tmp_path, "1.eml", "case-a", "notice", "<case-a@notice.casestream>")
    mail(tmp_path, "2.eml", "case-a", "notice", "<other@notice.casestream>")
    check = checker(tmp_path).notices([run("case-a", True)])
    assert not check.ok and "case-a: 2" in check.detail
