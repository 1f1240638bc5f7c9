"""Run the schema check over a catalog: parse, lint, compatibility per level, history, registry.

Entry point :func:`check_catalog`. Order per subject: single-schema rules on every file
(:mod:`.lint`), then both parsers (fastavro and Apache avro) on every composed schema, then
every version > 1 against earlier versions under the subject's level (:mod:`.compat`).
Optional: ``against`` (git ref, :mod:`.history`) and ``registry`` (:mod:`.remote`).

Raises :class:`~casestream.schemacheck.model.CheckInputError` for bad input (exit 2); returns
a :class:`~casestream.schemacheck.model.Report` otherwise (exit 0 or 1).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fastavro import parse_schema

from casestream.events.catalog import Catalog, CatalogError, SubjectSpec, load_catalog
from casestream.schemacheck.compat import check_history, parse_avro
from casestream.schemacheck.lint import lint_schema
from casestream.schemacheck.history import compare_to_ref
from casestream.schemacheck.model import CheckInputError, Finding, Report, finding_for, line_of
from casestream.schemacheck.remote import compare_to_registry
from casestream.errors import ConfigError

__all__ = ["check_catalog", "finding_for", "line_of", "load_for_check", "upcaster_findings"]


def upcaster_findings(catalog: Catalog, subjects: Iterable[str], display: str) -> list[Finding]:
    """One ``upcaster-missing`` error per version N > 1 of ``subjects`` that the catalog's
    upcaster chain (``[catalog] upcasters``, :meth:`Catalog.upcaster_chain`; none: empty)
    cannot reach from N-1 — the chain the services' codec uses.

    Raises:
        CheckInputError: the ``upcasters`` reference does not resolve (exit 2).
    """
    try:
        steps = set(catalog.upcaster_chain().steps())
    except (ConfigError, CatalogError) as e:
        raise CheckInputError(f"[catalog] upcasters: {e}", target=f"{display}/catalog.toml") from e
    out = []
    for subject in subjects:
        spec = catalog.subjects[subject]
        for v in spec.versions[1:]:
            if (spec.event_type, v - 1) not in steps:
                out.append(finding_for(
                    "upcaster-missing", subject=subject, versions=f"v{v - 1}->v{v}", path="",
                    message=f"no upcaster {spec.event_type} v{v - 1}->v{v}: services refuse to "
                            f"start and a v{v - 1} event cannot be read as v{v}",
                    file=f"{display}/{spec.path_of(v)}"))
    return out


def load_for_check(schemas_dir: str | Path) -> Catalog:
    """Load the catalog; CatalogError -> CheckInputError naming the file (exit 2)."""
    try:
        return load_catalog(schemas_dir)
    except CatalogError as e:
        target = str(Path(schemas_dir) / e.path) if e.path and not Path(e.path).is_absolute() else e.path
        raise CheckInputError(e.detail, target=target) from e


class _SubjectCheck:
    def __init__(self, catalog: Catalog, spec: SubjectSpec, display: str):
        self.catalog = catalog
        self.spec = spec
        self.display = display

    def file(self, rel: str) -> str:
        return f"{self.display}/{rel}" if self.display else rel

    def lint(self, envelope_findings: bool) -> list[Finding]:
        out: list[Finding] = []
        spec, cat = self.spec, self.catalog
        if envelope_findings:
            for issue in lint_schema(cat.envelope):
                out.append(
                    finding_for(
                        issue.rule, subject="", versions="envelope", path=issue.path, message=issue.message,
                        file=self.file(cat.envelope_path), text=cat.envelope_text,
                    )
                )
        expected = f"{cat.namespace}.{spec.aggregate_type}.{spec.event_type}Payload"
        for v in spec.versions:
            sv = cat.versions[(spec.event_type, v)]
            for issue in lint_schema(sv.payload, path="payload"):
                out.append(
                    finding_for(
                        issue.rule, subject=spec.subject, versions=f"v{v}", path=issue.path,
                        message=issue.message, file=self.file(sv.path), text=sv.text,
                    )
                )
            name = str(sv.payload.get("name", ""))
            full = name if "." in name else f"{sv.payload.get('namespace', '')}.{name}"
            if full != expected:
                out.append(
                    finding_for(
                        "payload-name", subject=spec.subject, versions=f"v{v}", path="payload",
                        message=f"payload record is {full!r}, expected {expected!r}",
                        file=self.file(sv.path), text=sv.text,
                    )
                )
        return out

    def parse(self) -> list[Any]:
        parsed = []
        for v in self.spec.versions:
            sv = self.catalog.versions[(self.spec.event_type, v)]
            for parser in ("fastavro", "avro"):
                try:
                    if parser == "fastavro":
                        parse_schema(dict(sv.schema))
                    else:
                        parsed.append(parse_avro(sv.schema))
                except Exception as e:  # noqa: BLE001 - both parsers raise several types
                    raise CheckInputError(
                        f"not a valid Avro schema ({parser}: {type(e).__name__}: {e})", target=self.file(sv.path)
                    ) from e
        return parsed

    def compat(self, parsed: list[Any], report: Report) -> list[Finding]:
        spec = self.spec
        out: list[Finding] = []
        labels = [f"v{v}" for v in spec.versions]
        for pair, issues in check_history(parsed, spec.compatibility, labels=labels):
            report.pairs += 1
            new = max(pair.reader, pair.writer)
            old = min(pair.reader, pair.writer)
            sv = self.catalog.versions[(spec.event_type, spec.versions[new])]
            report.checked.append(f"{spec.subject} {labels[old]}->{labels[new]} {pair.direction}")
            for issue in issues:
                out.append(
                    finding_for(
                        issue.rule, subject=spec.subject, versions=f"{labels[old]}->{labels[new]}",
                        path=issue.path, message=f"{pair.direction}: {issue.message}",
                        mode=spec.compatibility, file=self.file(sv.path), text=sv.text,
                    )
                )
        return out


def check_catalog(
    schemas_dir: str | Path,
    *,
    subjects: Iterable[str] | None = None,
    against: str | None = None,
    registry: Any = None,
    display_dir: str | None = None,
) -> Report:
    """Check every subject (or ``subjects``) of the catalog in ``schemas_dir``.

    Args:
        schemas_dir: folder holding catalog.toml.
        subjects: restrict to these subjects (full names); unknown -> CheckInputError.
        against: a git ref; published versions there must be unchanged (:mod:`.history`).
        registry: a registry URL or a :class:`~casestream.events.registry.SchemaRegistry`; the working
            tree is checked against the subjects registered there (:mod:`.remote`).
        display_dir: how files are named in findings (default: ``schemas_dir`` as given).

    Returns:
        :class:`Report` (``exit_code`` 0 or 1).

    Raises:
        CheckInputError: malformed/missing file, unknown subject, bad git ref, registry down.
    """
    started = time.perf_counter()
    catalog = load_for_check(schemas_dir)
    display = display_dir if display_dir is not None else str(schemas_dir).rstrip("/")
    wanted = list(catalog.subjects)
    if subjects:
        unknown = [s for s in subjects if s not in catalog.subjects]
        if unknown:
            raise CheckInputError(
                f"unknown subject(s) {', '.join(unknown)}; known: {', '.join(catalog.subjects)}",
                target=f"{display}/catalog.toml",
            )
        wanted = [s for s in catalog.subjects if s in set(subjects)]
    report = Report()
    first = True
    for subject in wanted:
        sc = _SubjectCheck(catalog, catalog.subjects[subject], display)
        report.subjects += 1
        report.versions += len(sc.spec.versions)
        lint = sc.lint(envelope_findings=first)
        first = False
        report.findings.extend(lint)
        if any(f.severity == "error" for f in lint):
            continue
        report.findings.extend(sc.compat(sc.parse(), report))
    report.findings.extend(upcaster_findings(catalog, wanted, display))
    if against:
        report.findings.extend(compare_to_ref(catalog, schemas_dir, against, display=display, subjects=wanted))
    if registry is not None:
        report.findings.extend(compare_to_registry(catalog, registry, display=display, subjects=wanted))
    report.seconds = time.perf_counter() - started
    return report
