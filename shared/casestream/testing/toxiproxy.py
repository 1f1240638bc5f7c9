"""Toxiproxy for fault tests: the server as a child process and a small client of its HTTP API.

Toxiproxy (``deploy/toxiproxy/tools.sh install`` builds ``toxiproxy-server`` into
``.local/toxiproxy/bin``) is a TCP proxy: each *proxy* listens on a port and forwards to an
upstream; *toxics* added to a proxy act on the ``upstream`` (client -> server) or
``downstream`` (server -> client) direction of every connection, live ones included:
``latency`` (ms, ``jitter`` ms), ``bandwidth`` (``rate`` KB/s), ``timeout`` (no data passes;
``timeout`` ms > 0 closes the connection after it, 0 holds it open: a silent peer; the data
is dropped and removing the toxic closes the connection),
``reset_peer`` (TCP RST after ``timeout`` ms), ``limit_data`` (closes the connection once
``bytes`` have passed since the toxic was added), ``slow_close``, ``slicer``. A disabled proxy
closes its connections and refuses new ones. API reference: the project's README
(``/proxies``, ``/proxies/{name}/toxics``, ``/reset``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from casestream.errors import CasestreamError

TOOLS = Path(__file__).resolve().parents[3] / "deploy" / "toxiproxy" / "tools.sh"


def via(url: str, port: int) -> str:
    """``url`` (``scheme://[user@]host:port/...``) with its host and port replaced by
    ``127.0.0.1:port``: the same endpoint reached through a proxy listening there."""
    parts = urlsplit(url)
    user, at, _ = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user}{at}127.0.0.1:{port}"))


def upstream(url: str) -> str:
    """``host:port`` of ``url``: a proxy's upstream."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}"


class ToxiproxyError(CasestreamError):
    """The server did not start, or its API refused a request (the answer's text attached)."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """One proxy: ``listen`` (``host:port`` clients connect to) forwarding to ``upstream``."""

    name: str
    listen: str
    upstream: str


class Toxiproxy:
    """Client of a Toxiproxy server's HTTP API at ``url`` (``http://127.0.0.1:8474``).

    Raises:
        ToxiproxyError: every method, when the API answers an error status.
    """

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        r = self._http.request(method, path, json=body)
        if r.status_code >= 300:
            raise ToxiproxyError(f"{method} {path}: {r.status_code} {r.text[:200]}")
        return r.json() if r.content else None

    def version(self) -> str:
        return self._http.get("/version").text.strip()

    def create(self, name: str, listen: str, upstream: str) -> Proxy:
        """Create (or replace) proxy ``name``."""
        if name in self._call("GET", "/proxies"):
            self._call("DELETE", f"/proxies/{name}")
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream,
                                        "enabled": True})
        return Proxy(name, listen, upstream)

    def enable(self, name: str, enabled: bool = True) -> None:
        """Enable or disable proxy ``name`` (disabled: its connections are closed, new ones
        refused)."""
        self._call("POST", f"/proxies/{name}", {"enabled": enabled})

    def add_toxic(self, proxy: str, kind: str, *, stream: str = "downstream",
                  toxicity: float = 1.0, name: str | None = None, **attributes: float) -> str:
        """Add a toxic of ``kind`` with ``attributes`` to ``stream`` of ``proxy`` (applied to a
        connection with probability ``toxicity``); returns its name."""
        name = name or f"{kind}_{stream}"
        self._call("POST", f"/proxies/{proxy}/toxics",
                   {"name": name, "type": kind, "stream": stream, "toxicity": toxicity,
                    "attributes": attributes})
        return name

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/proxies/{proxy}/toxics"))

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._call("POST", "/reset")

    def close(self) -> None:
        self._http.close()


class ToxiproxyServer:
    """``toxiproxy-server`` as a child process on ``127.0.0.1:port`` (its own process group),
    logging to ``log``.

    Raises:
        ToxiproxyError: ``start``: the binary is missing (run ``deploy/toxiproxy/tools.sh
            install``) or the API did not answer within ``timeout_s``.
    """

    def __init__(self, port: int, log: Path, binary: Path | None = None) -> None:
        self.port, self.log = port, log
        self.binary = binary or Path(subprocess.run(
            [str(TOOLS), "path"], capture_output=True, text=True, check=True).stdout.strip())
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 15.0) -> Toxiproxy:
        if not self.binary.is_file():
            raise ToxiproxyError(f"{self.binary} missing: run {TOOLS} install")
        # toxiproxy-server logs a taken API port and runs on without serving: the API that
        # answers would be another server's, with another run's proxies
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as e:
                raise ToxiproxyError(f"port {self.port} is taken ({e.strerror}): another"
                                     " toxiproxy-server or rig is running") from None
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:  # the child keeps its own copy
            self.proc = subprocess.Popen([str(self.binary), "-host", "127.0.0.1",
                                          "-port", str(self.port)],
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        client = Toxiproxy(self.url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ToxiproxyError(f"toxiproxy-server exited, see {self.log}")
            try:
                client.version()
                return client
            except httpx.HTTPError:
                time.sleep(0.2)
        raise ToxiproxyError(f"toxiproxy-server did not answer on {self.url} in {timeout_s:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
