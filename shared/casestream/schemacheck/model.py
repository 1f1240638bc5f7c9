"""Result types of the schema check: findings, the report, and the input-error exception.

Pure. A :class:`Finding` is one problem with a rule id (see ``rules.RULES``), the subject and
versions concerned, the field path inside the message schema (``payload.summary``), a
one-sentence message and a fix hint. Errors fail the check (exit 1); warnings do not.
:class:`CheckInputError` is bad input (malformed file, unknown subject or git ref, registry
down): exit 2.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from casestream.errors import SchemaError
from casestream.schemacheck.rules import hint_for

__all__ = ["EXIT_INCOMPATIBLE", "EXIT_INPUT", "EXIT_OK", "CheckInputError", "Finding", "Report", "finding_for", "line_of"]

EXIT_OK = 0
EXIT_INCOMPATIBLE = 1
EXIT_INPUT = 2


class CheckInputError(SchemaError):
    """The check cannot run: ``target`` (a file, git ref or URL) is missing, malformed or
    unreachable; ``line`` is the 1-based line in a file target (0 when unknown)."""

    def __init__(self, message: str, *, target: str | None = None, line: int = 0):
        super().__init__(f"{target}: {message}" if target else message)
        self.target = target
        self.line = line


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One problem found by the check.

    Attributes:
        rule: rule id, e.g. ``reader-field-missing-default`` (``schemacheck.rules.RULES``).
        subject: subject (record full name), or ``""`` for catalog-wide findings.
        versions: ``"v3"`` or ``"v2->v3"`` (``"registry v2 (id 7)->v3"`` against a registry).
        path: field path inside the message schema (``payload.priority``), ``""`` for the record.
        message: what is wrong, one sentence.
        hint: how to fix it.
        mode: the compatibility level that was checked (empty for single-schema rules).
        severity: ``"error"`` (fails) or ``"warning"``.
        file: schema file to annotate (as given on the command line, e.g. ``schemas/case/X.v3.avsc``).
        line: 1-based line in ``file`` (0 when unknown).
        diff: unified diff (immutability findings).
    """

    rule: str
    subject: str
    versions: str
    path: str
    message: str
    hint: str
    mode: str = ""
    severity: str = "error"
    file: str = ""
    line: int = 0
    diff: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every attribute."""
        return asdict(self)


@dataclass(slots=True, kw_only=True)
class Report:
    """Outcome of one run. ``exit_code`` is 0 (no errors) or 1 (errors); input errors raise instead."""

    findings: list[Finding] = field(default_factory=list)
    subjects: int = 0
    versions: int = 0
    pairs: int = 0
    seconds: float = 0.0
    checked: list[str] = field(default_factory=list)
    checked_subjects: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        """Findings of severity error."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        """Findings of severity warning."""
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def exit_code(self) -> int:
        """0 when there is no error finding, else 1."""
        return EXIT_INCOMPATIBLE if self.errors else EXIT_OK


def line_of(text: str, path: str) -> int:
    """1-based line of the declaration of the last field in ``path`` inside ``text`` (1 if not found)."""
    name = path.rsplit(".", 1)[-1] if path else ""
    if name:
        m = re.search(r'"name"\s*:\s*"' + re.escape(name) + '"', text)
        if m:
            return text.count("\n", 0, m.start()) + 1
    return 1


def finding_for(
    rule: str,
    *,
    subject: str,
    versions: str,
    path: str,
    message: str,
    mode: str = "",
    file: str = "",
    text: str = "",
    severity: str = "error",
    hint: str | None = None,
    diff: str = "",
) -> Finding:
    """Build a :class:`Finding`, filling the default hint of ``rule`` and the line of ``path`` in ``text``."""
    return Finding(
        rule=rule,
        subject=subject,
        versions=versions,
        path=path,
        message=message,
        hint=hint if hint is not None else hint_for(rule),
        mode=mode,
        severity=severity,
        file=file,
        line=line_of(text, path) if text else 0,
        diff=diff,
    )
