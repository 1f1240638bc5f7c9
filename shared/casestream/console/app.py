"""The web console: starlette app, server-rendered pages, the operators' actions.

Pages (every one needs a signed-in console session, or ``Authorization: Bearer``):

    GET  /login                   the sign-in form (a pre-session and its CSRF token)
    POST /login                   form ``token`` (the services' JWT, verified with the same
                                  ``AuthSettings``), ``csrf``: starts a console session
    POST /logout                  form ``csrf``: ends the session at once
    GET  /journeys?case_id=ID     a case's events across the topics, causation arrows, its sagas
    GET  /sagas                   counts by state, stuck, MANUAL_REVIEW (resolve), compensation failed
    POST /sagas/{saga_id}/resolve form ``reason``, ``csrf``: the saga service's resolve route, as the caller
    GET  /deadletters?consumer=C  open dead letters per consumer, decoded and redacted
    POST /deadletters/{consumer}  form ``action`` (redrive|discard), ``label`` (repeatable), ``reason``, ``csrf``
    GET  /flow                    outbox backlog per service, lag per partition per group,
                                  recent replay runs (progress, rate, ETA)
    GET  /catalog                 the event catalog: channels, event types, services
                                  (:mod:`casestream.console.catalog`)

Sessions (:mod:`casestream.console.sessions`): the browser keeps a random session id in
an HttpOnly, SameSite=Strict cookie (``Secure`` and ``__Host-`` prefixed in production);
the token stays on the server. Every state-changing form carries the session's CSRF
token, and a POST a browser sent from another origin is refused (:mod:`casestream.console.guard`).

The edge is the services' (:func:`casestream.http.edge.edge_middleware`): error boundary,
the body gate (form bodies of at most ``max_body_bytes``; a caller who is not signed in
gets 401 before the body is read, the sign-in form's body has the anonymous budget), load
shedding, deadline, per-client rate limits. Outside it,
:class:`~casestream.console.guard.ConsoleAuthMiddleware` identifies the caller from the
headers and refuses cross-origin posts.
Journey and dead-letter reads are bounded: at most ``expensive_concurrency`` run at once
(one more answers 503 with ``Retry-After``), and their results are reused for a few
seconds (``journey_cache_s``, ``deadletter_cache_s``).

Roles: reading needs ``officer``, ``supervisor`` or ``operator``; actions need ``supervisor``.
Tenancy: a caller sees the dead letters (and their counts) and journeys of their token's
tenant only, unless they hold ``operator`` (undecodable dead letters, with no tenant, and
the topics' totals only then); sagas come from the saga service as the caller, which scopes
them to the token's tenant. Dead letters are those of the configured consumers only
(``ConsoleSources.consumers``): any other consumer name is refused with 400 before Kafka
is asked. Every action goes through :mod:`casestream.operations` (the CLI's code) and is
recorded on the operator-action topic (who, when, why). Kafka and service reads run in
the thread pool.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, TypeVar
from urllib.parse import parse_qs, quote, urlencode

import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from casestream.auth import ROLE_OFFICER, ROLE_OPERATOR, ROLE_SUPERVISOR, InvalidToken, Principal, TokenVerifier
from casestream.console.catalog import catalog_routes
from casestream.console.guard import ConsoleAuthMiddleware, SecurityHeadersMiddleware, caller_of
from casestream.console.pages import STYLE, STYLE_PATH, csrf_field, esc, fmt, page, pretty, replay_runs_table, table
from casestream.console.sessions import SessionStore
from casestream.console.sources import ConsoleSources
from casestream.consumer.deadletters import redact
from casestream.errors import CasestreamError
from casestream.http.body import BodyLimits
from casestream.http.counters import EdgeCounters
from casestream.http.edge import EdgePolicy, edge_middleware
from casestream.http.ratelimit import RateLimit
from casestream.operations import (
    ACTION_SAGA_RESOLVE,
    Actor,
    DeadLetterState,
    FailureGroup,
    OperatorAction,
    ReplayRuns,
    dead_letter_counts,
    discard_dead_letters,
    failure_groups,
    group_lag,
    load_dead_letter_state,
    load_journey,
    outbox_flow,
    parse_prometheus,
    pending_after_deploy,
    read_actions,
    record_action,
    redrive_dead_letters,
    request_redrive_after_deploy,
    retry_warning,
)

log = logging.getLogger(__name__)

__all__ = ["console_app", "COOKIE", "SECURE_COOKIE", "LOGIN_COOKIE", "FORM_TYPE"]

COOKIE = "casestream_session"
SECURE_COOKIE = "__Host-casestream_session"
"""The session cookie's name when it is ``Secure`` (RFC 6265bis §4.1.3.2: host-only, path /)."""
LOGIN_COOKIE = "casestream_login"
FORM_TYPE = "application/x-www-form-urlencoded"
READ_ROLES = (ROLE_OFFICER, ROLE_SUPERVISOR, ROLE_OPERATOR)
ACT_ROLES = (ROLE_SUPERVISOR,)
FLOW_SCRIPT_PATH = "/static/flow.js"
BUSY_RETRY_S = 2
SAGAS_LISTED = 1000
"""Sagas the Sagas page reads for its waiting list and counts (the saga routes' largest limit)."""
FLOW_BEHIND_S = 5.0
"""Oldest pending outbox row age (seconds) from which the Flow page lists a service as behind."""
"""Sagas the Sagas page reads for its waiting list and counts (the saga routes' largest limit)."""

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

T = TypeVar("T")


class Form:
    """An ``application/x-www-form-urlencoded`` body (what the pages' forms send), already
    bounded by the edge's body gate, parsed with ``urllib.parse.parse_qs``."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self._fields = fields

    def get(self, name: str) -> str | None:
        values = self._fields.get(name)
        return values[0] if values else None

    def getlist(self, name: str) -> list[str]:
        return list(self._fields.get(name, []))


async def _form(request: Request) -> Form:
    body = await request.body()
    return Form(parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True))


class Busy(CasestreamError):
    """Every slot for an expensive read is taken (answered 503 with ``Retry-After``)."""


class BoundedReads:
    """At most ``slots`` expensive reads at once (a further one raises :class:`Busy` at
    once rather than queueing a thread), each result kept ``ttl_s`` seconds in a cache of
    ``size`` entries, the oldest dropped first (0 s: not kept)."""

    def __init__(self, slots: threading.BoundedSemaphore, *, ttl_s: float, size: int) -> None:
        self._slots = slots
        self._ttl, self._size = ttl_s, max(1, size)
        self._lock = threading.Lock()
        self._cache: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def get(self, key: Any, load: Callable[[], T]) -> T:
        with self._lock:
            kept = self._cache.get(key)
            if kept is not None and kept[0] > time.monotonic():
                return kept[1]  # type: ignore[no-any-return]
        if not self._slots.acquire(blocking=False):
            raise Busy("too many journey and dead-letter reads at once; retry in a few seconds")
        try:
            value = load()
        finally:
            self._slots.release()
        if self._ttl > 0:
            with self._lock:
                self._cache.pop(key, None)
                self._cache[key] = (time.monotonic() + self._ttl, value)
                while len(self._cache) > self._size:
                    self._cache.popitem(last=False)
        return value

    def forget(self, *keys: Any) -> None:
        with self._lock:
            for key in keys:
                self._cache.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


def _who(p: Principal) -> str:
    return f"{p.subject} · tenant {p.tenant_id} · {', '.join(sorted(p.roles)) or 'no roles'}"


def _sees_all(p: Principal) -> bool:
    return ROLE_OPERATOR in p.roles


def _actor(p: Principal) -> Actor:
    return Actor(p.subject, tenant=p.tenant_id, roles=sorted(p.roles))


def _token_lifetime(token: str) -> float | None:
    """Seconds until the (verified) token's ``exp`` (None: no ``exp``)."""
    import jwt

    exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    return float(exp) - time.time() if isinstance(exp, int | float) else None


def console_app(sources: ConsoleSources, verifier: TokenVerifier, *, production: bool = False) -> Starlette:
    """The console over ``sources`` (what to read) with tokens checked by ``verifier``.

    ``production``: the session cookie is ``Secure`` unless ``cookie_secure`` says otherwise."""
    settings = sources.settings
    timeout = settings.request_timeout_s
    secure = production if settings.cookie_secure is None else settings.cookie_secure
    cookie = SECURE_COOKIE if secure else COOKIE
    sessions = SessionStore(ttl_s=settings.session_ttl_s, max_sessions=settings.max_sessions)
    slots = threading.BoundedSemaphore(settings.expensive_concurrency)
    journey_reads = BoundedReads(slots, ttl_s=settings.journey_cache_s, size=settings.journey_cache_size)
    # the one-by-one view and a few tenants' grouped views
    dead_letter_reads = BoundedReads(slots, ttl_s=settings.deadletter_cache_s, size=4)
    known_consumers = frozenset(sources.consumers)

    def render(request: Request, title: str, body: str, status: int = 200, *, active: str = "",
               script: str = "", headers: dict[str, str] | None = None) -> HTMLResponse:
        c = caller_of(request.scope)
        who = _who(c.principal) if c.principal is not None else ""
        csrf = c.session.csrf if c.session is not None else ""
        return HTMLResponse(page(title, body, active=active, who=who, script=script, csrf=csrf), status,
                            headers=headers)

    def busy(request: Request, title: str, e: Busy, active: str) -> Response:
        return render(request, title, f"<p class=bad id=busy>{esc(e)}</p>", 503, active=active,
                      headers={"Retry-After": str(BUSY_RETRY_S)})

    def authed(roles: tuple[str, ...], fn: Callable[[Request, Principal], Response]) -> Callable[[Request], Any]:
        def endpoint(request: Request) -> Response:
            c = caller_of(request.scope)
            if c.principal is None:
                why = c.error or "sign in to use the console"
                if request.method == "GET":
                    nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                    return RedirectResponse("/login?" + urlencode({"next": nxt, "why": why}), 303)
                return render(request, "Not signed in", f"<p class=bad>{esc(why)}</p>", 401)
            p = c.principal
            if not p.roles & set(roles):
                return render(request, "Forbidden", f"<p class=bad>requires role {esc(' or '.join(roles))}; "
                                                    f"your token has {esc(', '.join(sorted(p.roles)) or 'none')}</p>",
                              403)
            return fn(request, p)
        return endpoint

    def action(roles: tuple[str, ...], fn: Callable[[Request, Principal, Form], Response]) -> Callable[[Request], Any]:
        """A state-changing route: the session's CSRF token checked (a bearer caller has no
        session and needs none), then ``fn`` in the thread pool."""
        async def endpoint(request: Request) -> Response:
            form = await _form(request)
            c = caller_of(request.scope)
            if c.session is not None and not c.session.csrf_ok(form.get("csrf")):
                return render(request, "Refused", "<p class=bad>csrf: the form's token is missing or not "
                                                  "this session's; reload the page and try again</p>", 403)
            return await run_in_threadpool(authed(roles, lambda req, p: fn(req, p, form)), request)
        return endpoint

    def token_of(request: Request) -> str:
        return caller_of(request.scope).token or ""

    def service_call(method: str, path: str, principal_token: str, **kw: Any) -> httpx.Response | None:
        base = sources.saga_service()
        if base is None:
            return None
        with httpx.Client(timeout=timeout) as client:
            return client.request(method, base + path, headers={"authorization": f"Bearer {principal_token}"}, **kw)

    # -- sign in and out --------------------------------------------------------------
    def login_form(request: Request) -> Response:
        why = request.query_params.get("why", "")
        nxt = request.query_params.get("next", "/journeys")
        pre = sessions.pre_session()
        body = (f'<p class="muted">{esc(why)}</p>' if why else "") + (
            '<form method="post" action="/login"><p>Paste your bearer token (JWT; e.g. '
            '<code>casestream token --tenant T --role supervisor</code>):</p>'
            f'<input type="hidden" name="next" value="{esc(nxt)}">{csrf_field(pre.csrf)}'
            '<textarea name="token" id="token" rows="4" cols="80" required></textarea><p>'
            '<button type="submit" id="login">Sign in</button></p></form>')
        resp = HTMLResponse(page("Sign in", body))
        resp.set_cookie(LOGIN_COOKIE, pre.sid, max_age=600, httponly=True, samesite="strict",
                        secure=secure, path="/login")
        return resp

    async def login(request: Request) -> Response:
        form = await _form(request)
        pre = sessions.get(request.cookies.get(LOGIN_COOKIE))
        if pre is None or pre.principal is not None or not pre.csrf_ok(form.get("csrf")):
            return HTMLResponse(page("Sign in", "<p class=bad>csrf: this sign-in form is not this console's "
                                     "or has expired</p><p><a href=\"/login\">open the sign-in form</a></p>"), 403)
        token = str(form.get("token") or "").strip()
        nxt = str(form.get("next") or "/journeys")
        if not nxt.startswith("/") or nxt.startswith("//") or nxt.startswith("/\\"):
            nxt = "/journeys"
        try:
            principal = verifier.verify(token)
        except InvalidToken as e:
            return HTMLResponse(page("Sign in", f"<p class=bad>token refused: {esc(e)}</p>"
                                     '<p><a href="/login">try again</a></p>'), 401)
        session = sessions.sign_in(principal, token, token_expires_in_s=_token_lifetime(token), replaces=pre.sid)
        resp = RedirectResponse(nxt, 303)
        resp.set_cookie(cookie, session.sid, httponly=True, samesite="strict", secure=secure, path="/")
        resp.delete_cookie(LOGIN_COOKIE, path="/login")
        return resp

    def logout_done(request: Request, _p: Principal, _form: Form) -> Response:
        c = caller_of(request.scope)
        if c.session is not None:
            sessions.end(c.session.sid)
        resp = RedirectResponse("/login", 303)
        resp.delete_cookie(cookie, path="/", secure=secure, httponly=True, samesite="strict")
        return resp

    # -- journeys ---------------------------------------------------------------------
    def journeys(request: Request, p: Principal) -> Response:
        case_id = request.query_params.get("case_id", "").strip()
        form = ('<form method="get" action="/journeys"><label>Case id <input type="text" name="case_id" '
                f'id="case_id" value="{esc(case_id) if case_id else ""}"></label> '
                '<button type="submit" id="search">Show journey</button></form>')
        if not case_id:
            return render(request, "Journeys", form, active="/journeys")
        try:
            j = journey_reads.get(case_id, lambda: load_journey(
                sources.kafka, case_id, sources.journey_topics, sources.codec,
                max_messages=settings.journey_max_messages, timeout_s=settings.journey_timeout_s))
        except Busy as e:
            return busy(request, "Journeys", e, "/journeys")
        except CasestreamError as e:  # Kafka did not answer, or the read ran out of time
            return render(request, "Journeys", form + f"<p class=bad>{esc(e)}</p>", 503, active="/journeys")
        if not j.events and j.undecodable and _sees_all(p):
            # undecodable messages carry no readable tenant: their count and error are an
            # operator's to see, anyone else gets the 404 below
            return render(request, "Journeys", form + f"<p class=bad id=undecodable>{j.undecodable} "
                          f"message(s) of case {esc(case_id)} could not be decoded; the first: "
                          f"{esc(j.decode_error)}</p>", 503, active="/journeys")
        if not j.events or (j.tenant != p.tenant_id and not _sees_all(p)):
            return render(request, "Journeys", form + f"<p id=none>No events of case {esc(case_id)} "
                          "(or not of your tenant).</p>", 404, active="/journeys")
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
        body += _sagas_of_case(case_id, token_of(request))
        return render(request, "Journeys", body, active="/journeys")

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
        token = token_of(request)
        done = request.query_params.get("done")
        body = f'<div class="done" id="done">{esc(done)}</div>' if done else ""
        try:
            metrics = service_call("GET", "/sagas/metrics", token)
            recent = _sagas_in(service_call("GET", "/sagas?" + urlencode({"limit": SAGAS_LISTED}), token))
            stuck = service_call("GET", "/sagas/stuck", token)
            review = [s for st in settings.review_states
                      for s in _sagas_in(service_call("GET", "/sagas?" + urlencode({"state": st}), token))]
            failed = [s for st in settings.failed_states
                      for s in _sagas_in(service_call("GET", "/sagas?" + urlencode({"state": st}), token))]
        except httpx.HTTPError as e:
            return render(request, "Sagas", body + f"<p class=bad>saga service: {esc(e)}</p>", 503, active="/sagas")
        if metrics is None:
            return render(request, "Sagas", body + "<p class=muted>No configured service answers /sagas.</p>",
                          active="/sagas")
        gauges = metrics.json().get("gauges", {}) if metrics.status_code == 200 else {}
        now = datetime.now(timezone.utc)
        stuck_items, csrf = _sagas_in(stuck), _csrf_of(request)
        body += ('<p id="saga-summary">'
                 + " ".join(f'<span class="pill {cls if gauges.get(key, n) else "muted"}">{esc(label)} '
                            f'<b>{esc(gauges.get(key, n))}</b></span>'
                            for label, key, n, cls in (
                                ("stuck", "sagas_stuck", len(stuck_items), "bad"),
                                ("manual review", "sagas_parked", len(review), "warn"),
                                ("compensation failed", "sagas_alerting", len(failed), "bad")))
                 + "</p>")
        body += "<h2>Stuck (past deadline + grace)</h2>" + _saga_table(stuck_items, "stuck", False, csrf, now)
        body += "<h2>Manual review</h2>" + _saga_table(review, "manual-review", ROLE_SUPERVISOR in p.roles, csrf, now)
        body += "<h2>Compensation failed</h2>" + _saga_table(failed, "compensation-failed", False, csrf, now)
        waiting = sorted((s for s in recent if s.get("state_kind") == "active" and _deadline_of(s)),
                         key=lambda s: _deadline_of(s) or "")
        body += "<h2>Waiting, nearest deadline first</h2>" + _saga_table(waiting, "waiting", False, csrf, now)
        by_kind: dict[tuple[str, str], tuple[str, int]] = {}
        for s in recent:
            k = (str(s.get("definition") or "-"), str(s.get("state") or "-"))
            by_kind[k] = (str(s.get("state_kind") or ""), by_kind.get(k, ("", 0))[1] + 1)
        rows = [(esc(d), esc(st), esc(kind), f'<span class="num">{n}</span>')
                for (d, st), (kind, n) in sorted(by_kind.items())]
        of = (f"the newest {len(recent)} sagas" if len(recent) >= SAGAS_LISTED else "every saga")
        body += (f"<h2>By definition and state</h2><p class=muted>counted over {of}</p>"
                 + table(("definition", "state", "kind", "sagas"), rows, id_="counts"))
        return render(request, "Sagas", body, active="/sagas")

    def _saga_table(items: list[dict[str, Any]], ident: str, resolvable: bool, csrf: str,
                    now: datetime) -> str:
        if not items:
            return f'<p class="muted" id="{ident}-none">none</p>'
        rows = []
        for s in items:
            sid = str(s.get("saga_id"))
            case = s.get("case_id") or (s.get("data") or {}).get("case_id")
            action = ""
            if resolvable:
                action = (f'<form method="post" action="/sagas/{quote(sid)}/resolve">{csrf_field(csrf)}'
                          f'<input type="text" name="reason" required placeholder="reason (required)" '
                          f'class="reason"> <button type="submit" class="resolve">Resolve</button></form>')
            rows.append((f"<code>{esc(sid)}</code>", esc(s.get("definition")), esc(s.get("state")),
                         esc(s.get("step")),
                         f'<a href="/journeys?case_id={quote(str(case))}">journey of {esc(case)}</a>' if case else "-",
                         esc(_deadline_of(s)), _until(_deadline_of(s), now), action))
        return table(("saga id", "definition", "state", "step", "journey", "deadline", "time to deadline",
                      "resolve"),
                     rows, id_=ident)

    def resolve(req: Request, p: Principal, form: Form) -> Response:
        saga_id = req.path_params["saga_id"]
        reason = str(form.get("reason") or "").strip()
        if not reason:
            return render(req, "Sagas", "<p class=bad>reason: required</p>", 400)
        try:
            r = service_call("POST", f"/sagas/{quote(saga_id)}/resolve", token_of(req), json={"reason": reason})
        except httpx.HTTPError as e:
            return render(req, "Sagas", f"<p class=bad>saga service: {esc(e)}</p>", 503)
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
            return render(req, "Sagas", f"<p class=bad>resolve refused: {esc(detail)}</p>",
                          r.status_code if r is not None else 503)
        return RedirectResponse("/sagas?" + urlencode({"done": f"saga {saga_id} resolved: {reason}"}), 303)

    # -- dead letters -----------------------------------------------------------------
    def dead_letter_view() -> tuple[dict[str, int], dict[str, list[tuple[Any, Any]] | str]]:
        """Counts per configured consumer, and the open dead letters (with their decoded
        envelopes, None: undecodable) of each whose topic holds any, or why they were not read."""
        counts = {c: n for c, n in dead_letter_counts(sources.kafka).items() if c in known_consumers}
        actions = read_actions(sources.kafka) if any(counts.values()) else []
        entries: dict[str, list[tuple[Any, Any]] | str] = {}
        for c, n in counts.items():
            if n:  # an empty (or missing) dead-letter topic has nothing open: no more to read
                try:
                    entries[c] = [(e, _decoded(e)) for e in
                                  load_dead_letter_state(sources.kafka, c, actions=actions).open]
                except CasestreamError as e:
                    entries[c] = str(e)
        return counts, entries

    def unknown_consumer(request: Request, consumer: str) -> Response:
        return render(request, "Dead letters", f"<p class=bad id=unknown>consumer: unknown {esc(consumer)} "
                      "(not a consumer of the configured services)</p>", 400, active="/deadletters")

    def deadletters(request: Request, p: Principal) -> Response:
        chosen = request.query_params.get("consumer")
        if chosen is not None and chosen not in known_consumers:
            return unknown_consumer(request, chosen)
        done = request.query_params.get("done")
        body = f'<div class="done" id="done">{esc(done)}</div>' if done else ""
        try:
            counts, entries = dead_letter_reads.get("view", dead_letter_view)  # one slot for the page
        except Busy as e:
            return busy(request, "Dead letters", e, "/deadletters")
        except CasestreamError as e:
            return render(request, "Dead letters", body + f"<p class=bad>{esc(e)}</p>", 503, active="/deadletters")
        rows, detail = [], ""
        everything = _sees_all(p)
        for c in sources.consumers:
            total = counts.get(c, 0)
            found = entries.get(c, [])
            if isinstance(found, str):
                rows.append((esc(c), f"<span class=bad>{esc(found)}</span>") + ((esc(total),) if everything else ()))
                continue
            visible = [(e, env) for e, env in found if _visible(env, p)]
            rows.append((f'<a href="/deadletters?consumer={quote(c)}">{esc(c)}</a>',
                         f'<span class="num depth" data-consumer="{esc(c)}">{len(visible)}</span>')
                        + ((esc(total),) if everything else ()))
            if c == chosen:
                detail = _dead_letter_detail(c, visible, ROLE_SUPERVISOR in p.roles, _csrf_of(request))
        heads = ("consumer", "open") + (("on topic (all tenants, all states)",) if everything else ())
        body += '<p><a href="/deadletters/groups" id="groups-link">Grouped by failure</a></p>'
        body += table(heads, rows, id_="consumers") + detail
        return render(request, "Dead letters", body, active="/deadletters")

    def _decoded(e: Any) -> Any:
        value = e.record.value
        if value is None:
            return None
        try:
            return sources.codec.decode(value)
        except Exception:  # noqa: BLE001 - poison: shown as undecodable
            return None

    def _visible(env: Any, p: Principal) -> bool:
        if _sees_all(p):
            return True
        return env is not None and env.tenant_id == p.tenant_id

    def _dead_letter_detail(consumer: str, entries: list[tuple[Any, Any]], can_act: bool, csrf: str) -> str:
        out = f"<h2>Open dead letters of {esc(consumer)}</h2>"
        if not entries:
            return out + '<p id="no-open" class="ok">No open dead letters.</p>'
        shown = entries[:settings.deadletters_shown]
        if len(shown) < len(entries):
            out += (f'<p class=note id="more">the oldest {len(shown)} of {len(entries)} open dead letters '
                    "are listed; act on them to see the next ones</p>")
        rows = []
        for e, env in shown:
            payload = (f"<pre>{esc(redact(pretty(env.payload)))}</pre>" if env is not None
                       else f"<span class=warn>not decodable ({len(e.record.value or b'')} bytes)</span>")
            box = (f'<input type="checkbox" name="label" value="{esc(e.label)}" class="pick">' if can_act else "")
            rows.append((box, esc(e.label), esc(e.state), esc(e.event_type), f"<code>{esc(e.key)}</code>",
                         esc(e.reason), f"<small>{esc(e.message)}</small>", esc(e.attempts),
                         esc(e.first_failure), esc(e.last_failure), payload))
        tab = table(("pick", "label", "state", "type", "key", "reason", "error", "attempts", "first failure",
                     "last failure", "payload (redacted)"), rows, id_="dead-letters")
        if not can_act:
            return out + tab
        return out + (f'<form method="post" action="/deadletters/{quote(consumer)}">{csrf_field(csrf)}{tab}'
                      '<p><input type="text" name="reason" id="reason" required placeholder="reason (required)"> '
                      '<button type="submit" name="action" value="redrive" id="redrive">Re-drive selected</button> '
                      '<button type="submit" name="action" value="discard" id="discard">Discard selected</button>'
                      "</p></form>")

    def deadletter_action(req: Request, p: Principal, form: Form) -> Response:
        consumer = req.path_params["consumer"]
        if consumer not in known_consumers:  # before Kafka is asked anything about it
            return unknown_consumer(req, consumer)
        labels = [str(v) for v in form.getlist("label")]
        reason = str(form.get("reason") or "")
        what = str(form.get("action") or "")
        if what not in ("redrive", "discard") or not labels:
            return render(req, "Dead letters", "<p class=bad>choose at least one dead letter and "
                          "an action (redrive or discard)</p>", 400)
        try:
            state = load_dead_letter_state(sources.kafka, consumer)
            by_label = {e.label: e for e in state.open if _visible(_decoded(e), p)}
            missing = [lab for lab in labels if lab not in by_label]
            if missing:
                return render(req, "Dead letters", f"<p class=bad>not open: {esc(', '.join(missing))}</p>", 409)
            records = [by_label[lab].record for lab in labels]
            fn = redrive_dead_letters if what == "redrive" else discard_dead_letters
            done = fn(sources.kafka, consumer, records, actor=_actor(p), reason=reason)
        except CasestreamError as e:
            return render(req, "Dead letters", f"<p class=bad>{esc(e)}</p>", 400)
        finally:
            dead_letter_reads.clear()  # the one-by-one and the grouped views
        return RedirectResponse("/deadletters?" + urlencode({"consumer": consumer, "done": done.detail}), 303)

    # -- dead-letter failure groups ---------------------------------------------------
    def _groups_of(consumer: str, p: Principal) -> list[FailureGroup]:
        """The open failure groups of ``consumer`` over the entries ``p`` may see."""
        state = load_dead_letter_state(sources.kafka, consumer)
        visible = tuple(e for e in state.open if _visible(_decoded(e), p))
        return failure_groups(DeadLetterState(consumer, visible))

    def deadletter_groups(request: Request, p: Principal) -> Response:
        chosen = request.query_params.get("consumer")
        if chosen is not None and chosen not in known_consumers:
            return unknown_consumer(request, chosen)
        done = request.query_params.get("done")
        body = f'<div class="done" id="done">{esc(done)}</div>' if done else ""
        body += ('<p class=note>Open dead letters grouped by failure: consumer, failure class, exception '
                 'type, event type and message (numbers and identifiers normalised). '
                 '<a href="/deadletters">One by one</a></p>')
        def load() -> dict[str, list[FailureGroup] | str]:
            counts = dead_letter_counts(sources.kafka)
            out: dict[str, list[FailureGroup] | str] = {}
            for c in ([chosen] if chosen else sources.consumers):
                try:
                    out[c] = _groups_of(c, p) if counts.get(c) else []
                except CasestreamError as e:
                    out[c] = str(e)
            return out

        seen_as = "*" if _sees_all(p) else p.tenant_id
        try:
            by_consumer = dead_letter_reads.get(("groups", chosen, seen_as), load)  # one slot for the page
        except Busy as e:
            return busy(request, "Dead-letter groups", e, "/deadletters")
        except CasestreamError as e:
            return render(request, "Dead-letter groups", body + f"<p class=bad>{esc(e)}</p>", 503,
                          active="/deadletters")
        can_act, csrf = ROLE_SUPERVISOR in p.roles, _csrf_of(request)
        rows, forms = [], ""
        for c, groups in by_consumer.items():
            if isinstance(groups, str):
                rows.append((esc(c), f"<span class=bad>{esc(groups)}</span>") + ("",) * 8)
                continue
            for g in groups:
                sample = g.sample
                klass = esc(g.failure_class) + ("" if g.retryable else ' <span class="warn">non-retryable</span>')
                rows.append((esc(c), f'<a href="#g-{esc(g.fingerprint)}"><code>{esc(g.fingerprint)}</code></a>',
                             klass, esc(g.error_class), esc(g.event_type), f"<small>{esc(g.message)}</small>",
                             f'<span class="num">{g.count}</span>', esc(_seconds(g.first_seen)),
                             esc(_seconds(g.last_seen)),
                             f'<code>{esc(sample.label)}</code> <small title="{esc(sample.message)}">'
                             f"{esc(_shortened(sample.message, 60))}</small>"))
                if can_act:
                    forms += _group_form(g, csrf)
        if not rows:
            return render(request, "Dead-letter groups", body + '<p id="no-groups" class="ok">No open dead '
                          "letters.</p>" + _waiting_for_deploy(chosen, p), active="/deadletters")
        body += table(("consumer", "group", "failure class", "exception type", "event type",
                       "normalised message", "count", "first seen", "last seen", "sample"), rows, id_="groups")
        return render(request, "Dead-letter groups", body + _waiting_for_deploy(chosen, p) + forms,
                      active="/deadletters")

    def _waiting_for_deploy(chosen: str | None, p: Principal) -> str:
        """The re-drive-after-deploy requests still waiting (the requester's tenant's, or
        every one for an operator of every tenant)."""
        try:
            waiting = [a for a in pending_after_deploy(read_actions(sources.kafka), chosen)
                       if a.target in known_consumers and (_sees_all(p) or a.tenant == p.tenant_id)]
        except CasestreamError as e:
            return f'<p class=bad id="after-deploy-error">re-drives after deploy not read: {esc(e)}</p>'
        if not waiting:
            return ""
        rows = [(esc(a.target), f"<code>{esc(a.params.get('fingerprint'))}</code>", esc(a.params.get("failure_class")),
                 f'<span class="num">{len(a.items)}</span>', f"<code>{esc(a.params.get('builds'))}</code>",
                 esc(_seconds(a.at)), esc(a.actor), esc(a.reason)) for a in waiting]
        return ("<h2>Waiting for a deploy</h2><p class=note>Re-driven by the consumer's service once every "
                "member of the consumer runs a build other than these.</p>"
                + table(("consumer", "group", "failure class", "dead letters asked", "builds running then",
                         "asked at", "by", "reason"), rows, id_="after-deploy"))

    def _group_form(g: FailureGroup, csrf: str, *, confirm: bool = False, reason: str = "") -> str:
        warn = "" if g.retryable else (
            f'<p class="warn" id="warn-{esc(g.fingerprint)}">{esc(g.failure_class)} is not retryable: '
            "re-driven as is, these dead letters fail again the same way. Re-drive after the fix is "
            "deployed, or discard them.</p>")
        buttons = ('<button type="submit" name="action" value="redrive">Re-drive group</button> '
                   '<button type="submit" name="action" value="redrive-after-deploy">Re-drive after deploy'
                   '</button> <button type="submit" name="action" value="discard">Discard group</button>')
        if confirm:
            buttons = ('<input type="hidden" name="confirm" value="yes">'
                       '<button type="submit" name="action" value="redrive" id="confirm">'
                       f"Re-drive {g.count} anyway</button> "
                       '<a href="/deadletters/groups">Cancel</a>')
        return (f'<section id="g-{esc(g.fingerprint)}"><h3>{esc(g.consumer)} · group <code>'
                f"{esc(g.fingerprint)}</code> ({g.count})</h3>{warn}"
                f'<form method="post" action="/deadletters/{quote(g.consumer)}/groups/{quote(g.fingerprint)}">'
                f'{csrf_field(csrf)}<input type="text" name="reason" required value="{esc(reason)}" '
                f'placeholder="reason (required)"> {buttons}</form></section>')

    def deadletter_group_action(req: Request, p: Principal, form: Form) -> Response:
        consumer, fingerprint = req.path_params["consumer"], req.path_params["fingerprint"]
        if consumer not in known_consumers:  # before Kafka is asked anything about it
            return unknown_consumer(req, consumer)
        what = str(form.get("action") or "")
        reason = str(form.get("reason") or "").strip()
        if what not in ("redrive", "redrive-after-deploy", "discard"):
            return render(req, "Dead-letter groups", "<p class=bad>action: one of redrive, "
                          "redrive-after-deploy, discard</p>", 400, active="/deadletters")
        if not reason:
            return render(req, "Dead-letter groups", "<p class=bad>reason: required</p>", 400,
                          active="/deadletters")
        try:
            found = [g for g in _groups_of(consumer, p) if g.fingerprint == fingerprint]
            if not found:
                return render(req, "Dead-letter groups", f"<p class=bad>group: no open failure group "
                              f"{esc(fingerprint)} of {esc(consumer)}</p>", 400, active="/deadletters")
            g = found[0]
            records = [e.record for e in g.entries]
            if what == "discard":
                done = discard_dead_letters(sources.kafka, consumer, records, actor=_actor(p), reason=reason)
            elif what == "redrive-after-deploy":  # nothing now: the consumer's service acts on the deploy
                done = request_redrive_after_deploy(sources.kafka, g, actor=_actor(p), reason=reason,
                                                    whole_group=_sees_all(p))
            else:
                if not g.retryable and form.get("confirm") != "yes":
                    return render(req, "Confirm re-drive", '<p class=bad id="confirm-needed">confirm: '
                                  f"{esc(retry_warning(g.entries))}</p>"
                                  + _group_form(g, _csrf_of(req), confirm=True, reason=reason),
                                  409, active="/deadletters")
                done = redrive_dead_letters(sources.kafka, consumer, records, actor=_actor(p), reason=reason)
        except CasestreamError as e:
            return render(req, "Dead-letter groups", f"<p class=bad>{esc(e)}</p><p><a href=\"/deadletters/groups?"
                          f"{urlencode({'consumer': consumer})}\" id=\"back\">Back to the groups</a></p>", 400,
                          active="/deadletters")
        finally:
            dead_letter_reads.clear()
        return RedirectResponse("/deadletters/groups?" + urlencode({"consumer": consumer, "done": done.detail}), 303)

    # -- flow -------------------------------------------------------------------------
    def flow(request: Request, p: Principal) -> Response:
        fragment = _flow_fragment()
        if request.query_params.get("fragment"):
            return HTMLResponse(fragment)
        return render(request, "Flow", f'<div id="flow">{fragment}</div>', active="/flow", script=FLOW_SCRIPT_PATH)

    def _flow_fragment() -> str:
        """What is behind or failing first (outbox pending past FLOW_BEHIND_S or failed, a
        service whose metrics do not answer, a group with lag, a running or failed replay),
        everything else folded in ``<details>``."""
        hot_svc, cold_svc = [], []
        with httpx.Client(timeout=timeout) as client:
            for name, base in sources.services.items():
                try:
                    r = client.get(base.rstrip("/") + "/metrics")
                    text = r.text if r.status_code == 200 else None
                except httpx.HTTPError:
                    text = None
                samples = parse_prometheus(text) if text is not None else None
                f = outbox_flow(text) if text is not None else None
                shards = _sum(samples, "relay_shards_held")
                errors = _sum(samples, "relay_delivery_errors_total")
                relay = ", ".join(
                    ([f"{fmt(shards)} shard(s) held"] if shards is not None else [])
                    + ([f'<span class="bad">{fmt(errors)} delivery error(s)</span>'] if errors else [])) or "-"
                row = (esc(name), "<span class=bad>down</span>" if f is None else "up",
                       fmt(f.pending if f else None), fmt(f.oldest_pending_s if f else None, 1),
                       fmt(f.failed if f else None), relay)
                # delivery errors are a counter since the process started: shown, not "behind"
                behind = f is None or bool(f.failed) or (f.oldest_pending_s or 0) >= FLOW_BEHIND_S
                (hot_svc if behind else cold_svc).append(row)
        svc_heads = ("service", "metrics", "outbox pending", "oldest pending s", "failed", "relay")
        hot_lag, cold_lag, groups_hot, groups_cold = [], [], [], []
        for c in sources.consumers:
            try:
                parts = group_lag(sources.kafka, c, _topics_of(c))
            except Exception as e:  # noqa: BLE001 - shown in the row
                groups_hot.append((esc(c), "-", "-", "-", f"<span class=bad>{esc(e)}</span>"))
                continue
            total = sum(pl.lag for pl in parts)
            never = sum(pl.committed is None for pl in parts)
            row = (esc(c), f'<span class="num lag" data-group="{esc(c)}">{total}</span>',
                   str(sum(pl.lag > 0 for pl in parts)), str(len(parts)),
                   f"<span class=warn>{never} partition(s) never committed</span>" if never else "")
            (groups_hot if total else groups_cold).append(row)
            for pl in parts:
                (hot_lag if pl.lag else cold_lag).append(
                    (esc(c), esc(pl.topic), esc(pl.partition), fmt(pl.committed), fmt(pl.high),
                     f'<span class="num">{pl.lag}</span>'))
        total_lag = sum(int(r[1].split(">")[1].split("<")[0]) for r in groups_hot + groups_cold
                        if 'class="num lag"' in r[1])
        group_heads = ("group", "lag", "partitions behind", "partitions", "note")
        part_heads = ("group", "topic", "partition", "committed", "high watermark", "lag")
        now = datetime.now(timezone.utc)
        view = sources.replay_runs() if sources.replay_runs is not None else None
        runs_hot = [r for r in view.runs if r.state in ("running", "failed")] if view else []
        runs_cold = [r for r in view.runs if r.state not in ("running", "failed")] if view else []

        out = "<h2>Behind or failing</h2>"
        if not (hot_svc or groups_hot or runs_hot or (view and view.errors)):
            out += '<p class="ok" id="all-clear">Nothing behind or failing.</p>'
        if hot_svc:
            out += "<h3>Outbox and relay</h3>" + table(svc_heads, hot_svc, id_="outbox-behind")
        out += (f'<h3>Consumer lag <span id="total-lag" class="num">(total {total_lag})</span></h3>'
                + (table(group_heads, groups_hot, id_="lag-behind") + table(part_heads, hot_lag, id_="lag")
                   if groups_hot else '<p class="ok" id="no-lag">every group is caught up</p>'))
        out += "<h3>Replay runs</h3>"
        if view is None:
            out += "<p class=muted>No projection database configured (CASESTREAM_CONSOLE_REPLAY_DATABASES).</p>"
        elif runs_hot or view.errors:
            out += replay_runs_table(replace(view, runs=runs_hot), now)
        else:
            out += '<p class="muted" id="no-replay-running">no replay running or failed</p>'
        folded = (f"Everything else: {len(cold_svc)} service(s) caught up, {len(groups_cold)} group(s) "
                  f"at lag 0 ({len(cold_lag)} partitions), {len(runs_cold)} finished replay run(s)")
        out += (f'<details id="folded"><summary>{esc(folded)}</summary>'
                + (table(svc_heads, cold_svc, id_="outbox") if cold_svc else "")
                + (table(group_heads, groups_cold, id_="lag-caught-up") if groups_cold else "")
                + (table(part_heads, cold_lag, id_="lag-zero") if cold_lag else "")
                + (replay_runs_table(ReplayRuns(runs=runs_cold), now, id_="replays-done") if runs_cold else "")
                + "</details>")
        return out

    def _topics_of(consumer: str) -> list[str]:
        return [*sources.journey_topics, f"{consumer}.redrive"]

    def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def home(_request: Request) -> Response:
        return RedirectResponse("/journeys", 303)

    def stylesheet(_request: Request) -> Response:
        return Response(STYLE, media_type="text/css")

    def flow_script(_request: Request) -> Response:
        return Response(FLOW_REFRESH_JS, media_type="text/javascript")

    routes = [
        Route("/", home), Route("/healthz", healthz),
        Route(STYLE_PATH, stylesheet), Route(FLOW_SCRIPT_PATH, flow_script),
        Route("/login", login_form, methods=["GET"]), Route("/login", login, methods=["POST"]),
        Route("/logout", action(READ_ROLES, logout_done), methods=["POST"]),
        Route("/journeys", authed(READ_ROLES, journeys)),
        Route("/sagas", authed(READ_ROLES, sagas)),
        Route("/sagas/{saga_id}/resolve", action(ACT_ROLES, resolve), methods=["POST"]),
        Route("/deadletters", authed(READ_ROLES, deadletters)),
        Route("/deadletters/groups", authed(READ_ROLES, deadletter_groups)),
        Route("/deadletters/{consumer}/groups/{fingerprint}", action(ACT_ROLES, deadletter_group_action),
              methods=["POST"]),
        Route("/deadletters/{consumer}", action(ACT_ROLES, deadletter_action), methods=["POST"]),
        Route("/flow", authed(READ_ROLES, flow)),
        *catalog_routes(lambda fn: authed(READ_ROLES, fn), render),
    ]
    def body_check(scope: Any) -> Any:
        """The edge's body gate asks before reading a body: the sign-in form's is anonymous
        (the small anonymous budget), a signed-in caller's is read, anyone else gets the 401
        at once and the body is never read."""
        if scope["path"] == "/login":
            return False
        if caller_of(scope).principal is not None:
            return True
        return HTMLResponse(page("Not signed in", "<p class=bad>sign in to use the console</p>"), 401,
                            headers={"Connection": "close"})

    counters = EdgeCounters()
    policy = EdgePolicy(
        verifier=None, authenticate=body_check, max_in_flight=settings.max_in_flight,
        per_client=RateLimit(rate_per_s=settings.rate_client_per_s, burst=settings.rate_client_burst),
        deadline_s=settings.journey_timeout_s + settings.request_timeout_s,
        body=BodyLimits(max_bytes=settings.max_body_bytes, read_timeout_s=settings.body_timeout_s,
                        media_types=frozenset({FORM_TYPE})))
    middleware = [
        Middleware(SecurityHeadersMiddleware),
        # who calls, from the headers only (and cross-origin posts refused) before the edge,
        # whose body gate and rate limits then know the caller
        Middleware(ConsoleAuthMiddleware, verifier=verifier, sessions=sessions, cookie=cookie,
                   allowed_origins=settings.allowed_origins,
                   anonymous_paths=(STYLE_PATH, FLOW_SCRIPT_PATH, "/healthz")),
        *edge_middleware(policy, counters),
    ]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.counters = counters
    app.state.sessions = sessions
    return app


def _csrf_of(request: Request) -> str:
    session = caller_of(request.scope).session
    return session.csrf if session is not None else ""


def _sagas_in(r: httpx.Response | None) -> list[dict[str, Any]]:
    if r is None or r.status_code != 200:
        return []
    body = r.json()
    if isinstance(body, list):
        return body
    return list(body.get("sagas") or body.get("items") or [])


def _sum(samples: Any, name: str) -> float | None:
    """Sum of metric ``name`` in ``parse_prometheus`` samples (None: no sample or no samples)."""
    if samples is None:
        return None
    values = [v for (n, _), v in samples.items() if n == name]
    return sum(values) if values else None


def _seconds(instant: str | None) -> str | None:
    """An ISO-8601 instant without its fraction of a second (``...T20:19:54Z``)."""
    if not instant or "." not in instant:
        return instant
    head, _, tail = instant.partition(".")
    return head + ("Z" if tail.endswith("Z") else "")


def _shortened(text: str | None, limit: int) -> str | None:
    return text if text is None or len(text) <= limit else text[:limit - 1] + "…"


def _deadline_of(saga: dict[str, Any]) -> str | None:
    deadline = saga.get("deadline")
    return deadline.get("at") if isinstance(deadline, dict) else None


def _until(at: str | None, now: datetime) -> str:
    """``in 4m 05s`` / ``overdue 1h 02m`` from an ISO-8601 instant to ``now`` ("-": none or unreadable)."""
    if not at:
        return "-"
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    left = int((when - now).total_seconds())
    h, rest = divmod(abs(left), 3600)
    m, sec = divmod(rest, 60)
    text = f"{h}h {m:02d}m" if h else f"{m}m {sec:02d}s"
    return f"in {text}" if left >= 0 else f'<span class="bad">overdue {text}</span>'
