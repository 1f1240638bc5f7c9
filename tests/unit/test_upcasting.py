"""Unit tests of the upcaster chain (casestream.events.upcasting) and casestream's upcasters."""

from __future__ import annotations

import pytest

from casestream.events.catalog import load_catalog
from casestream.errors import UpcasterChainError
from casestream_suite_schemas.upcasters import SUMMARY_MAX, collapse_summary, default_upcasters
from casestream.events.upcasting import UpcasterChain
from services import schemas_dir

V1 = {"title": "t", "description": "  many\n\n  spaces\there ", "severity": 2, "evidence_count": 1,
      "reporter_email": "r@example.org"}


def test_default_chain_verifies_against_the_catalog() -> None:
    default_upcasters().verify(load_catalog(schemas_dir()))


def test_case_opened_v1_to_newest() -> None:
    chain = default_upcasters()
    version, payload = chain.upcast("CaseOpened", 1, V1)
    assert version == 3
    assert payload == {"title": "t", "summary": "many spaces here", "severity": 2, "evidence_count": 1,
                       "reporter_email": "r@example.org", "priority": "NORMAL"}
    assert "priority" not in V1 and "description" in V1  # input not mutated


def test_case_opened_v2_keeps_priority_and_cuts_summary() -> None:
    v2 = {**V1, "priority": "HIGH", "description": "word " * 400}
    version, payload = default_upcasters().upcast("CaseOpened", 2, v2)
    assert version == 3
    assert payload["priority"] == "HIGH"
    assert len(payload["summary"]) == SUMMARY_MAX
    assert "  " not in payload["summary"]


def test_newest_version_passes_through_unchanged() -> None:
    payload = {"x": 1}
    version, out = default_upcasters().upcast("CaseSubmitted", 1, payload)
    assert (version, out) == (1, payload) and out is payload


def test_collapse_summary() -> None:
    assert collapse_summary(" a \t b\n") == "a b"
    assert collapse_summary("") == ""


def test_missing_step_fails_verification() -> None:
    chain = UpcasterChain()
    chain.add("CaseOpened", 1, lambda p: dict(p))
    with pytest.raises(UpcasterChainError, match="missing upcaster CaseOpened v2->v3"):
        chain.verify(load_catalog(schemas_dir()))


def test_dangling_steps_fail_verification() -> None:
    chain = default_upcasters()
    chain.add("CaseOpened", 3, lambda p: dict(p))
    chain.add("Ghost", 1, lambda p: dict(p))
    with pytest.raises(UpcasterChainError) as e:
        chain.verify({"CaseOpened": 3})
    assert "beyond the newest version v3" in str(e.value)
    assert "unknown event type Ghost" in str(e.value)


def test_duplicate_and_invalid_registration() -> None:
    chain = UpcasterChain()

    @chain.register("X", 1)
    def step(p):  # noqa: ANN001, ANN202
        return dict(p)

    with pytest.raises(UpcasterChainError, match="twice"):
        chain.add("X", 1, step)
    with pytest.raises(UpcasterChainError, match=">= 1"):
        chain.add("X", 0, step)
    assert chain.steps() == [("X", 1)]
