"""HTTP API of the saga-orchestrator (starlette; sync endpoints run in the threadpool).

Routes:
    GET  /sagas/{saga_id}          state, data, current deadline, history (oldest first)
    GET  /sagas?state=&case_id=&limit=   newest first (limit 1..1000, default 100)
    POST /sagas/{saga_id}/resolve  body ``{"reason": "..."}`` (required, non-blank); only
                                   for a saga in a PARKED state (MANUAL_REVIEW); header
                                   ``X-Actor-Id`` names the operator (default "anonymous")
    GET  /sagas/stuck?grace_s=&limit=   sagas waiting past deadline + grace (default grace:
                                   the service setting), oldest deadline first
    GET  /sagas/metrics            ``{"counters": {...}, "gauges": {...}}`` (metric-ready:
                                   counters of this process, gauges from the database)

Errors are ``application/problem+json`` (RFC 9457): 400 bad input (names the field), 404
unknown saga, 409 resolve not allowed in the saga's state or concurrent change.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from casestream.errors import ConcurrencyError
from services.saga.application.orchestrator import Orchestrator
from services.saga.application.ports import SagaQueries
from services.saga.application.stuck import STUCK_LIMIT, find_stuck, gauges
from services.saga.domain.engine import SagaInstance
from services.saga.domain.errors import UnknownTrigger

Resolver = Callable[[str, str, str], SagaInstance | None]
"""``(saga_id, reason, actor_id) -> saga after resolving, or None if unknown``."""


def problem(status: int, title: str, detail: str, **extra: Any) -> JSONResponse:
    """An RFC 9457 problem response."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def saga_json(saga: SagaInstance, orchestrator: Orchestrator) -> dict[str, Any]:
    """The JSON view of ``saga`` (without history)."""
    d = orchestrator.definition
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


def build_routes(queries: SagaQueries, orchestrator: Orchestrator, resolver: Resolver, *,
                 stuck_grace: timedelta = timedelta(seconds=60),
                 clock: Callable[[], datetime] = _utc_now) -> list[Route]:
    """The saga routes over ``queries`` (read side) and ``resolver`` (operator action).

    ``stuck_grace`` is the default grace of ``/sagas/stuck`` and of the stuck gauge.
    """
    states = {s.name for s in orchestrator.definition.states}

    def list_stuck(request: Request) -> Response:
        try:
            grace_s = float(request.query_params.get("grace_s", stuck_grace.total_seconds()))
        except ValueError:
            grace_s = -1.0
        if not 0 <= grace_s <= 7 * 86400:
            return problem(400, "Invalid grace", "grace_s must be a number of seconds in "
                           "0..604800", field="grace_s")
        try:
            limit = int(request.query_params.get("limit", "100"))
        except ValueError:
            limit = -1
        if not 1 <= limit <= STUCK_LIMIT:
            return problem(400, "Invalid limit", f"limit must be an integer in 1..{STUCK_LIMIT}",
                           field="limit")
        now = clock()
        sagas = find_stuck(queries, orchestrator.definition, now=now,
                           grace=timedelta(seconds=grace_s), limit=limit)
        return JSONResponse({"as_of": _iso(now), "grace_s": grace_s, "count": len(sagas),
                             "items": [saga_json(s, orchestrator) for s in sagas]})

    def metrics(request: Request) -> Response:
        return JSONResponse({
            "counters": orchestrator.metrics.snapshot(),
            "gauges": dict(gauges(queries, orchestrator.definition, now=clock(),
                                  grace=stuck_grace)),
        })

    def get_saga(request: Request) -> Response:
        saga_id = request.path_params["saga_id"]
        if not _valid_uuid(saga_id):
            return problem(400, "Invalid saga id", f"{saga_id!r} is not a UUID", field="saga_id")
        saga = queries.get(saga_id)
        if saga is None:
            return problem(404, "Saga not found", f"no saga {saga_id}")
        history = [{"seq": r.seq, "at": _iso(r.entry.at), "trigger": r.entry.trigger,
                    "event_id": r.entry.event_id, "from_state": r.entry.from_state,
                    "to_state": r.entry.to_state, "disposition": r.entry.disposition.value,
                    "note": r.entry.note} for r in queries.history(saga_id)]
        return JSONResponse({**saga_json(saga, orchestrator), "history": history})

    def list_sagas(request: Request) -> Response:
        state = request.query_params.get("state")
        if state is not None and state not in states:
            return problem(400, "Invalid state", f"state must be one of {sorted(states)}",
                           field="state")
        try:
            limit = int(request.query_params.get("limit", "100"))
        except ValueError:
            limit = -1
        if not 1 <= limit <= 1000:
            return problem(400, "Invalid limit", "limit must be an integer in 1..1000",
                           field="limit")
        case_id = request.query_params.get("case_id")
        sagas = queries.list(state=state, case_id=case_id, limit=limit)
        return JSONResponse({"items": [saga_json(s, orchestrator) for s in sagas],
                             "count": len(sagas)})

    async def resolve_saga(request: Request) -> Response:
        saga_id = request.path_params["saga_id"]
        if not _valid_uuid(saga_id):
            return problem(400, "Invalid saga id", f"{saga_id!r} is not a UUID", field="saga_id")
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError:
            return problem(400, "Malformed JSON", "the body is not valid JSON")
        reason = body.get("reason") if isinstance(body, dict) else None
        if not isinstance(reason, str) or not reason.strip():
            return problem(400, "Missing reason", "reason (non-blank string) is required",
                           field="reason")
        actor = request.headers.get("X-Actor-Id", "anonymous")
        try:
            saga = await run_in_threadpool(resolver, saga_id, reason.strip(), actor)
        except UnknownTrigger as e:
            return problem(409, "Saga cannot be resolved", str(e), state=e.state)
        except ConcurrencyError as e:
            return problem(409, "Concurrent change", str(e))
        if saga is None:
            return problem(404, "Saga not found", f"no saga {saga_id}")
        return JSONResponse(saga_json(saga, orchestrator))

    return [
        Route("/sagas", list_sagas, methods=["GET"]),
        Route("/sagas/stuck", list_stuck, methods=["GET"]),
        Route("/sagas/metrics", metrics, methods=["GET"]),
        Route("/sagas/{saga_id}", get_saga, methods=["GET"]),
        Route("/sagas/{saga_id}/resolve", resolve_saga, methods=["POST"]),
    ]


def build_app(queries: SagaQueries, orchestrator: Orchestrator, resolver: Resolver, *,
              stuck_grace: timedelta = timedelta(seconds=60),
              clock: Callable[[], datetime] = _utc_now) -> Starlette:
    """The starlette app (health routes are added by ``ServiceProcess``)."""
    return Starlette(routes=build_routes(queries, orchestrator, resolver,
                                         stuck_grace=stuck_grace, clock=clock))
