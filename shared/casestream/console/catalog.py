"""The console's event catalog pages, rendered from the AsyncAPI 3.0 document of the installed
schemas folders and services (:func:`casestream.service.installed_asyncapi`):

    GET /catalog                       channels (topic, producer, messages, consumer groups),
                                       event types (versions, upcasters), services
    GET /catalog/events/{event_type}   one event type: every version's Avro schema (envelope +
                                       payload, as registered), its upcaster steps, its topic,
                                       who publishes and who reads it
    GET /catalog/asyncapi.json         the document itself (what ``casestream catalog asyncapi`` writes)

The document is built once, on the first request (the installed packages change only with
the process); nothing is asked of Kafka or the registry.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from casestream.auth import Principal
from casestream.console.pages import esc, table
from casestream.errors import CasestreamError

__all__ = ["CATALOG_PATH", "catalog_routes"]

CATALOG_PATH = "/catalog"

Page = Callable[[Request, Principal], Response]
Render = Callable[..., HTMLResponse]


class _Document:
    """The document, loaded once (a failed load is retried on the next request)."""

    def __init__(self, load: Callable[[], dict[str, Any]]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._doc: dict[str, Any] | None = None

    def get(self) -> dict[str, Any]:
        with self._lock:
            if self._doc is None:
                self._doc = self._load()
            return self._doc


def _installed() -> dict[str, Any]:
    from casestream.service import installed_asyncapi

    return installed_asyncapi()  # type: ignore[no-any-return]


def _event_link(event_type: str) -> str:
    return f'<a href="{CATALOG_PATH}/events/{esc(event_type)}">{esc(event_type)}</a>'


def _event_types(doc: dict[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """event type -> [(message id, message)], versions ascending (document order)."""
    out: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for mid, msg in doc["components"]["messages"].items():
        out.setdefault(msg["name"], []).append((mid, msg))
    return out


def _topic_of(doc: dict[str, Any]) -> dict[str, str]:
    """message id -> topic."""
    return {mid: topic for topic, ch in doc["channels"].items() for mid in ch["messages"]}


def _ops(doc: dict[str, Any], topic: str, action: str) -> list[dict[str, Any]]:
    return [op for op in doc["operations"].values()
            if op["action"] == action and op["channel"]["$ref"] == f"#/channels/{topic}"]


def _steps(msg: dict[str, Any]) -> str:
    out = []
    for s in msg.get("x-casestream-upcasters", []):
        if s["kind"] == "payload":
            out.append(f"v{s['from']} → v{s['to']} (payload)")
        else:
            out.append(f"v{s['from']} → {', '.join(s['produces'])} (event)")
    return esc("; ".join(out)) if out else "-"


def overview(doc: dict[str, Any]) -> str:
    """The catalog page's body: channels, event types, services."""
    types = _event_types(doc)
    channel_rows = []
    for topic, ch in doc["channels"].items():
        names = list(dict.fromkeys(doc["components"]["messages"][m]["name"] for m in ch["messages"]))
        producers = [op["x-casestream-service"] for op in _ops(doc, topic, "send")]
        groups = [f'{esc(op["x-casestream-consumer"])} <span class=muted>({esc(op["x-casestream-service"])})</span>'
                  for op in _ops(doc, topic, "receive")]
        channel_rows.append((f"<code>{esc(topic)}</code>", esc(", ".join(producers)) if producers else
                             "<span class=muted>no installed service</span>",
                             ", ".join(_event_link(n) for n in names) or "-", "<br>".join(groups) or "-"))
    event_rows = []
    topic_of = _topic_of(doc)
    for name, versions in types.items():
        newest = versions[-1][1]
        upcasts = "<br>".join(_steps(m) for _, m in versions if m.get("x-casestream-upcasters")) or "-"
        event_rows.append((_event_link(name), esc(newest["x-casestream-subject"]),
                           f"<code>{esc(topic_of.get(versions[-1][0]))}</code>",
                           esc(", ".join(f"v{m['x-casestream-version']}" for _, m in versions)),
                           esc(newest["x-casestream-compatibility"]), upcasts))
    service_rows = []
    for name, svc in doc.get("x-casestream-services", {}).items():
        consumers = "<br>".join(
            f"{esc(c)}: {esc(', '.join(t))}" if t
            else f"{esc(c)}: <span class=warn>topics not declared (ServiceSpec.subscriptions)</span>"
            for c, t in svc["consumers"].items()) or "-"
        service_rows.append((esc(name), esc(svc["description"]), esc(", ".join(svc["produces"])) or "-", consumers))
    return (f'<p class=muted>{len(doc["channels"])} channels, {len(types)} event types, '
            f'{len(doc["components"]["messages"])} schema versions, '
            f'{len(doc.get("x-casestream-services", {}))} services. '
            f'<a href="{CATALOG_PATH}/asyncapi.json">AsyncAPI {esc(doc["asyncapi"])} document</a></p>'
            "<h2>Channels</h2>" + table(("topic", "produced by", "event types", "consumer groups"),
                                        channel_rows, id_="channels")
            + "<h2>Event types</h2>" + table(("event type", "subject", "topic", "versions", "compatibility",
                                              "upcasters"), event_rows, id_="events")
            + "<h2>Services</h2>" + table(("service", "description", "produces", "consumer groups: topics"),
                                          service_rows, id_="services"))


def event_page(doc: dict[str, Any], event_type: str) -> str | None:
    """One event type's body (None: not in the catalog)."""
    versions = _event_types(doc).get(event_type)
    if not versions:
        return None
    topic = _topic_of(doc).get(versions[-1][0], "")
    producers = [op["x-casestream-service"] for op in _ops(doc, topic, "send")]
    readers = [f'{op["x-casestream-consumer"]} ({op["x-casestream-service"]})' for op in _ops(doc, topic, "receive")]
    newest = versions[-1][1]
    out = table(("subject", "topic", "produced by", "read by (consumer groups on the topic)", "compatibility"), [(
        esc(newest["x-casestream-subject"]), f"<code>{esc(topic)}</code>", esc(", ".join(producers)) or "-",
        esc(", ".join(readers)) or "-", esc(newest["x-casestream-compatibility"]))], id_="event")
    for mid, msg in reversed(versions):
        v = msg["x-casestream-version"]
        mark = " <span class=ok>newest</span>" if msg["x-casestream-newest"] else ""
        out += (f'<h2 id="v{v}">Version {v}{mark}</h2><p>{esc(msg["summary"])}</p>'
                f'<p class=muted>message <code>{esc(mid)}</code>, file <code>{esc(msg["x-casestream-schema-file"])}'
                f'</code>, upcasters: {_steps(msg)}</p>'
                # key order as registered (envelope fields, then payload), not sorted
                f'<pre class="schema">{esc(json.dumps(msg["payload"]["schema"], indent=2, ensure_ascii=False))}</pre>')
    return out


def catalog_routes(wrap: Callable[[Page], Callable[[Request], Any]], render: Render, *,
                   load: Callable[[], dict[str, Any]] | None = None) -> list[Route]:
    """The catalog's routes: ``wrap`` guards a page (sign-in and roles, the console's
    ``authed``), ``render(request, title, body, status, active=...)`` makes the page,
    ``load`` builds the document (default: :func:`casestream.service.installed_asyncapi`)."""
    document = _Document(load or _installed)

    def unavailable(request: Request, e: CasestreamError) -> Response:
        return render(request, "Event catalog", f"<p class=bad id=catalog-error>{esc(e)}</p>", 500,
                      active=CATALOG_PATH)

    def index(request: Request, _p: Principal) -> Response:
        try:
            doc = document.get()
        except CasestreamError as e:
            return unavailable(request, e)
        return render(request, "Event catalog", overview(doc), active=CATALOG_PATH)

    def event(request: Request, _p: Principal) -> Response:
        name = request.path_params["event_type"]
        try:
            doc = document.get()
        except CasestreamError as e:
            return unavailable(request, e)
        body = event_page(doc, name)
        if body is None:
            return render(request, "Unknown event type",
                          f"<p class=bad>{esc(name)} is not in the installed catalog</p>", 404, active=CATALOG_PATH)
        return render(request, f"Event {name}", body, active=CATALOG_PATH)

    def asyncapi(request: Request, _p: Principal) -> Response:
        try:
            return JSONResponse(document.get())
        except CasestreamError as e:
            return unavailable(request, e)

    return [Route(CATALOG_PATH, wrap(index)), Route(f"{CATALOG_PATH}/asyncapi.json", wrap(asyncapi)),
            Route(CATALOG_PATH + "/events/{event_type}", wrap(event))]
