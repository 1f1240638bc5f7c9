"""Published versions are immutable: compare the working tree's catalog with a git ref.

A version present at the ref must be present now with the same schema (parsed JSON equality,
so re-indenting is fine but any change of fields, defaults, docs or names is not: the
registry already holds the old text). The envelope is part of every published version and
is compared the same way. Findings carry a unified diff.

Uses the ``git`` command line (``rev-parse``, ``ls-tree``, ``show``); a missing git, a path
outside a repository, or an unknown ref is a :class:`CheckInputError` (exit 2).
"""

from __future__ import annotations

import difflib
import json
import subprocess
from pathlib import Path

from casestream.events.catalog import Catalog, CatalogError, load_catalog
from casestream.schemacheck.model import CheckInputError, Finding, finding_for

__all__ = ["compare_to_ref"]


def _git(cwd: Path, *args: str) -> str:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=30
        )
    except FileNotFoundError as e:
        raise CheckInputError("git is not installed", target="git") from e
    except subprocess.TimeoutExpired as e:
        raise CheckInputError(f"git {' '.join(args)} timed out", target=str(cwd)) from e
    if proc.returncode != 0:
        raise CheckInputError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "git failed",
                              target=f"git {' '.join(args)}")
    return proc.stdout


def _diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), old_name, new_name)
    )


def compare_to_ref(
    catalog: Catalog, schemas_dir: str | Path, ref: str, *, display: str, subjects: list[str] | None = None
) -> list[Finding]:
    """Findings for published versions (at ``ref``) that changed or disappeared in the working tree.

    Args:
        catalog: the working tree's catalog (already loaded).
        schemas_dir: folder of the catalog (must be inside a git work tree).
        ref: any git revision (``origin/main``, a tag, a sha).
        display: prefix for file names in findings.
        subjects: restrict to these subjects (default all of the ref's catalog).

    Raises:
        CheckInputError: not a git repository, unknown ref, malformed catalog at the ref.
    """
    folder = Path(schemas_dir).resolve()
    if not folder.is_dir():
        raise CheckInputError("schemas folder not found", target=str(schemas_dir))
    _git(folder, "rev-parse", "--show-toplevel")
    prefix = _git(folder, "rev-parse", "--show-prefix").strip()
    try:
        _git(folder, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except CheckInputError as e:
        raise CheckInputError(f"unknown git ref {ref!r}", target=str(schemas_dir)) from e
    listing = _git(folder, "ls-tree", "-r", "--name-only", "--full-tree", ref, "--", prefix or ".")
    present = {line[len(prefix):] for line in listing.splitlines() if line.startswith(prefix)}
    if "catalog.toml" not in present:
        return []  # nothing published at that ref

    def read_at_ref(rel: str) -> str | None:
        if rel not in present:
            return None
        return _git(folder, "show", f"{ref}:{prefix}{rel}")

    try:
        old = load_catalog(folder, read_text=read_at_ref, listing=None)
    except CatalogError as e:
        raise CheckInputError(f"catalog at {ref} is invalid: {e.detail}", target=f"{ref}:{prefix}{e.path or ''}") from e

    findings: list[Finding] = []
    if json.loads(old.envelope_text) != json.loads(catalog.envelope_text):
        findings.append(
            finding_for(
                "published-version-changed", subject="", versions="envelope", path="",
                message=f"the envelope changed since {ref}; it is part of every published version",
                file=f"{display}/{catalog.envelope_path}",
                diff=_diff(old.envelope_text, catalog.envelope_text, f"{ref}:{old.envelope_path}", catalog.envelope_path),
            )
        )
    wanted = set(subjects) if subjects is not None else None
    for spec in old.subjects.values():
        if wanted is not None and spec.subject not in wanted and spec.subject in catalog.subjects:
            continue
        now = catalog.subjects.get(spec.subject)
        for v in spec.versions:
            before = old.versions[(spec.event_type, v)]
            after = catalog.versions.get((spec.event_type, v)) if now is not None else None
            if after is None:
                findings.append(
                    finding_for(
                        "published-version-removed", subject=spec.subject, versions=f"v{v}", path="",
                        message=f"{spec.subject} v{v} was published at {ref} and is gone from the catalog",
                        file=f"{display}/{before.path}",
                    )
                )
            elif json.loads(before.text) != json.loads(after.text):
                findings.append(
                    finding_for(
                        "published-version-changed", subject=spec.subject, versions=f"v{v}", path="",
                        message=f"{after.path} changed since {ref}; published versions are immutable",
                        file=f"{display}/{after.path}", text=after.text,
                        diff=_diff(before.text, after.text, f"{ref}:{before.path}", after.path),
                    )
                )
    return findings
