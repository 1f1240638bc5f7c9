"""What the console reads: the services, consumers and topics it is configured for.

Defaults come from discovery (``casestream.service.discovery``): the installed services on
``127.0.0.1:<port>``, their consumers, and every topic of the installed catalogs. Each can
be replaced by a :class:`ConsoleSettings` field, so nothing here names a service.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

from casestream.console.settings import ConsoleSettings
from casestream.operations import ReplayRuns, ReplayRunsCache, load_replay_runs

log = logging.getLogger(__name__)

__all__ = ["ConsoleSources"]


SAGA_RESOLVE_PATH = "/sagas/{saga_id}/resolve"


@dataclass
class ConsoleSources:
    """Resolved configuration: ``services`` name -> base URL, ``consumers``, ``journey_topics``,
    ``kafka`` (client config), ``codec`` (an envelope codec or decoder), ``sagas_url``,
    ``replay_runs`` (reads the recent replay runs; None: no projection database known)."""

    settings: ConsoleSettings
    kafka: dict[str, Any]
    codec: Any
    services: dict[str, str]
    consumers: list[str]
    journey_topics: list[str]
    sagas_url: str | None = None
    replay_runs: Callable[[], ReplayRuns] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _sagas_probed: bool = False

    @classmethod
    def discover(cls, settings: ConsoleSettings, *, kafka: dict[str, Any], codec: Any,
                 specs: dict[str, Any] | None = None) -> ConsoleSources:
        """Fill what ``settings`` leaves empty from the installed services (``specs``:
        name -> ServiceSpec, default discovered) and the codec's catalog."""
        if specs is None:
            from casestream.service.discovery import services as discovered

            specs = discovered()
        services = dict(settings.services) or {n: f"http://127.0.0.1:{s.port()}" for n, s in specs.items()}
        consumers = list(settings.consumers) or list(dict.fromkeys(
            c for s in specs.values() for c in s.consumers))
        topics = list(settings.journey_topics)
        if not topics:
            catalog = getattr(codec, "catalog", None)
            if catalog is not None:
                topics = sorted({catalog.subject_for(t).topic for t in catalog.event_types})
        dsns = list(settings.replay_databases) or _projection_databases()
        replay_runs = (ReplayRunsCache(partial(load_replay_runs, dsns, settings.replay_runs_shown,
                                               timeout_s=settings.request_timeout_s),
                                       idle_s=settings.replay_runs_idle_s) if dsns else None)
        return cls(settings=settings, kafka=kafka, codec=codec, services=services,
                   consumers=consumers, journey_topics=topics,
                   sagas_url=settings.sagas_url.rstrip("/") or None,
                   _sagas_probed=bool(settings.sagas_url), replay_runs=replay_runs)

    def saga_service(self) -> str | None:
        """Base URL of the service answering the saga routes, probed once from the
        services' public ``/openapi.json`` (None: no configured service has them)."""
        with self._lock:
            if self._sagas_probed:
                return self.sagas_url
        found = None
        with httpx.Client(timeout=self.settings.request_timeout_s) as client:
            for base in self.services.values():
                try:
                    paths = client.get(base.rstrip("/") + "/openapi.json").json().get("paths", {})
                except (httpx.HTTPError, ValueError, AttributeError):
                    continue
                if SAGA_RESOLVE_PATH in paths:
                    found = base.rstrip("/")
                    break
        with self._lock:
            # a service not up yet is probed again next time
            self.sagas_url, self._sagas_probed = found, found is not None
        return found


def _projection_databases() -> list[str]:
    """Database URLs of the installed projections (``casestream.replay.known_projections``);
    a projection whose settings do not resolve is left out (logged)."""
    from casestream.replay import known_projections, load_projection

    out = []
    for name in known_projections():
        try:
            out.append(load_projection(name).dsn())
        except Exception as e:  # noqa: BLE001 - one bad projection must not hide the others
            log.warning("console: replay runs of projection %s not shown: %s", name, e)
    return list(dict.fromkeys(out))
