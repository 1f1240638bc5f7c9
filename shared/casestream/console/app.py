"""The web console: starlette app, server-rendered pages, the operators' actions.

Pages (every one needs a valid bearer token — the services' JWT, verified with the same
``AuthSettings`` — given once on ``/login`` and kept in an HttpOnly, SameSite=Strict cookie,
or sent as ``Authorization: Bearer``):

    GET  /journeys?case_id=ID     a case's events across the topics, causation arrows, its sagas
    GET  /sagas                   counts by state, stuck, MANUAL_REVIEW (resolve), compensation failed
    POST /sagas/{saga_id}/resolve form ``reason``: the saga service's resolve route, as the caller
    GET  /deadletters?consumer=C  open dead letters per consumer, decoded and redacted
    POST /deadletters/{consumer}  form ``action`` (redrive|discard), ``label`` (repeatable), ``reason``
    GET  /flow                    outbox backlog per service, lag per partition per group,
                                  recent replay runs (progress, rate, ETA)

Roles: reading needs ``officer``, ``supervisor`` or ``operator``; actions need ``supervisor``.
Tenancy: a caller sees the dead letters and journeys of their token's tenant only, unless
they hold ``operator`` (undecodable dead letters, with no tenant, only then); sagas come
from the saga service as the caller, which scopes them to the token's tenant. Every action
goes through :mod:`casestream.operations` (the CLI's code) and is recorded on the
operator-action topic (who, when, why). Kafka and service reads run in the thread pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_OPERATOR, ROLE_SUPERVISOR, InvalidToken, Principal, TokenVerifier
from casestream.consumer.deadletters import redact
from casestream.console.pages import esc, fmt, page, pretty, replay_runs_table, table
from casestream.console.sources import ConsoleSources
from casestream.errors import CasestreamError
from casestream.operations import (
    ACTION_SAGA_RESOLVE,
    Actor,
    OperatorAction,
    dead_letter_counts,
    discard_dead_letters,
    group_lag,
    load_dead_letter_state,
    load_journey,
    outbox_flow,
    read_actions,
    record_action,
    redrive_dead_letters,
)

log = logging.getLogger(__name__)

__all__ = ["console_app", "COOKIE"]

COOKIE = "casestream_session"
READ_ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR, ROLE_OPERATOR)
ACT_ROLES = (ROLE_SUPERVISOR,)

FLOW_REFRESH_JS = """
// refresh the tables 2 s after the previous answer (never two requests at once)
async function refresh() {
  try {
    const r = await fetch('/flow?fragment=1', {credentials: 'same-origin'});
    if (r.ok) document.getElementById('flow').innerHTML = await r.text();
  } finally { setTimeout(refresh, 2000); }
}
setTimeout(refresh, 2000);
"""


class Form:
    """An ``application/x-www-form-urlencoded`` body (what the pages' forms send), at most
    :data:`FORM_MAX` bytes, parsed with ``urllib.parse.parse_qs``."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self._fields = fields

    def get(self, name: str) -> str | None:
        values = self._fields.get(name)
        return values[0] if values else None

    def getlist(self, name: str) -> list[str]:
        return list(self._fields.get(name, []))


FORM_MAX = 64 * 1024


async def _form(request: Request) -> Form:
    body = await request.body()
    return Form(parse_qs(body[:FORM_MAX].decode("utf-8", "replace"), keep_blank_values=True))


def _token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.cookies.get(COOKIE)


def _who(p: Principal) -> str:
    return f"{p.subject} · tenant {p.tenant_id} · {', '.join(sorted(p.roles)) or 'no roles'}"


def _sees_all(p: Principal) -> bool:
    return ROLE_OPERATOR in p.roles


def _actor(p: Principal) -> Actor:
    return Actor(p.subject, tenant=p.tenant_id, roles=sorted(p.roles))


def console_app(sources: ConsoleSources, verifier: TokenVerifier) -> Starlette:
    """The console over ``sources`` (what to read) with tokens checked by ``verifier``."""
    timeout = sources.settings.request_timeout_s

    def authed(roles: tuple[str, ...], fn: Callable[[Request, Principal], Response]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            token = _token(request)
            try:
                if not token:
                    raise InvalidToken("a bearer token is required", missing=True)
                principal = verifier.verify(token)
            except InvalidToken as e:
                if request.method == "GET":
                    nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse("/login?" + urlencode({"next": nxt, "why": str(e)}), 303)
                return HTMLResponse(page("Not signed in", f"<p class=bad>{esc(e)}</p>"), 401)
            if not principal.roles & set(roles):
                return HTMLResponse(page("Forbidden", f"<p class=bad>requires role {esc(' or '.join(roles))}; "
                                                      f"your token has {esc(', '.join(sorted(principal.roles)) or 'none')}</p>",
                                         who=_who(principal)), 403)
            return fn(request, principal)
        return endpoint

    def service_call(method: str, path: str, principal_token: str, **kw: Any) -> httpx.Response | None:
        base = sources.saga_service()
        if base is None:
            return None
        with httpx.Client(timeout=timeout) as client:
            return client.request(method, base + path, headers={"authorization": f"Bearer {principal_token}"}, **kw)

    # -- login ------------------------------------------------------------------------
    def login_form(request: Request) -> Response:
        why = request.query_params.get("why", "")
        nxt = request.query_params.get("next", "/journeys")
        body = (f'<p class="muted">{esc(why)}</p>' if why else "") + (
            '<form method="post" action="/login"><p>Paste your bearer token (JWT; e.g. '
            '<code>casestream token --tenant T --role supervisor</code>):</p>'
            f'<input type="hidden" name="next" value="{esc(nxt)}">'
            '<textarea name="token" id="token" rows="4" cols="80" required></textarea><p>'
            '<button type="submit" id="login">Sign in</button></p></form>')
        return HTMLResponse(page("Sign in", body))

    async def login(request: Request) -> Response:
        form = await _form(request)
        token = str(form.get("token") or "").strip()
        nxt = str(form.get("next") or "/journeys")
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/journeys"
        try:
            verifier.verify(token)
        except InvalidToken as e:
            return HTMLResponse(page("Sign in", f"<p class=bad>token refused: {esc(e)}</p>"
                                     '<p><a href="/login">try again</a></p>'), 401)
        resp = RedirectResponse(nxt, 303)
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict",
                        secure=sources.settings.cookie_secure, path="/")
        return resp

    def logout(_request: Request) -> Response:
        resp = RedirectResponse("/login", 303)
        resp.delete_cookie(COOKIE, path="/")
        return resp

    # -- journeys ---------------------------------------------------------------------
    def journeys(request: Request, p: Principal) -> Response:
        case_id = request.query_params.get("case_id", "").strip()
        form = ('<form method="get" action="/journeys"><label>Case id <input type="text" name="case_id" '
                f'id="case_id" value="{esc(case_id) if case_id else ""}"></label> '
                '<button type="submit" id="search">Show journey</button></form>')
        if not case_id:
            return HTMLResponse(page("Journeys", form, active="/journeys", who=_who(p)))
        try:
            j = load_journey(sources.kafka, case_id, sources.journey_topics, sources.codec,
                             max_messages=sources.settings.journey_max_messages,
                             timeout_s=sources.settings.journey_timeout_s)
        except CasestreamError as e:  # Kafka did not answer, or the read ran out of time
            return HTMLResponse(page("Journeys", form + f"<p class=bad>{esc(e)}</p>", active="/journeys",
                                     who=_who(p)), 503)
        if not j.events and j.undecodable and _sees_all(p):
            # undecodable messages carry no readable tenant: their count and error are an
            # operator's to see, anyone else gets the 404 below
            return HTMLResponse(page("Journeys", form + f"<p class=bad id=undecodable>{j.undecodable} "
                                     f"message(s) of case {esc(case_id)} could not be decoded; the first: "
                                     f"{esc(j.decode_error)}</p>", active="/journeys", who=_who(p)), 503)
        if not j.events or (j.tenant != p.tenant_id and not _sees_all(p)):
            return HTMLResponse(page("Journeys", form + f"<p id=none>No events of case {esc(case_id)} "
                                     "(or not of your tenant).</p>", active="/journeys", who=_who(p)), 404)
        rows = []
        for e in j.events:
            arrow = (f'<a class="arrow" href="#ev{e.caused_by}">↳ #{e.caused_by}</a>'
                     if e.caused_by is not None else '<span class="muted">—</span>')
            rows.append((f'<span id="ev{e.index}">#{e.index}</span>', esc(e.event_type),
                         esc(e.source), f"{esc(e.aggregate_type)} v{e.aggregate_version}",
                         esc(e.event_version), esc(e.occurred_at.isoformat(timespec="milliseconds")),
                         arrow, f'<code title="{esc(e.correlation_id)}">{esc(e.correlation_id[:8])}</code>',
                         f"<code>{esc(e.trace_id)}</code>"))
        body = form + f"<h2>Case {esc(case_id)} · tenant {esc(j.tenant)} · {len(j.events)} events</h2>"
        body += table(("#", "type", "service", "aggregate version", "event version", "occurred at",
                       "caused by", "correlation", "trace id"), rows, id_="timeline")
        if j.undecodable:
            body += f"<p class=warn>{j.undecodable} message(s) of this case could not be decoded.</p>"
        body += _sagas_of_case(case_id, _token(request) or "")
        return HTMLResponse(page("Journeys", body, active="/journeys", who=_who(p)))

    def _sagas_of_case(case_id: str, token: str) -> str:
        try:
            r = service_call("GET", "/sagas?" + urlencode({"case_id": case_id}), token)
        except httpx.HTTPError as e:
            return f"<p class=warn>sagas not read: {esc(e)}</p>"
        if r is None or r.status_code != 200:
            return "<p class=muted>No saga service answered.</p>"
        rows = [(f"<code>{esc(s.get('saga_id'))}</code>", esc(s.get("state")), esc(s.get("step")),
                 esc((s.get("deadline") or {}).get("at")), esc(s.get("attempts")))
                for s in _sagas_in(r)]
        return "<h2>Sagas</h2>" + table(("saga id", "state", "step", "deadline", "attempts"), rows, id_="case-sagas")

    # -- sagas ------------------------------------------------------------------------
    def sagas(request: Request, p: Principal) -> Response:
        token = _token(request) or ""
        done = request.query_params.get("done")
        body = f'<div class="done" id="done">{esc(done)}</div>' if done else ""
        try:
            metrics = service_call("GET", "/sagas/metrics", token)
            stuck = service_call("GET", "/sagas/stuck", token)
            review = [s for st in sources.settings.review_states
                      for s in _sagas_in(service_call("GET", "/sagas?" + urlencode({"state": st}), token))]
            failed = [s for st in sources.settings.failed_states
                      for s in _sagas_in(service_call("GET", "/sagas?" + urlencode({"state": st}), token))]
        except httpx.HTTPError as e:
            return HTMLResponse(page("Sagas", body + f"<p class=bad>saga service: {esc(e)}</p>",
                                     active="/sagas", who=_who(p)), 503)
        if metrics is None:
            return HTMLResponse(page("Sagas", body + "<p class=muted>No configured service answers /sagas.</p>",
                                     active="/sagas", who=_who(p)))
        gauges = metrics.json().get("gauges", {}) if metrics.status_code == 200 else {}
        counts = {k: v for k, v in gauges.items()}
        body += "<h2>By state</h2>" + table(("gauge", "value"), [(esc(k), f'<span class=num>{esc(v)}</span>')
                                                                  for k, v in sorted(_flat(counts))], id_="counts")
        body += "<h2>Stuck (past deadline + grace)</h2>" + _saga_table(_sagas_in(stuck), "stuck", False)
        body += "<h2>Manual review</h2>" + _saga_table(review, "manual-review",
                                                       ROLE_SUPERVISOR in p.roles)
        body += "<h2>Compensation failed</h2>" + _saga_table(failed, "compensation-failed", False)
        return HTMLResponse(page("Sagas", body, active="/sagas", who=_who(p)))

    def _saga_table(items: list[dict[str, Any]], ident: str, resolvable: bool) -> str:
        if not items:
            return f'<p class="muted" id="{ident}-none">none</p>'
        rows = []
        for s in items:
            sid = str(s.get("saga_id"))
            case = s.get("case_id") or (s.get("data") or {}).get("case_id")
            action = ""
            if resolvable:
                action = (f'<form method="post" action="/sagas/{quote(sid)}/resolve">'
                          f'<input type="text" name="reason" required placeholder="reason (required)" '
                          f'class="reason"> <button type="submit" class="resolve">Resolve</button></form>')
            rows.append((f"<code>{esc(sid)}</code>", esc(s.get("state")),
                         f'<a href="/journeys?case_id={quote(str(case))}">{esc(case)}</a>' if case else "-",
                         esc((s.get("deadline") or {}).get("at")), action))
        return table(("saga id", "state", "case id", "deadline", ""), rows, id_=ident)

    async def resolve(request: Request) -> Response:
        form = await _form(request)

        def act(req: Request, p: Principal) -> Response:
            saga_id = req.path_params["saga_id"]
            reason = str(form.get("reason") or "").strip()
            if not reason:
                return HTMLResponse(page("Sagas", "<p class=bad>reason: required</p>", who=_who(p)), 400)
            try:
                r = service_call("POST", f"/sagas/{quote(saga_id)}/resolve", _token(req) or "",
                                 json={"reason": reason})
            except httpx.HTTPError as e:
                return HTMLResponse(page("Sagas", f"<p class=bad>saga service: {esc(e)}</p>", who=_who(p)), 503)
            ok = r is not None and r.status_code == 200
            detail = "resolved" if ok else (r.text[:500] if r is not None else "no saga service")
            try:
                record_action(sources.kafka, OperatorAction(
                    actor=p.subject, tenant=p.tenant_id, roles=tuple(sorted(p.roles)),
                    action=ACTION_SAGA_RESOLVE, target=saga_id, items=(saga_id,), reason=reason,
                    outcome="ok" if ok else "failed", detail=detail))
            except CasestreamError as e:
                detail += f" (action not recorded: {e})"
            if not ok:
                return HTMLResponse(page("Sagas", f"<p class=bad>resolve refused: {esc(detail)}</p>",
                                         who=_who(p)), r.status_code if r is not None else 503)
            return RedirectResponse("/sagas?" + urlencode({"done": f"saga {saga_id} resolved: {reason}"}), 303)
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(authed(ACT_ROLES, act), request)

    # -- dead letters -----------------------------------------------------------------
    def deadletters(request: Request, p: Principal) -> Response:
        chosen = request.query_params.get("consumer")
        done = request.query_params.get("done")
        body = f'<div class="done" id="done">{esc(done)}</div>' if done else ""
        try:
            counts = dead_letter_counts(sources.kafka)
            actions = read_actions(sources.kafka) if any(counts.values()) else []
        except CasestreamError as e:
            return HTMLResponse(page("Dead letters", body + f"<p class=bad>{esc(e)}</p>", active="/deadletters",
                                     who=_who(p)), 503)
        rows, detail = [], ""
        for c in list(dict.fromkeys([*sources.consumers, *sorted(counts)])):
            visible: list[Any] = []
            total = counts.get(c, 0)
            if total:  # an empty (or missing) dead-letter topic has nothing open: no more to read
                try:
                    state = load_dead_letter_state(sources.kafka, c, actions=actions)
                except CasestreamError as e:
                    rows.append((esc(c), f"<span class=bad>{esc(e)}</span>", esc(total)))
                    continue
                visible = [e for e in state.open if _visible(e, p)]
            rows.append((f'<a href="/deadletters?consumer={quote(c)}">{esc(c)}</a>',
                         f'<span class="num depth" data-consumer="{esc(c)}">{len(visible)}</span>',
                         esc(total)))
            if c == chosen:
                detail = _dead_letter_detail(c, visible, ROLE_SUPERVISOR in p.roles)
        body += table(("consumer", "open", "on topic (all states)"), rows, id_="consumers") + detail
        return HTMLResponse(page("Dead letters", body, active="/deadletters", who=_who(p)))

    def _decoded(e: Any) -> Any:
        value = e.record.value
        if value is None:
            return None
        try:
            return sources.codec.decode(value)
        except Exception:  # noqa: BLE001 - poison: shown as undecodable
            return None

    def _visible(e: Any, p: Principal) -> bool:
        if _sees_all(p):
            return True
        env = _decoded(e)
        return env is not None and env.tenant_id == p.tenant_id

    def _dead_letter_detail(consumer: str, entries: list[Any], can_act: bool) -> str:
        out = f"<h2>Open dead letters of {esc(consumer)}</h2>"
        if not entries:
            return out + '<p id="no-open" class="ok">No open dead letters.</p>'
        rows = []
        for e in entries:
            env = _decoded(e)
            payload = (f"<pre>{esc(redact(pretty(env.payload)))}</pre>" if env is not None
                       else f"<span class=warn>not decodable ({len(e.record.value or b'')} bytes)</span>")
            box = (f'<input type="checkbox" name="label" value="{esc(e.label)}" class="pick">' if can_act else "")
            rows.append((box, esc(e.label), esc(e.state), esc(e.event_type), f"<code>{esc(e.key)}</code>",
                         esc(e.reason), f"<small>{esc(e.message)}</small>", esc(e.attempts),
                         esc(e.first_failure), esc(e.last_failure), payload))
        tab = table(("", "label", "state", "type", "key", "reason", "error", "attempts", "first failure",
                     "last failure", "payload (redacted)"), rows, id_="dead-letters")
        if not can_act:
            return out + tab
        return out + (f'<form method="post" action="/deadletters/{quote(consumer)}">{tab}'
                      '<p><input type="text" name="reason" id="reason" required placeholder="reason (required)"> '
                      '<button type="submit" name="action" value="redrive" id="redrive">Re-drive selected</button> '
                      '<button type="submit" name="action" value="discard" id="discard">Discard selected</button>'
                      "</p></form>")

    async def deadletter_action(request: Request) -> Response:
        form = await _form(request)

        def act(req: Request, p: Principal) -> Response:
            consumer = req.path_params["consumer"]
            labels = [str(v) for v in form.getlist("label")]
            reason = str(form.get("reason") or "")
            what = str(form.get("action") or "")
            if what not in ("redrive", "discard") or not labels:
                return HTMLResponse(page("Dead letters", "<p class=bad>choose at least one dead letter and "
                                         "an action (redrive or discard)</p>", who=_who(p)), 400)
            try:
                state = load_dead_letter_state(sources.kafka, consumer)
                by_label = {e.label: e for e in state.open if _visible(e, p)}
                missing = [lab for lab in labels if lab not in by_label]
                if missing:
                    return HTMLResponse(page("Dead letters", f"<p class=bad>not open: {esc(', '.join(missing))}"
                                             "</p>", who=_who(p)), 409)
                records = [by_label[lab].record for lab in labels]
                fn = redrive_dead_letters if what == "redrive" else discard_dead_letters
                done = fn(sources.kafka, consumer, records, actor=_actor(p), reason=reason)
            except CasestreamError as e:
                return HTMLResponse(page("Dead letters", f"<p class=bad>{esc(e)}</p>", who=_who(p)), 400)
            return RedirectResponse("/deadletters?" + urlencode({"consumer": consumer, "done": done.detail}), 303)
        from starlette.concurrency import run_in_threadpool

        return await run_in_threadpool(authed(ACT_ROLES, act), request)

    # -- flow -------------------------------------------------------------------------
    def flow(request: Request, p: Principal) -> Response:
        fragment = _flow_fragment()
        if request.query_params.get("fragment"):
            return HTMLResponse(fragment)
        return HTMLResponse(page("Flow", f'<div id="flow">{fragment}</div>', active="/flow", who=_who(p),
                                 script=FLOW_REFRESH_JS))

    def _flow_fragment() -> str:
        rows = []
        with httpx.Client(timeout=timeout) as client:
            for name, base in sources.services.items():
                try:
                    r = client.get(base.rstrip("/") + "/metrics")
                    f = outbox_flow(r.text) if r.status_code == 200 else None
                except httpx.HTTPError:
                    f = None
                rows.append((esc(name), "<span class=bad>down</span>" if f is None else "up",
                             fmt(f.pending if f else None), fmt(f.oldest_pending_s if f else None, 1),
                             fmt(f.failed if f else None)))
        out = "<h2>Outbox per service</h2>" + table(("service", "metrics", "pending", "oldest pending s",
                                                     "failed"), rows, id_="outbox")
        lag_rows = []
        for c in sources.consumers:
            try:
                parts = group_lag(sources.kafka, c, _topics_of(c))
            except Exception as e:  # noqa: BLE001 - shown in the row
                lag_rows.append((esc(c), "-", "-", "-", "-", f"<span class=bad>{esc(e)}</span>"))
                continue
            for pl in parts:
                lag_rows.append((esc(c), esc(pl.topic), esc(pl.partition), fmt(pl.committed), fmt(pl.high),
                                 f'<span class="num lag" data-group="{esc(c)}">{pl.lag}</span>'))
        total = sum(int(r[5].split(">")[1].split("<")[0]) for r in lag_rows if 'class="num lag"' in r[5])
        out += (f'<h2>Lag per partition <span id="total-lag" class="num">(total {total})</span></h2>'
                + table(("group", "topic", "partition", "committed", "high watermark", "lag"), lag_rows, id_="lag"))
        out += "<h2>Replay runs</h2>"
        if sources.replay_runs is None:
            out += "<p class=muted>No projection database configured (CASESTREAM_CONSOLE_REPLAY_DATABASES).</p>"
        else:
            out += replay_runs_table(sources.replay_runs(), datetime.now(timezone.utc))
        return out

    def _topics_of(consumer: str) -> list[str]:
        return [*sources.journey_topics, f"{consumer}.redrive"]

    def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def home(_request: Request) -> Response:
        return RedirectResponse("/journeys", 303)

    routes = [
        Route("/", home), Route("/healthz", healthz),
        Route("/login", login_form, methods=["GET"]), Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/journeys", authed(READ_ROLES, journeys)),
        Route("/sagas", authed(READ_ROLES, sagas)),
        Route("/sagas/{saga_id}/resolve", resolve, methods=["POST"]),
        Route("/deadletters", authed(READ_ROLES, deadletters)),
        Route("/deadletters/{consumer}", deadletter_action, methods=["POST"]),
        Route("/flow", authed(READ_ROLES, flow)),
    ]
    return Starlette(routes=routes)


def _sagas_in(r: httpx.Response | None) -> list[dict[str, Any]]:
    if r is None or r.status_code != 200:
        return []
    body = r.json()
    if isinstance(body, list):
        return body
    return list(body.get("sagas") or body.get("items") or [])


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.extend(_flat(v, f"{prefix}{k}."))
        else:
            out.append((f"{prefix}{k}", v))
    return out


