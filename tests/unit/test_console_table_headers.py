"""Every column of the console's tables is named: the Flow page's tables (those behind and
those folded), and :func:`casestream.console.pages.table` refuses a blank header."""

from __future__ import annotations

import re

import pytest

from casestream.console.pages import table
from tests.unit.test_console_flow_page import make, tbody


def test_every_column_of_the_flow_page_has_a_header(monkeypatch: pytest.MonkeyPatch) -> None:
    html = make(monkeypatch, {"behind": "http://behind.test", "calm": "http://calm.test"},
                ["stuck.group", "calm.group"])
    heads = re.findall(r"<th>(.*?)</th>", html, re.S)
    assert len(heads) >= 20 and all(h.strip() for h in heads), heads
    assert "<th>note</th>" in tbody(html.split('<details id="folded">')[0], "lag-behind")


def test_a_table_with_a_blank_header_is_refused() -> None:
    with pytest.raises(ValueError, match="every column needs a header"):
        table(("group", " "), [], id_="t")
