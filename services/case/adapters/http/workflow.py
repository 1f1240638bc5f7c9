"""The regulator's workflow routes of the case API: assignment, evidence, review, withdrawal,
appeal, and the case search.

Routes (bearer token; every write needs an ``Idempotency-Key`` and honours ``If-Match``,
412 when the version differs; each answers the case and its ETag):

    GET  /cases                              officer/supervisor: search (filters status,
                                             officer_id, severity, opened_from, opened_to;
                                             keyset page: limit + after = next_after, the
                                             last case's id)
    POST /cases/{id}/assignment              officer/supervisor: assign an officer
                                             {officer_id}; the same officer again: 200, no event
    POST /cases/{id}/evidence-requests       officer: {description, due_at}
    POST /cases/{id}/evidence                officer: {name, media_type, content_base64}
                                             (content <= EVIDENCE_MAX_BYTES decoded)
    GET  /cases/{id}/evidence                officer/supervisor: the items' metadata + sha256
    POST /cases/{id}/review                  officer: start the review
    POST /cases/{id}/withdrawal              officer: {reason}
    POST /cases/{id}/appeal                  officer: {reason} (a closed violation, within
                                             the appeal window)
    POST /cases/{id}/correction              supervisor: {reason, penalty_cents} (a closed
                                             violation: its sent notice is corrected by a
                                             correction notice; the notice stays on record)

A refused transition is 409 ``invalid_transition`` whose detail names the rule and whose
``errors`` hold ``{"field": "status", "message": <rule>}`` (``problems.py``); bad input is 400
naming the field.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, Strict
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from casestream.auth import ROLE_OFFICER, ROLE_SUPERVISOR
from casestream.http import Identifier, Limit, query_model, text
from services.case.adapters.http import requests as rq
from services.case.adapters.http.common import case_id_of, case_json, principal_with, validate_body
from services.case.adapters.http.models import JsonInt
from services.case.adapters.http.problems import validation
from services.case.application.commands import (
    AppealCase,
    CorrectNotice,
    AssignOfficer,
    CaseQuery,
    CaseWrite,
    EvidenceView,
    RequestEvidence,
    StartReview,
    SubmitEvidence,
    WithdrawCase,
)
from services.case.domain.values import CaseStatus
from services.case.domain.workflow import EVIDENCE_MAX_BYTES

BASE64_MAX = (EVIDENCE_MAX_BYTES + 2) // 3 * 4
"""Longest ``content_base64`` accepted (characters): EVIDENCE_MAX_BYTES encoded."""

MEDIA_TYPE_PATTERN = r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,62}/[a-z0-9][a-z0-9!#$&^_.+-]{0,62}$"
BASE64_PATTERN = (r"^(?:[A-Za-z0-9+/]{4})*"
                  r"(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})$")
"""Padded base64 (RFC 4648 §4): every string it matches decodes."""

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}")


def _rfc3339_text(value: Any) -> Any:
    """Only a date-time text reaches the datetime parser (pydantic's lax mode would read
    ``0.5`` as a Unix time)."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError("must be an RFC 3339 date-time with its offset")
    return value


Timestamp = Annotated[AwareDatetime, Strict(False), BeforeValidator(_rfc3339_text)]
"""An RFC 3339 date-time with its offset (a JSON string)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AssignBody(_Body):
    """``POST /cases/{id}/assignment`` body."""

    officer_id: Identifier = Field(description="The officer to make responsible (1..128 "
                                               "printable ASCII characters).")


class EvidenceRequestBody(_Body):
    """``POST /cases/{id}/evidence-requests`` body."""

    description: text(1000) = Field(description="What is asked for, 1..1000 characters.")  # type: ignore[valid-type]
    due_at: Timestamp = Field(description="When it is due (RFC 3339 with offset); a date "
                                          "already passed makes the evidence overdue at once.")


class EvidenceBody(_Body):
    """``POST /cases/{id}/evidence`` body."""

    name: text(200) = Field(description="File name, 1..200 characters.")  # type: ignore[valid-type]
    media_type: str = Field(pattern=MEDIA_TYPE_PATTERN, max_length=127,
                            description="Media type, e.g. application/pdf.")
    content_base64: str = Field(min_length=4, max_length=BASE64_MAX, pattern=BASE64_PATTERN,
                                description=f"The content, base64 (RFC 4648 §4), at most "
                                            f"{EVIDENCE_MAX_BYTES} bytes decoded.")


class ReasonBody(_Body):
    """``POST /cases/{id}/withdrawal`` and ``/appeal`` body."""

    reason: text(1000) = Field(description="Why, 1..1000 characters.")  # type: ignore[valid-type]


class CorrectionBody(_Body):
    """``POST /cases/{id}/correction`` body."""

    reason: text(1000) = Field(description="Why the sent notice is corrected, 1..1000 characters.")  # type: ignore[valid-type]
    penalty_cents: JsonInt = Field(ge=0, le=2**63 - 1, strict=True,
                               description="The corrected penalty in cents (0: withdrawn).")


class EmptyBody(_Body):
    """``POST /cases/{id}/review`` body (may be empty or ``{}``)."""


Status = Literal[tuple(s.value for s in CaseStatus)]  # type: ignore[valid-type]


class CaseSearchQuery(BaseModel):
    """``GET /cases`` query parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Status | None = Field(None, description="Only cases in this status.")
    officer_id: Identifier | None = Field(None, description="Only cases assigned to this officer.")
    severity: int | None = Field(None, ge=1, le=5, description="Only cases of this severity.")
    opened_from: Timestamp | None = Field(None, description="Opened at or after (RFC 3339).")
    opened_to: Timestamp | None = Field(None, description="Opened before (RFC 3339).")
    limit: Limit = 50
    after: uuid.UUID | None = Field(None, description="next_after of the previous page: the id "
                                                      "of its last case (404 if no such case).")


def decode_content(value: str) -> bytes:
    """Decode ``content_base64``. Raises Problem (400 naming the field)."""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise validation("content_base64", "must be base64 (RFC 4648 §4)") from None


def evidence_json(item: EvidenceView) -> dict[str, Any]:
    """The JSON representation of an evidence item's metadata."""
    return {"id": item.id, "case_id": item.case_id, "request_id": item.request_id,
            "name": item.name, "media_type": item.media_type, "size_bytes": item.size_bytes,
            "sha256": item.sha256, "submitted_by": item.submitted_by,
            "submitted_at": item.submitted_at.isoformat()}


class WorkflowRoutes:
    """The workflow route handlers, over the case routes' service and helpers (``app.py``:
    ``service``, ``render``, ``idempotent``, ``send``, ``expected_version``)."""

    def __init__(self, routes: Any) -> None:
        self._routes = routes
        self._service = routes.service

    async def _write(self, request: Request, route: str, model: type[_Body], roles: tuple[str, ...],
                     build: Callable[[Any, dict[str, Any]], dict[str, Any]],
                     command: type[CaseWrite], *, body_required: bool = True) -> Response:
        who = principal_with(request, *roles)
        case_id = case_id_of(request)
        key = rq.idempotency_key_of(request, required=True)
        data = await rq.read_json_object(request, required=body_required)
        if not data and not body_required and (await request.body()).strip() not in (b"", b"{}"):
            raise validation("body", "must be a JSON object")  # e.g. null: not an absent body
        body = validate_body(model, data)
        expected = await self._routes.expected_version(request, who.tenant_id, case_id)
        cmd = command(tenant_id=who.tenant_id, actor_id=who.subject, case_id=case_id,
                      expected_version=expected, traceparent=rq.traceparent_of(request),
                      **build(body, data))
        idem = self._routes.idempotent(request, who, route, key, data)
        stored, replayed = await run_in_threadpool(
            self._service.apply, cmd, idem, self._routes.render(200))
        return self._routes.send(stored, replayed)

    async def assign(self, request: Request) -> Response:
        return await self._write(request, "POST /cases/{id}/assignment", AssignBody,
                                 (ROLE_OFFICER, ROLE_SUPERVISOR),
                                 lambda b, _: {"officer_id": b.officer_id}, AssignOfficer)

    async def request_evidence(self, request: Request) -> Response:
        return await self._write(request, "POST /cases/{id}/evidence-requests",
                                 EvidenceRequestBody, (ROLE_OFFICER,),
                                 lambda b, _: {"description": b.description, "due_at": b.due_at},
                                 RequestEvidence)

    async def submit_evidence(self, request: Request) -> Response:
        return await self._write(request, "POST /cases/{id}/evidence", EvidenceBody,
                                 (ROLE_OFFICER,),
                                 lambda b, _: {"name": b.name, "media_type": b.media_type,
                                               "content": decode_content(b.content_base64)},
                                 SubmitEvidence)

    async def start_review(self, request: Request) -> Response:
        return await self._write(request, "POST /cases/{id}/review", EmptyBody, (ROLE_OFFICER,),
                                 lambda b, _: {}, StartReview, body_required=False)

    async def withdraw(self, request: Request) -> Response:
        return await self._write(request, "POST /cases/{id}/withdrawal", ReasonBody,
                                 (ROLE_OFFICER,), lambda b, _: {"reason": b.reason}, WithdrawCase)

    async def appeal(self, request: Request) -> Response:
        return await self._write(request, "POST /cases/{id}/appeal", ReasonBody,
                                 (ROLE_OFFICER,), lambda b, _: {"reason": b.reason}, AppealCase)

    async def correct_notice(self, request: Request) -> Response:
        return await self._write(request, "POST /cases/{id}/correction", CorrectionBody,
                                 (ROLE_SUPERVISOR,),
                                 lambda b, _: {"reason": b.reason, "penalty_cents": b.penalty_cents},
                                 CorrectNotice)

    async def list_evidence(self, request: Request) -> Response:
        who = principal_with(request, ROLE_OFFICER, ROLE_SUPERVISOR)
        case_id = case_id_of(request)
        items = await run_in_threadpool(self._service.list_evidence, who.tenant_id, case_id)
        return JSONResponse({"items": [evidence_json(i) for i in items]})

    async def search(self, request: Request) -> Response:
        who = principal_with(request, ROLE_OFFICER, ROLE_SUPERVISOR)
        q = query_model(request, CaseSearchQuery)
        query = CaseQuery(tenant_id=who.tenant_id, status=q.status, officer_id=q.officer_id,
                          severity=q.severity, opened_from=q.opened_from, opened_to=q.opened_to,
                          limit=q.limit)
        views = await run_in_threadpool(self._service.search_cases, query,
                                        str(q.after) if q.after else None)
        after = views[-1].id if len(views) == query.limit else None
        return JSONResponse({"items": [case_json(v) for v in views], "next_after": after})
