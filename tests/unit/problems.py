"""Helpers shared by the HTTP unit tests (not a test module): the problem+json assertion,
an edge policy with the development token verifier, and bearer headers of test users."""

from __future__ import annotations

from typing import Any

from casestream.auth.tokens import AuthSettings, TokenVerifier, bearer_headers
from casestream.http import EdgePolicy

EDGE = EdgePolicy(verifier=TokenVerifier(AuthSettings()))
OFFICER_A = bearer_headers("tenant-a", subject="officer-a")
SUPERVISOR_A = bearer_headers("tenant-a", ("supervisor",), subject="sup-a")
OFFICER_B = bearer_headers("tenant-b", subject="officer-b")
NO_ROLE_A = bearer_headers("tenant-a", (), subject="nobody")


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """Assert ``response`` is an RFC 9457 ``application/problem+json`` answer with ``status``
    and the casestream ``code``; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["status"] == status
    return body
