"""Render a schema-check report (or an input error) as text, JSON, GitHub annotations, JUnit XML or SARIF.

Pure. ``github`` emits one ``::error file=...,line=...,title=...::message`` (or ``::warning``)
per finding, with ``%``, CR, LF escaped as GitHub's workflow-command syntax requires
(docs.github.com, "Workflow commands for GitHub Actions": setting an error message), then a
plain summary line. ``junit``: one ``<testcase>`` per subject checked (a ``<failure>`` per
error finding), the JUnit XML schema CI servers read (Jenkins, GitLab, GitHub test
reporters). ``sarif``: SARIF 2.1.0 (OASIS), one ``result`` per finding with its rule,
level and physical location, for code-scanning uploads. An input error (exit 2) is rendered
in the same format by :func:`render_error`.
"""

from __future__ import annotations

import json
from xml.sax.saxutils import quoteattr

from casestream.schemacheck.model import EXIT_INPUT, CheckInputError, Finding, Report

__all__ = ["FORMATS", "render", "render_error"]

FORMATS = ("text", "json", "github", "junit", "sarif")


def _summary(report: Report) -> str:
    e, w = len(report.errors), len(report.warnings)
    verdict = "FAILED" if e else "ok"
    return (
        f"schemas check {verdict}: {report.subjects} subjects, {report.versions} versions, "
        f"{report.pairs} pairs checked in {report.seconds:.2f} s; {e} error(s), {w} warning(s)"
    )


def _where(f: Finding) -> str:
    head = f.subject or "catalog"
    if f.versions:
        head += f" {f.versions}"
    if f.mode:
        head += f" [{f.mode}]"
    return head


def _text(report: Report, verbose: bool) -> str:
    lines: list[str] = []
    if verbose:
        lines.extend(f"checked {c}" for c in report.checked)
    for f in report.findings:
        path = f" {f.path}:" if f.path else ""
        lines.append(f"{f.severity}: {_where(f)}{path} {f.message} ({f.rule})")
        if f.hint:
            lines.append(f"    fix: {f.hint}")
        if f.file:
            lines.append(f"    at {f.file}" + (f":{f.line}" if f.line else ""))
        if f.diff:
            lines.extend("    " + d for d in f.diff.rstrip("\n").splitlines())
    lines.append(_summary(report))
    return "\n".join(lines)


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def _github(report: Report) -> str:
    lines = []
    for f in report.findings:
        props = []
        if f.file:
            props.append(f"file={_escape_prop(f.file)}")
            if f.line:
                props.append(f"line={f.line}")
        props.append(f"title={_escape_prop(f'{_where(f)} {f.rule}')}")
        body = (f"{f.path}: " if f.path else "") + f.message
        if f.hint:
            body += f"\nfix: {f.hint}"
        if f.diff:
            body += "\n" + f.diff
        level = "error" if f.severity == "error" else "warning"
        lines.append(f"::{level} {','.join(props)}::{_escape_data(body)}")
    lines.append(_summary(report))
    return "\n".join(lines)


def _junit(report: Report) -> str:
    by_subject: dict[str, list[Finding]] = {}
    for f in report.findings:
        by_subject.setdefault(f.subject or "(repository)", []).append(f)
    names = list(dict.fromkeys([*report.checked_subjects, *by_subject]))
    cases = []
    failures = 0
    for name in names:
        errors = [f for f in by_subject.get(name, []) if f.severity == "error"]
        failures += bool(errors)
        body = "".join(
            f"<failure type={quoteattr(f.rule)} message={quoteattr(f.message)}>"
            f"{_xml_text(_finding_text(f))}</failure>" for f in errors[:1])
        warn = [f for f in by_subject.get(name, []) if f.severity != "error"]
        if errors[1:] or warn:
            body += f"<system-out>{_xml_text(chr(10).join(_finding_text(f) for f in [*errors[1:], *warn]))}</system-out>"
        cases.append(f'  <testcase classname="casestream.schemas" name={quoteattr(name)}>{body}</testcase>')
    head = (f'<testsuite name="casestream schemas check" tests="{len(names)}" failures="{failures}" '
            f'errors="0" time="{report.seconds:.3f}">')
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>", head, *cases, "</testsuite>",
                      "</testsuites>"])


def _xml_text(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _finding_text(f: Finding) -> str:
    out = f"{_where(f)}{' ' + f.path + ':' if f.path else ''} {f.message} ({f.rule})"
    if f.hint:
        out += f"\nfix: {f.hint}"
    if f.file:
        out += f"\nat {f.file}" + (f":{f.line}" if f.line else "")
    return out


def _sarif(report: Report) -> str:
    from casestream.schemacheck.rules import RULES

    used = sorted({f.rule for f in report.findings})
    rules = [{"id": r, "shortDescription": {"text": RULES[r].title if r in RULES else r},
              "help": {"text": RULES[r].hint if r in RULES else ""},
              "properties": {"source": RULES[r].source if r in RULES else ""}} for r in used]
    results = []
    for f in report.findings:
        result: dict = {"ruleId": f.rule, "level": "error" if f.severity == "error" else "warning",
                        "message": {"text": f"{_where(f)}{' ' + f.path + ':' if f.path else ''} {f.message}"
                                            + (f" Fix: {f.hint}" if f.hint else "")}}
        if f.file:
            loc: dict = {"artifactLocation": {"uri": f.file}}
            if f.line:
                loc["region"] = {"startLine": f.line}
            result["locations"] = [{"physicalLocation": loc}]
        results.append(result)
    return json.dumps(_sarif_doc(rules, results, []), indent=2)


def _sarif_doc(rules: list, results: list, notifications: list) -> dict:
    run: dict = {"tool": {"driver": {"name": "casestream schemas check", "rules": rules}},
                 "results": results}
    if notifications:
        run["invocations"] = [{"executionSuccessful": False, "toolExecutionNotifications": notifications}]
    return {"$schema": "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json", "version": "2.1.0", "runs": [run]}


def render_error(error: CheckInputError, fmt: str = "text") -> str:
    """An input error (exit 2) in ``fmt``: ``text`` is ``error: <target>: <message>``; ``json``
    ``{"ok": false, "exit_code": 2, "error": {"message", "target"}, "findings": []}``;
    ``github`` one ``::error`` annotation (with ``file=`` when the target is a file); ``junit`` one
    test case with an ``<error>``; ``sarif`` a failed invocation with a notification."""
    target = error.target or ""
    file = target if target.endswith((".avsc", ".toml", ".json")) else ""
    message = str(error)
    if fmt == "json":
        return json.dumps({"ok": False, "exit_code": EXIT_INPUT,
                           "error": {"message": message, "target": target}, "findings": []}, indent=2)
    if fmt == "github":
        props = f"file={_escape_prop(file)}," if file else ""
        if file and getattr(error, "line", 0):
            props += f"line={error.line},"
        return f"::error {props}title=schemas check input error::{_escape_data(message)}"
    if fmt == "junit":
        return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>",
                          '<testsuite name="casestream schemas check" tests="1" failures="0" errors="1">',
                          f'  <testcase classname="casestream.schemas" name="input"><error type="input-error" '
                          f"message={quoteattr(message)}>{_xml_text(message)}</error></testcase>",
                          "</testsuite>", "</testsuites>"])
    if fmt == "sarif":
        note: dict = {"level": "error", "message": {"text": message}}
        if file:
            location: dict = {"artifactLocation": {"uri": file}}
            if getattr(error, "line", 0):
                location["region"] = {"startLine": error.line}
            note["locations"] = [{"physicalLocation": location}]
        return json.dumps(_sarif_doc([], [], [note]), indent=2)
    return f"error: {message}"


def render(report: Report, fmt: str = "text", *, verbose: bool = False) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`). Raises ValueError for another format.

    JSON shape: ``{"ok": bool, "exit_code": 0|1, "subjects": n, "versions": n, "pairs": n,
    "seconds": s, "errors": n, "warnings": n, "subject_names": [...], "findings": [Finding.to_dict(), ...]}``
    (+ ``"checked"`` when verbose).
    """
    if fmt == "text":
        return _text(report, verbose)
    if fmt == "github":
        return _github(report)
    if fmt == "junit":
        return _junit(report)
    if fmt == "sarif":
        return _sarif(report)
    if fmt == "json":
        doc = {
            "ok": not report.errors,
            "exit_code": report.exit_code,
            "subjects": report.subjects,
            "versions": report.versions,
            "pairs": report.pairs,
            "seconds": round(report.seconds, 3),
            "errors": len(report.errors),
            "warnings": len(report.warnings),
            "subject_names": list(report.checked_subjects),
            "findings": [f.to_dict() for f in report.findings],
        }
        if verbose:
            doc["checked"] = list(report.checked)
        return json.dumps(doc, indent=2)
    raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
