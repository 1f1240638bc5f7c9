"""The suite's upcasters (pure): every step from an old event version to the next.

Part of the suite's event contracts (``casestream_suite_schemas``): a consumer of an old
version needs them as much as the schemas.

``CaseOpened``:
  * v1 -> v2: adds ``priority`` = ``"NORMAL"`` (the v2 schema's default).
  * v2 -> v3: renames ``description`` -> ``summary`` and maps the value: whitespace runs
    collapsed to one space, trimmed, cut to :data:`SUMMARY_MAX` characters (the v3 contract).
    The v3 schema carries the Avro alias ``description`` so BACKWARD compatibility holds for
    generic readers; only this upcaster applies the value mapping.

``EvidenceRequested``:
  * v1 -> v2: adds ``description`` = ``""`` (the v2 schema's default: a v1 request named
    no description; readers show "evidence requested" alone).

``EvidenceOverdue``:
  * v1 -> v2: adds ``recipient_email`` = None (the v2 schema's default: a v1 event named no
    address, so no reminder mail can be sent for it).

``NoticeIssued``:
  * v1 -> v2: adds ``document_sha256`` = ``""`` (the v2 schema's default: v1 notices were
    sent without a document).

``DecisionRequested``:
  * v1 -> v2: adds ``title`` = ``""`` (the v2 schema's default; the decision rules read it).

``CaseUpdated`` (legacy, from the old intake system): an event step,
:func:`split_case_updated`, turns each generic ``CaseUpdated`` into the typed facts it
carries — ``CaseRetitled`` when ``title`` is set, then ``CaseReprioritized`` when
``priority`` is set; nothing when neither is (the version guard still counts it).

``schemas/catalog.toml`` names :func:`default_upcasters` (``[catalog] upcasters``), so the
codec (``casestream.events.open_codec``) and ``casestream schemas check`` read this chain from
the catalog; the codec verifies it against the catalog at start-up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from casestream.events import Envelope, UpcasterChain

__all__ = [
    "SUMMARY_MAX",
    "case_opened_v1_v2",
    "case_opened_v2_v3",
    "collapse_summary",
    "default_upcasters",
    "evidence_overdue_v1_v2",
    "evidence_requested_v1_v2",
    "notice_issued_v1_v2",
    "register_notice_upcasters",
    "decision_requested_v1_v2",
    "register_case_upcasters",
    "register_saga_upcasters",
    "split_case_updated",
]

#: Maximum length of ``CaseOpened.summary`` from v3 on (characters).
SUMMARY_MAX = 500


def collapse_summary(text: str) -> str:
    """``text`` with whitespace runs collapsed to one space, trimmed, cut to SUMMARY_MAX characters."""
    return " ".join(text.split())[:SUMMARY_MAX]


def case_opened_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """CaseOpened v1 -> v2: add ``priority = "NORMAL"``."""
    return {**payload, "priority": "NORMAL"}


def case_opened_v2_v3(payload: Mapping[str, Any]) -> dict[str, Any]:
    """CaseOpened v2 -> v3: ``description`` -> ``summary`` (collapsed, <= 500 characters)."""
    out = {k: v for k, v in payload.items() if k != "description"}
    out["summary"] = collapse_summary(payload["description"])
    return out


#: Priorities a legacy CaseUpdated may carry; anything else is read as NORMAL.
PRIORITIES = ("LOW", "NORMAL", "HIGH")


def split_case_updated(event: Envelope) -> Iterator[Envelope]:
    """CaseUpdated v1 (generic) -> CaseRetitled v1 and/or CaseReprioritized v1, in that order."""
    p = event.payload
    if p.get("title") is not None:
        yield dataclasses.replace(event, event_type="CaseRetitled", event_version=1,
                                  payload={"title": p["title"]})
    if p.get("priority") is not None:
        priority = str(p["priority"]).upper()
        yield dataclasses.replace(event, event_type="CaseReprioritized", event_version=1,
                                  payload={"priority": priority if priority in PRIORITIES else "NORMAL"})


def evidence_requested_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """EvidenceRequested v1 -> v2: add ``description = ""``."""
    return {**payload, "description": ""}


def evidence_overdue_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """EvidenceOverdue v1 -> v2: add ``recipient_email = None``."""
    return {**payload, "recipient_email": None}


def register_case_upcasters(chain: UpcasterChain) -> UpcasterChain:
    """Register the CaseOpened, EvidenceRequested and EvidenceOverdue steps and the CaseUpdated split on
    ``chain``; returns ``chain``."""
    chain.add("CaseOpened", 1, case_opened_v1_v2)
    chain.add("CaseOpened", 2, case_opened_v2_v3)
    chain.add("EvidenceRequested", 1, evidence_requested_v1_v2)
    chain.add("EvidenceOverdue", 1, evidence_overdue_v1_v2)
    chain.add_event("CaseUpdated", 1, split_case_updated,
                    produces=[("CaseRetitled", 1), ("CaseReprioritized", 1)])
    return chain


def decision_requested_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """DecisionRequested v1 -> v2: add ``title = ""``."""
    return {**payload, "title": ""}


def register_saga_upcasters(chain: UpcasterChain) -> UpcasterChain:
    """Register the saga request steps on ``chain``; returns ``chain``."""
    chain.add("DecisionRequested", 1, decision_requested_v1_v2)
    return chain


def notice_issued_v1_v2(payload: Mapping[str, Any]) -> dict[str, Any]:
    """NoticeIssued v1 -> v2: add ``document_sha256 = ""``."""
    return {**payload, "document_sha256": ""}


def register_notice_upcasters(chain: UpcasterChain) -> UpcasterChain:
    """Register the notice steps on ``chain``; returns ``chain``."""
    chain.add("NoticeIssued", 1, notice_issued_v1_v2)
    return chain


def default_upcasters() -> UpcasterChain:
    """A new chain holding every casestream upcaster (verify it with ``chain.verify(catalog)``)."""
    return register_notice_upcasters(register_saga_upcasters(register_case_upcasters(UpcasterChain())))
