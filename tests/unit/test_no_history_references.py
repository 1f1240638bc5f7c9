"""Code and docs state rules, not where a rule came from: no references to documents outside
the repository (issue numbers, design-document sections, briefs, absolute paths of the
machine the code was written on) in shared/, services/, tests/, bench/, deploy/, README.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ["shared", "services", "tests", "bench", "deploy"]
FILES = ["README.md"]

PATTERNS = [
    re.compile(r"\bissues? #?\d", re.IGNORECASE),  # "issue 4", "issue #4", "issues 3"
    re.compile(r"\bDESIGN(?: ?§|\.md)"),
    re.compile(r"\bBRIEF\b|\bMISSION\b"),
    re.compile(r"\bteam (?:brief|issue)\b", re.IGNORECASE),
    re.compile(r"/work/"),
]

#: Files that may keep such a text, with the reason.
EXEMPT = {
    # Applied migrations are immutable: apply_migrations refuses a migration whose checksum
    # (the SQL text, comments included) differs from the one recorded when it was applied.
    "services/saga/migrations/002_history_late.sql": "applied migration (checksummed)",
    "services/saga/migrations/003_saga_tenant.sql": "applied migration (checksummed)",
}


def _files() -> list[Path]:
    out = [ROOT / f for f in FILES]
    for folder in FOLDERS:
        out += [p for p in sorted((ROOT / folder).rglob("*")) if p.is_file()
                and "__pycache__" not in p.parts and not p.name.endswith((".pyc", ".egg-info"))
                and not any(part.endswith(".egg-info") for part in p.parts)]
    return out


def history_references(paths: list[Path]) -> list[str]:
    """``path:line: text`` for every line of ``paths`` that matches one of the patterns."""
    me = Path(__file__).resolve()
    found = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        if path.resolve() == me or rel in EXEMPT:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        for n, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in PATTERNS):
                found.append(f"{rel}:{n}: {line.strip()[:120]}")
    return found


def test_code_and_docs_hold_no_history_references() -> None:
    found = history_references(_files())
    assert not found, ("state the rule itself instead of where it came from:\n"
                       + "\n".join(found))


def test_the_exempt_files_exist() -> None:
    assert all((ROOT / rel).is_file() for rel in EXEMPT)


@pytest.mark.parametrize("line", [
    "Rule source: issue 4.", "see issue #12", "(DESIGN §2)", "BRIEF: group id",
    "the MISSION says", "source: team brief", "see /work/brief/x.md"])
def test_each_pattern_is_caught(tmp_path: Path, line: str) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(f'"""ok"""\n# {line}\n', encoding="utf-8")
    assert history_references([probe]) == [f"{probe}:2: # {line}"]
