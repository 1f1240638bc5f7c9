"""HTML of the console pages: small functions over ``html.escape``, no template engine."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from html import escape
from datetime import datetime
from typing import Any

from casestream.operations import ReplayRuns
from casestream.replay.progress import fmt_eta

__all__ = ["page", "table", "esc", "fmt", "replay_runs_table", "csrf_field", "STYLE", "STYLE_PATH"]

NAV = (("/journeys", "Journeys"), ("/sagas", "Sagas"), ("/deadletters", "Dead letters"), ("/flow", "Flow"),
       ("/catalog", "Catalog"))

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6rem 1.2rem;display:flex;gap:1.5rem;align-items:center}
header a{color:#cfd8ea;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .who{margin-left:auto;font-size:.85rem;color:#cfd8ea}
main{padding:1rem 1.2rem}h1{font-size:1.3rem}h2{font-size:1.05rem;margin-top:1.4rem}
table{border-collapse:collapse;background:#fff;margin:.4rem 0;font-size:.85rem}
th,td{border:1px solid #d8dce4;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#eceff4}.num{text-align:right}.muted{color:#6b7385}
.ok{color:#1a7f37}.bad{color:#b42318}.warn{color:#9a6700}
.note{background:#fff8c5;border:1px solid #e3c767;padding:.4rem .6rem;margin:.5rem 0}
.done{background:#dafbe1;border:1px solid #7bc48c;padding:.4rem .6rem;margin:.5rem 0}
pre{background:#fff;border:1px solid #d8dce4;padding:.4rem;max-width:60rem;overflow:auto;font-size:.8rem}
input[type=text],textarea{font:inherit;padding:.25rem;min-width:22rem}
button{font:inherit;padding:.25rem .8rem}.arrow{color:#5a6acf;font-weight:600}
form.inline{display:inline}
.pill{display:inline-block;background:#fff;border:1px solid #d8dce4;border-radius:1rem;padding:.2rem .7rem;margin-right:.4rem}
details{margin:.6rem 0}summary{cursor:pointer;font-weight:600}
"""
STYLE_PATH = "/static/console.css"


def esc(value: Any) -> str:
    """Escaped text of ``value`` (``-`` for None)."""
    return "-" if value is None else escape(str(value))


def fmt(value: float | int | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, id_: str = "") -> str:
    """A table; cells are HTML already (escape with :func:`esc`).

    Raises:
        ValueError: a blank header (every column is named: a screen reader reads it per cell).
    """
    if not all(h.strip() for h in headers):
        raise ValueError(f"table {id_ or '-'}: every column needs a header, got {list(headers)}")
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    ident = f' id="{escape(id_)}"' if id_ else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, body: str, *, active: str = "", who: str = "", script: str = "", csrf: str = "") -> str:
    """A whole page. ``script``: path of a script of the console (served from the console's
    origin: the Content-Security-Policy allows no inline script or style); ``csrf``: the
    session's token, put in the log-out form."""
    nav = "".join(f'<a href="{href}" class="{"on" if href == active else ""}">{escape(text)}</a>'
                  for href, text in NAV)
    logout = ('<form method="post" action="/logout" class="inline">'
              f'{csrf_field(csrf)}<button type="submit" id="logout">Log out</button></form>') if who else ""
    js = f'<script src="{escape(script)}"></script>' if script else ""
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)} · casestream"
            f'</title><link rel="stylesheet" href="{STYLE_PATH}"></head><body><header><strong>casestream</strong>{nav}'
            f'<span class="who">{escape(who)} {logout}</span></header><main><h1>{escape(title)}</h1>'
            f"{body}</main>{js}</body></html>")


def csrf_field(token: str) -> str:
    """The hidden ``csrf`` input every state-changing form carries."""
    return f'<input type="hidden" name="csrf" value="{escape(token)}">' if token else ""


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, default=str, sort_keys=True)


def replay_runs_table(view: ReplayRuns, now: datetime, *, id_: str = "replays") -> str:
    """The replay runs table: state, progress (%, events read of read + remaining), rate
    (events/s since start), ETA of a running run at ``now``; then the unreadable databases."""
    rows = []
    for r in view.runs:
        frac = r.fraction
        state = {"finished": "ok", "failed": "bad"}.get(r.state, "warn")
        rows.append((esc(r.projection), esc(r.mode), f'<span class="{state} state">{esc(r.state)}</span>',
                     esc(r.started_at.isoformat(timespec="seconds")),
                     f'<span class="num progress">{"-" if frac is None else f"{frac * 100:.1f}%"}</span>'
                     f" ({r.events_read} of {r.events_read + r.events_remaining})",
                     fmt(r.events_applied), fmt(r.rate), 
                     f'<span class="eta">{fmt_eta(r.eta_s(now)) if r.state == "running" else "-"}</span>',
                     esc(r.finished_at.isoformat(timespec="seconds") if r.finished_at else None),
                     f"<span class=bad>{esc(r.error)}</span>" if r.error else "-"))
    out = table(("projection", "mode", "state", "started", "progress (events read)", "applied",
                 "events/s", "ETA", "finished", "error"), rows, id_=id_)
    if not rows:
        out += "<p class=muted>No replay run recorded.</p>"
    out += "".join(f"<p class=bad>{esc(e)}</p>" for e in view.errors)
    return out
