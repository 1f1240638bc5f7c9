"""Assertion helper shared by the HTTP unit tests (not a test module)."""

from __future__ import annotations

from typing import Any


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """Assert ``response`` is an RFC 9457 ``application/problem+json`` answer with ``status``
    and the casestream ``code``; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code and body["status"] == status
    return body
