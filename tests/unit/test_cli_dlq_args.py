"""`casestream dlq show` argument checks, answered before Kafka is contacted."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from casestream.cli.dlq import dlq


@pytest.mark.parametrize("args", [
    ["show", "audit.journal"],
    ["show", "audit.journal", "0:3", "--offset", "3"],
    ["show", "audit.journal", "0:3", "--event-id", "e"],
])
def test_show_needs_exactly_one_way_to_pick_the_dead_letter(args: list[str]) -> None:
    result = CliRunner().invoke(dlq, ["--bootstrap", "127.0.0.1:1", *args])
    assert result.exit_code == 2
    assert "give exactly one of LABEL (PARTITION:OFFSET), --event-id or --offset" in result.output


@pytest.mark.parametrize("label", ["17", "0:x", "a:1", "0:", ":3", "1:-3"])
def test_a_label_that_is_not_partition_colon_offset_is_a_usage_error(label: str) -> None:
    result = CliRunner().invoke(dlq, ["--bootstrap", "127.0.0.1:1", "show", "audit.journal", label])
    assert result.exit_code == 2
    assert f"LABEL must be PARTITION:OFFSET as 'dlq list' prints it (e.g. 0:17), got {label!r}" \
        in result.output
    assert "Traceback" not in result.output
