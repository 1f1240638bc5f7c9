"""docs/new-service.md cannot drift from examples/watch: every code block that names its
source file (``<!-- source: path -->`` above it) appears verbatim in that file, the others
are commands or the layout (whose paths exist); the watch settings' docstring table is
the generated one and every field is documented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from casestream.service import settings_table
from casestream.service.settings import undocumented_fields
from watch import settings as watch_settings
from watch.settings import WatchSettings

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "new-service.md"
EXAMPLE = ROOT / "examples" / "watch"
_BLOCK = re.compile(r"(?:<!-- source: (?P<source>\S+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)\n```",
                    re.S)


def blocks() -> list[tuple[str | None, str, str]]:
    return [(m["source"], m["lang"], m["body"]) for m in _BLOCK.finditer(GUIDE.read_text())]


def test_the_guide_quotes_the_example() -> None:
    quoted = [(s, b) for s, _, b in blocks() if s is not None]
    assert len(quoted) >= 10
    for source, body in quoted:
        path = ROOT / source
        assert path.is_relative_to(EXAMPLE) and path.is_file(), source
        assert body in path.read_text(encoding="utf-8"), (
            f"docs/new-service.md quotes {source}, but the file no longer holds:\n{body}")


def test_unquoted_blocks_are_commands_or_the_layout() -> None:
    for source, lang, body in blocks():
        if source is None:
            assert lang in ("sh", "text"), body
            if lang == "text":  # the layout: every path named exists
                for line in body.splitlines()[1:]:
                    rel = line.split()[0]
                    if "*" not in rel:
                        assert (EXAMPLE / rel).exists(), rel
                    else:
                        assert list(EXAMPLE.glob(rel)), rel


def test_a_changed_quote_is_caught() -> None:
    source, _, body = next(b for b in blocks() if b[0] is not None)
    assert body + "# drift" not in (ROOT / source).read_text(encoding="utf-8")


def test_settings_are_documented() -> None:
    assert "casestream settings watch" in (watch_settings.__doc__ or "")
    assert undocumented_fields(WatchSettings) == []
