"""HTTP API of the saga-orchestrator (starlette), behind the shared edge.

Every route needs a bearer token (``casestream.http.edge``: 401 without a valid one, 429
past the rate limits, 503 when shedding load) and reads only the sagas of the token's
``tenant``: another tenant's saga is answered exactly like an unknown one (404,
existence never leaks), and list queries filter on the tenant in SQL before their limit.
A token with the ``operator`` role reads every tenant's sagas (``Principal.tenant_scope``);
a resolve stays scoped to the token's tenant.

Routes (roles ``officer``, ``supervisor`` or ``operator`` unless said):
    GET  /sagas/{saga_id}          state, data, current deadline, history (oldest first)
    GET  /sagas?state=&case_id=&limit=   newest first (limit 1..1000, default 100)
    POST /sagas/{saga_id}/resolve  role ``supervisor`` only (officer -> 403); body
                                   ``{"reason": "..."}`` (required: 1..1000 characters, not
                                   blank, no control characters); only for a
                                   saga in a PARKED state (MANUAL_REVIEW); the operator
                                   recorded on the events is the token's ``sub``
    GET  /sagas/stuck?grace_s=&limit=   the tenant's sagas waiting past deadline + grace
                                   (default grace: the service setting), oldest deadline first
    GET  /sagas/metrics            ``{"counters": {...}, "gauges": {...}}``: gauges from the
                                   database, of the caller's tenant; counters of this process
                                   (all tenants, no ids: the numbers ``/metrics`` publishes)

Bodies and query strings are validated by the pydantic models below
(``casestream.http.body_model`` / ``query_model``; unknown parameters and fields are
refused), so what becomes an event is bounded. Errors are ``application/problem+json``
(RFC 9457, stable ``code``): 400 bad input (names the field), 401/403 from the edge and role checks, 404 unknown saga (or another tenant's),
409 resolve not allowed in the saga's state or concurrent change, 503 (``Retry-After``)
when the request deadline passes or the database cannot be reached.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_OPERATOR, ROLE_SUPERVISOR
from casestream.errors import ConcurrencyError
from casestream.http import EdgePolicy, Identifier, Limit, Operation, json_answer, principal_of
from casestream.http import body_model, edge_app, guarded, problem_answer, problem_response
from casestream.http import openapi_document, openapi_route, query_model, requires, text
from services.saga.application.orchestrator import Orchestrator
from services.saga.application.ports import SagaQueries
from services.saga.application.stuck import STUCK_LIMIT, find_stuck, gauges, states_of
from services.saga.domain.engine import SagaInstance
from services.saga.domain.errors import UnknownTrigger

log = logging.getLogger(__name__)

READ_ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR, ROLE_OPERATOR)
RESOLVE_ROLES = (ROLE_SUPERVISOR,)
T = TypeVar("T")
REASON_MAX = 1000
"""Characters a resolve reason may hold (it travels in the ``SagaResolved`` event)."""


class ResolveBody(BaseModel):
    """``POST /sagas/{saga_id}/resolve`` body."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    reason: text(REASON_MAX) = Field(  # type: ignore[valid-type]
        description=f"Why the operator resolves the saga, 1..{REASON_MAX} characters, not "
                    "blank (trimmed).")


class SagaListQuery(BaseModel):
    """``GET /sagas`` query parameters (``state``: :func:`saga_list_query` narrows it to the
    definition's states)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: Identifier | None = Field(None, description="Only sagas in this state.")
    case_id: Identifier | None = Field(None, description="Only the sagas of this case.")
    limit: Limit = 100


def saga_list_query(states: Iterable[str]) -> type[SagaListQuery]:
    """:class:`SagaListQuery` whose ``state`` is one of ``states`` (an enum in the document)."""
    allowed = Literal[tuple(sorted(states))]  # type: ignore[valid-type]
    return create_model("SagaListQuery", __base__=SagaListQuery,
                        state=(allowed | None, Field(None, description="Only sagas in this "
                                                                        "state.")))


class StuckQuery(BaseModel):
    """``GET /sagas/stuck`` query parameters (``grace_s`` default: the service setting)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    grace_s: float | None = Field(None, ge=0, le=7 * 86400,
                                  description="Seconds past the deadline, 0..604800.")
    limit: int = Field(STUCK_LIMIT, ge=1, le=STUCK_LIMIT)


class Resolver(Protocol):
    """Resolves a PARKED saga in one unit of work (``Orchestrator.resolve``)."""

    def __call__(self, saga_id: str, *, reason: str, actor_id: str,
                 tenant_id: str) -> SagaInstance | None:
        """The saga after resolving, or None if unknown or of another tenant.

        Raises:
            UnknownTrigger: not in a resolvable state. ConcurrencyError: concurrent change.
        """
        ...


def problem(status: int, code: str, title: str, detail: str, *, instance: str | None = None,
            headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """An RFC 9457 problem response (the shared edge's shape; ``extra`` adds members)."""
    return problem_response(status, code, title, detail, instance=instance, headers=headers,
                            extra=extra)


def _not_found(saga_id: str, path: str) -> JSONResponse:
    """The one 404 for an unknown saga and for another tenant's saga."""
    return problem(404, "saga_not_found", "Saga not found", f"no saga {saga_id}", instance=path)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def saga_json(saga: SagaInstance, orchestrator: Orchestrator) -> dict[str, Any]:
    """The JSON view of ``saga`` (without history)."""
    d = orchestrator.definition_of(saga)
    step = d.step(saga.step) if saga.step else None
    return {
        "saga_id": saga.saga_id, "definition": saga.definition, "case_id": saga.case_id,
        "tenant_id": saga.tenant_id, "correlation_id": saga.correlation_id,
        "state": saga.state, "state_kind": d.state(saga.state).kind.value,
        "step": saga.step, "attempts": saga.attempts,
        "deadline": None if step is None else {
            "step": step.name, "at": _iso(saga.deadline_at), "attempt": saga.attempts,
            "max_attempts": step.retry.max_attempts},
        "data": dict(saga.data), "version": saga.version, "event_seq": saga.event_seq,
    }


def _valid_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _utc_now() -> datetime:
    return datetime.now(UTC)


async def _guarded(request: Request, work: Callable[[], T]) -> T | Response:
    """Run ``work`` in the thread pool; storage trouble and a passed deadline become 503
    (the resolve route answers UnknownTrigger and ConcurrencyError itself)."""
    return await guarded(request, work, log=log, passthrough=(UnknownTrigger, ConcurrencyError),
                         unavailable="the saga store could not be reached; retry later")


def build_routes(queries: SagaQueries, orchestrator: Orchestrator, resolver: Resolver, *,
                 stuck_grace: timedelta = timedelta(seconds=60),
                 clock: Callable[[], datetime] = _utc_now) -> list[Route]:
    """The saga routes over ``queries`` (read side) and ``resolver`` (operator action).

    ``stuck_grace`` is the default grace of ``/sagas/stuck`` and of the stuck gauge. The
    routes expect the edge's principal (``casestream.http.principal_of``).
    """
    definition = tuple(orchestrator.definitions.values())
    list_query = saga_list_query(s.name for s in states_of(definition))

    @requires(*READ_ROLES)
    async def list_stuck(request: Request) -> Response:
        tenant = principal_of(request).tenant_scope
        query = query_model(request, StuckQuery)
        grace_s = stuck_grace.total_seconds() if query.grace_s is None else query.grace_s
        limit = query.limit
        now = clock()
        sagas = await _guarded(request, lambda: find_stuck(
            queries, definition, now=now, grace=timedelta(seconds=grace_s), tenant_id=tenant,
            limit=limit))
        if isinstance(sagas, Response):
            return sagas
        return JSONResponse({"as_of": _iso(now), "grace_s": grace_s, "count": len(sagas),
                             "items": [saga_json(s, orchestrator) for s in sagas]})

    @requires(*READ_ROLES)
    async def metrics(request: Request) -> Response:
        tenant = principal_of(request).tenant_scope
        g = await _guarded(request, lambda: dict(gauges(queries, definition, now=clock(),
                                                        grace=stuck_grace, tenant_id=tenant)))
        if isinstance(g, Response):
            return g
        return JSONResponse({"counters": orchestrator.metrics.snapshot(), "gauges": g})

    @requires(*READ_ROLES)
    async def get_saga(request: Request) -> Response:
        path, tenant = request.url.path, principal_of(request).tenant_scope
        saga_id = request.path_params["saga_id"]
        if not _valid_uuid(saga_id):
            return problem(400, "invalid_saga_id", "Invalid saga id",
                           f"{saga_id!r} is not a UUID", instance=path, field="saga_id")

        def read() -> dict[str, Any] | None:
            saga = queries.get(saga_id)
            if saga is None or tenant is not None and saga.tenant_id != tenant:
                return None  # history is read only for the caller's own saga
            history = [{"seq": r.seq, "at": _iso(r.entry.at), "trigger": r.entry.trigger,
                        "event_id": r.entry.event_id, "from_state": r.entry.from_state,
                        "to_state": r.entry.to_state,
                        "disposition": r.entry.disposition.value, "note": r.entry.note}
                       for r in queries.history(saga_id)]
            return {**saga_json(saga, orchestrator), "history": history}

        body = await _guarded(request, read)
        if isinstance(body, Response):
            return body
        if body is None:
            return _not_found(saga_id, path)
        return JSONResponse(body)

    @requires(*READ_ROLES)
    async def list_sagas(request: Request) -> Response:
        tenant = principal_of(request).tenant_scope
        query = query_model(request, list_query)
        sagas = await _guarded(request, lambda: queries.list(
            tenant_id=tenant, state=query.state, case_id=query.case_id, limit=query.limit))
        if isinstance(sagas, Response):
            return sagas
        return JSONResponse({"items": [saga_json(s, orchestrator) for s in sagas],
                             "count": len(sagas)})

    @requires(*RESOLVE_ROLES)
    async def resolve_saga(request: Request) -> Response:
        path, principal = request.url.path, principal_of(request)
        saga_id = request.path_params["saga_id"]
        if not _valid_uuid(saga_id):
            return problem(400, "invalid_saga_id", "Invalid saga id",
                           f"{saga_id!r} is not a UUID", instance=path, field="saga_id")
        reason = (await body_model(request, ResolveBody)).reason
        try:
            saga = await _guarded(request, lambda: resolver(
                saga_id, reason=reason.strip(), actor_id=principal.subject,
                tenant_id=principal.tenant_id))
        except UnknownTrigger as e:
            return problem(409, "saga_not_resolvable", "Saga cannot be resolved", str(e),
                           instance=path, state=e.state)
        except ConcurrencyError as e:
            return problem(409, "concurrent_change", "Concurrent change", str(e),
                           instance=path)
        if isinstance(saga, Response):
            return saga
        if saga is None:  # unknown, or another tenant's: checked before any state check
            return _not_found(saga_id, path)
        return JSONResponse(saga_json(saga, orchestrator))

    return [
        openapi_route(openapi_document_of(states_of(definition), list_query)),
        Route("/sagas", list_sagas, methods=["GET"]),
        Route("/sagas/stuck", list_stuck, methods=["GET"]),
        Route("/sagas/metrics", metrics, methods=["GET"]),
        Route("/sagas/{saga_id}", get_saga, methods=["GET"]),
        Route("/sagas/{saga_id}/resolve", resolve_saga, methods=["POST"]),
    ]


_TS = {"type": ["string", "null"], "format": "date-time"}
_SAGA_ID = {"type": "string", "format": "uuid"}


def _saga_schema(states: list[str], *, history: bool) -> dict[str, Any]:
    props: dict[str, Any] = {
        "saga_id": {"type": "string"}, "definition": {"type": "string"},
        "case_id": {"type": "string"}, "tenant_id": {"type": "string"},
        "correlation_id": {"type": ["string", "null"]},
        "state": {"type": "string", "enum": states}, "state_kind": {"type": "string"},
        "step": {"type": ["string", "null"]}, "attempts": {"type": "integer"},
        "deadline": {"type": ["object", "null"]}, "data": {"type": "object"},
        "version": {"type": "integer"}, "event_seq": {"type": "integer"},
    }
    required = ["saga_id", "definition", "case_id", "tenant_id", "state", "state_kind",
                "version"]
    if history:
        props["history"] = {"type": "array", "items": {"type": "object", "required": [
            "seq", "trigger", "to_state"], "properties": {"at": _TS}}}
        required.append("history")
    return {"type": "object", "required": required, "properties": props}


def openapi_document_of(saga_states: Iterable[Any],
                        list_query: type[SagaListQuery]) -> dict[str, Any]:
    """The OpenAPI document of the saga routes (states of the definition as enums)."""
    states = sorted(s.name for s in saga_states)
    items = {"type": "object", "required": ["items", "count"], "properties": {
        "items": {"type": "array", "items": {"$ref": "#/components/schemas/Saga"}},
        "count": {"type": "integer", "minimum": 0}}}
    first = {"saga_id": "$response.body#/items/0/saga_id"}
    links = {"GetSaga": {"operationId": "getSaga", "parameters": first},
             "ResolveSaga": {"operationId": "resolveSaga", "parameters": first}}
    not_found = problem_answer("No such saga for this tenant")
    return openapi_document("casestream saga-orchestrator", "1.0.0", [
        Operation(method="get", path="/sagas", operation_id="listSagas",
                  summary="The tenant's sagas, newest first", query=list_query,
                  answers={"200": json_answer("Sagas", items, links=links)}),
        Operation(method="get", path="/sagas/stuck", operation_id="listStuckSagas",
                  summary="Sagas waiting past their deadline + grace", query=StuckQuery,
                  answers={"200": json_answer("Stuck sagas", {
                      "type": "object", "required": ["as_of", "grace_s", "count", "items"],
                      "properties": {"items": items["properties"]["items"]}})}),
        Operation(method="get", path="/sagas/metrics", operation_id="sagaMetrics",
                  summary="Counters of this process, gauges of the tenant",
                  answers={"200": json_answer("Metrics", {
                      "type": "object", "required": ["counters", "gauges"]})}),
        Operation(method="get", path="/sagas/{saga_id}", operation_id="getSaga",
                  summary="A saga with its history", path_params={"saga_id": _SAGA_ID},
                  answers={"200": json_answer("The saga", _saga_schema(states, history=True)),
                           "404": not_found}),
        Operation(method="post", path="/sagas/{saga_id}/resolve", operation_id="resolveSaga",
                  summary="Resolve a saga in manual review (role supervisor)",
                  path_params={"saga_id": _SAGA_ID}, body=ResolveBody,
                  answers={"200": json_answer("The resolved saga", {"$ref":
                                              "#/components/schemas/Saga"}),
                           "404": not_found,
                           "409": problem_answer("Not in a resolvable state, or changed "
                                                 "concurrently")}),
    ], schemas={"Saga": _saga_schema(states, history=False)})


def build_app(queries: SagaQueries, orchestrator: Orchestrator, resolver: Resolver, *,
              edge: EdgePolicy, stuck_grace: timedelta = timedelta(seconds=60),
              clock: Callable[[], datetime] = _utc_now) -> Starlette:
    """The starlette app behind the shared edge (health routes are added by
    ``ServiceProcess``). ``app.state.counters`` holds the edge's counters."""

    return edge_app(build_routes(queries, orchestrator, resolver, stuck_grace=stuck_grace,
                                 clock=clock), edge)
