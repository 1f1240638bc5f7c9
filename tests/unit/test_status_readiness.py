"""``casestream status``'s READY word: ``/readyz`` (can it take commands) first, then the
consumption signal ``/readyz/consumers``, each naming its failing checks."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from casestream.cli.status import _readiness


def _client(answers: dict[str, tuple[int, Any]]) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path not in answers:
            raise httpx.ConnectError("refused", request=request)
        code, body = answers[request.url.path]
        return httpx.Response(code, json=body)

    return httpx.Client(transport=httpx.MockTransport(handle))


READY = (200, {"status": "ready"})


@pytest.mark.parametrize(("answers", "word"), [
    ({"/readyz": READY, "/readyz/consumers": READY}, "ready"),
    ({"/readyz": READY, "/readyz/consumers": (503, {"failing": {"kafka": "x", "case.dashboard": "y"}})},
     "consumers not ready: case.dashboard,kafka"),
    ({"/readyz": (503, {"failing": {"outbox": "read-only"}}), "/readyz/consumers": READY},
     "not ready: outbox"),
    ({"/readyz": READY, "/readyz/consumers": (404, {"detail": "Not Found"})}, "ready"),
    ({}, "down"),
], ids=["ready", "consumers", "commands", "older-service", "down"])
def test_the_ready_word_names_which_signal_fails(answers: dict[str, tuple[int, Any]], word: str) -> None:
    with _client(answers) as client:
        assert _readiness(client, "http://svc") == word
