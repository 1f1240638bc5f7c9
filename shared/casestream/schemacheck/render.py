"""Render a schema-check report as text, JSON or GitHub Actions workflow commands.

Pure. ``github`` emits one ``::error file=...,line=...,title=...::message`` (or ``::warning``)
per finding, with ``%``, CR, LF escaped as GitHub's workflow-command syntax requires
(docs.github.com, "Workflow commands for GitHub Actions": setting an error message), then a
plain summary line.
"""

from __future__ import annotations

import json

from casestream.schemacheck.model import Finding, Report

__all__ = ["FORMATS", "render"]

FORMATS = ("text", "json", "github")


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


def render(report: Report, fmt: str = "text", *, verbose: bool = False) -> str:
    """The report in ``fmt`` (one of :data:`FORMATS`). Raises ValueError for another format.

    JSON shape: ``{"ok": bool, "exit_code": 0|1, "subjects": n, "versions": n, "pairs": n,
    "seconds": s, "errors": n, "warnings": n, "findings": [Finding.to_dict(), ...]}``
    (+ ``"checked"`` when verbose).
    """
    if fmt == "text":
        return _text(report, verbose)
    if fmt == "github":
        return _github(report)
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
            "findings": [f.to_dict() for f in report.findings],
        }
        if verbose:
            doc["checked"] = list(report.checked)
        return json.dumps(doc, indent=2)
    raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
