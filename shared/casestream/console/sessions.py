"""Server-side console sessions and their CSRF tokens.

A browser holds only a random session id (``secrets.token_urlsafe``, 256 bits) in an
HttpOnly, SameSite=Strict cookie; the bearer token it signed in with stays here, so a
stolen cookie is worth nothing once the session ends, and logging out ends it. Each
session carries a synchronizer CSRF token (OWASP CSRF Prevention Cheat Sheet) that every
state-changing form must send back. A *pre-session* (no principal) carries the token of
the sign-in form, which closes login CSRF: a page elsewhere cannot obtain it.

Sessions live in this process's memory (one console replica, or sticky routing): a
restart signs everybody out, which is the safe direction.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from casestream.auth import Principal

__all__ = ["Session", "SessionStore"]


@dataclass(frozen=True, slots=True)
class Session:
    """One session: ``sid`` (the cookie's value), ``csrf`` (the forms' token), ``expires``
    (``time.monotonic()`` seconds), and, once signed in, the ``principal`` and the bearer
    ``token`` used for calls to the services as the caller (None for a pre-session)."""

    sid: str
    csrf: str
    expires: float
    principal: Principal | None = None
    token: str | None = None

    def csrf_ok(self, sent: str | None) -> bool:
        """Whether ``sent`` is this session's CSRF token (constant-time comparison)."""
        return bool(sent) and hmac.compare_digest(self.csrf.encode(), str(sent).encode())


class SessionStore:
    """At most ``max_sessions`` signed-in sessions and as many pre-sessions, each kept apart
    (the oldest of its kind dropped first: anyone may open the sign-in form, so a flood of
    pre-sessions must not push out signed-in ones), each valid for ``ttl_s`` seconds from
    its creation, never past its token's ``exp``.

    Args:
        ttl_s: lifetime of a signed-in session, seconds (> 0).
        login_ttl_s: lifetime of a pre-session (the sign-in form), seconds (> 0).
        max_sessions: sessions kept of each kind (>= 1).
        clock: monotonic seconds (tests).
    """

    def __init__(self, *, ttl_s: float, login_ttl_s: float = 600.0, max_sessions: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s <= 0 or login_ttl_s <= 0 or max_sessions < 1:
            raise ValueError("session lifetimes must be > 0 and max_sessions >= 1")
        self._ttl, self._login_ttl, self._max = ttl_s, login_ttl_s, max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._pre: OrderedDict[str, Session] = OrderedDict()

    def _add(self, session: Session) -> Session:
        kept = self._sessions if session.principal is not None else self._pre
        with self._lock:
            kept[session.sid] = session
            while len(kept) > self._max:
                kept.popitem(last=False)
        return session

    def pre_session(self) -> Session:
        """A new pre-session for the sign-in form."""
        return self._add(Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32),
                                 self._clock() + self._login_ttl))

    def sign_in(self, principal: Principal, token: str, *, token_expires_in_s: float | None = None,
                replaces: str | None = None) -> Session:
        """A new signed-in session (a new id: no fixation), ending ``replaces`` (the pre-session).

        ``token_expires_in_s``: seconds until the token's ``exp``; the session ends no later."""
        if replaces:
            self.end(replaces)
        ttl = self._ttl if token_expires_in_s is None else max(0.0, min(self._ttl, token_expires_in_s))
        return self._add(Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32),
                                 self._clock() + ttl, principal, token))

    def get(self, sid: str | None) -> Session | None:
        """The live session ``sid`` (an expired one is removed and None returned)."""
        if not sid:
            return None
        with self._lock:
            kept = self._sessions if sid in self._sessions else self._pre
            session = kept.get(sid)
            if session is not None and session.expires <= self._clock():
                del kept[sid]
                return None
            return session

    def end(self, sid: str | None) -> None:
        """End session ``sid`` (nothing if unknown)."""
        if sid:
            with self._lock:
                self._sessions.pop(sid, None)
                self._pre.pop(sid, None)

    def __len__(self) -> int:
        """Signed-in sessions kept."""
        with self._lock:
            return len(self._sessions)
