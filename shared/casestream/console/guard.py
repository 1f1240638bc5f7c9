"""The console's own layers around its routes (pure ASGI), used with the shared edge
(:mod:`casestream.http`: error boundary, body gate, shedding, rate limits):

- :class:`SecurityHeadersMiddleware` (outermost): every answer carries a
  Content-Security-Policy (``default-src 'self'; frame-ancestors 'none'``, CSP Level 3),
  ``X-Frame-Options: DENY`` (RFC 7034), ``X-Content-Type-Options: nosniff``,
  ``Cache-Control: no-store`` (RFC 9111 §5.2.2.5) and ``Referrer-Policy: same-origin``;
- :class:`ConsoleAuthMiddleware` (after the body gate and shedding): refuses a
  state-changing request a browser sent from another origin (``Origin``, else
  ``Sec-Fetch-Site``: Fetch Metadata), then puts who is calling — from the session cookie
  or an ``Authorization: Bearer`` header — in ``scope["state"]`` for the routes and the
  rate limiter. It refuses nothing else: a page decides between sign-in and 401.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from html import escape
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import cookie_parser
from starlette.responses import HTMLResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from casestream.auth import InvalidToken, Principal, TokenVerifier
from casestream.console.sessions import Session, SessionStore

__all__ = ["SecurityHeadersMiddleware", "ConsoleAuthMiddleware", "Caller", "CALLER", "SECURITY_HEADERS", "caller_of"]

CALLER = "console_caller"
"""Key of the :class:`Caller` in ``scope["state"]``."""

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'; "
                               "base-uri 'none'; object-src 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    # not no-referrer: Chromium then sends "Origin: null" with the console's own forms
    "Referrer-Policy": "same-origin",
}

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class SecurityHeadersMiddleware:
    """Add :data:`SECURITY_HEADERS` to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: ``principal`` and ``token`` (None: not signed in), the ``session``
    (None for an ``Authorization: Bearer`` caller, which needs no CSRF token: a browser
    never adds that header by itself) and ``error`` (why a token sent was refused)."""

    principal: Principal | None = None
    token: str | None = None
    session: Session | None = None
    error: str = ""


def caller_of(scope: Scope) -> Caller:
    """The :class:`Caller` of a request (not signed in when the middleware did not run)."""
    found = scope.get("state", {}).get(CALLER)
    return found if isinstance(found, Caller) else Caller()


class ConsoleAuthMiddleware:
    """See module docstring.

    Args:
        app: the wrapped ASGI app.
        verifier: checks bearer tokens.
        sessions: the console sessions.
        cookie: name of the session cookie.
        allowed_origins: origins accepted besides the request's own host.
        anonymous_paths: served to anyone and nobody is identified on them (the stylesheet,
            scripts, probes: a page's assets do not count against its caller's rate limit).
    """

    def __init__(self, app: ASGIApp, *, verifier: TokenVerifier, sessions: SessionStore, cookie: str,
                 allowed_origins: Collection[str] = (), anonymous_paths: Collection[str] = ()) -> None:
        self.app = app
        self._anonymous = frozenset(anonymous_paths)
        self._verifier = verifier
        self._sessions = sessions
        self._cookie = cookie
        self._allowed = frozenset(o.rstrip("/").lower() for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if scope["method"] not in SAFE_METHODS:
            refused = self.cross_origin(headers)
            if refused:
                await HTMLResponse(f"<!doctype html><title>Refused</title><p>{escape(refused)}</p>",
                                   403)(scope, receive, send)
                return
        scope.setdefault("state", {})[CALLER] = (Caller() if scope["path"] in self._anonymous
                                                 else self.caller(headers, scope))
        principal = scope["state"][CALLER].principal
        if principal is not None:
            scope["state"]["principal"] = principal  # the shared rate limiter's key
        await self.app(scope, receive, send)

    def cross_origin(self, headers: Headers) -> str:
        """Why a state-changing request is refused as cross-origin ("" if it is not)."""
        origin = headers.get("origin")
        if origin is not None:
            host = headers.get("host", "").lower()
            if origin.rstrip("/").lower() in self._allowed or (
                    origin != "null" and urlsplit(origin).netloc.lower() == host and host):
                return ""
            return f"Origin {origin} is not this console: a form may be sent from its own pages only"
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"Sec-Fetch-Site {site}: a form may be sent from this console's own pages only"
        return ""

    def caller(self, headers: Headers, scope: Scope) -> Caller:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            token = auth[7:].strip()
            try:
                return Caller(self._verifier.verify(token), token)
            except InvalidToken as e:
                return Caller(error=str(e))
        sid = _cookie(headers, self._cookie)
        session = self._sessions.get(sid)
        if session is None or session.principal is None:
            return Caller(error="your console session ended; sign in again" if sid else "")
        return Caller(session.principal, session.token, session)


def _cookie(headers: Headers, name: str) -> str | None:
    return cookie_parser(headers.get("cookie", "")).get(name)
