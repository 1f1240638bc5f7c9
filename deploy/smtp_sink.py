"""SMTP sink for local development and tests: accepts every message and stores it as a file.

Run:  python deploy/smtp_sink.py [--host 127.0.0.1] [--port 12525] [--maildir .local/smtp/mail]
      (deploy/infra.sh starts it; docker-compose.yml runs it with --host 0.0.0.0)

Storage: one RFC 5322 file per accepted message, ``<maildir>/<ns-timestamp>-<uuid>.eml``,
written to ``<maildir>/../tmp`` first, fsynced, then renamed into the maildir, so a reader
listing ``*.eml`` never sees a partial message. File names sort by arrival. Two headers are
prepended, as a delivering MTA does: ``Return-Path: <envelope sender>`` and
``X-Original-To: <envelope recipients, comma separated>``; the received bytes follow as sent.

Failure injection (for tests of the notification service): a recipient matching the
``--reject-rcpt`` regular expression (default: any address in the reserved ``.invalid``
top-level domain, RFC 2606, e.g. ``someone@mail.invalid``) is refused with
``550 5.1.1 mailbox unavailable``; an empty pattern disables it.

Exit: SIGTERM/SIGINT stop it cleanly (status 0). Errors at start (port in use, maildir not
writable) are one line on stderr and status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path

from aiosmtpd.smtp import SMTP, Envelope, Session

DEFAULT_REJECT = r"@([A-Za-z0-9-]+\.)*invalid\.?$"


class MaildirHandler:
    """aiosmtpd handler: RCPT filtering and atomic one-file-per-message storage."""

    def __init__(self, maildir: Path, reject_rcpt: str) -> None:
        self.maildir = maildir
        self.tmpdir = maildir.parent / "tmp"
        self.reject = re.compile(reject_rcpt, re.IGNORECASE) if reject_rcpt else None
        self.maildir.mkdir(parents=True, exist_ok=True)
        self.tmpdir.mkdir(parents=True, exist_ok=True)

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope,  # noqa: N802
                          address: str, rcpt_options: list[str]) -> str:
        if self.reject is not None and self.reject.search(address):
            return "550 5.1.1 mailbox unavailable (rejected by the casestream SMTP sink)"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        content = envelope.original_content or b""
        prefix = (
            f"Return-Path: <{envelope.mail_from}>\r\n"
            f"X-Original-To: {', '.join(envelope.rcpt_tos)}\r\n"
        ).encode("utf-8", "replace")
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex}.eml"
        try:
            await asyncio.to_thread(self._store, name, prefix + content)
        except OSError as exc:
            print(f"smtp-sink: cannot store message: {exc}", file=sys.stderr, flush=True)
            return "451 4.3.0 cannot store the message, try again later"
        print(f"smtp-sink: stored {name} from <{envelope.mail_from}> to {envelope.rcpt_tos}", flush=True)
        return "250 2.0.0 OK stored"

    def _store(self, name: str, data: bytes) -> None:
        tmp = self.tmpdir / (name + ".part")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.maildir / name)


async def serve(host: str, port: int, handler: MaildirHandler) -> None:
    """Serve SMTP until SIGTERM/SIGINT."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(handler, hostname="casestream-smtp-sink", decode_data=False,
                     data_size_limit=10 * 1024 * 1024),
        host=host, port=port,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"smtp-sink: listening on {host}:{port}, storing into {handler.maildir}", flush=True)
    async with server:
        await stop.wait()
    print("smtp-sink: stopped", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default=os.environ.get("CASESTREAM_SMTP_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("CASESTREAM_SMTP_PORT", "12525")))
    p.add_argument("--maildir", type=Path,
                   default=Path(os.environ.get("CASESTREAM_SMTP_MAILDIR", ".local/smtp/mail")))
    p.add_argument("--reject-rcpt", default=DEFAULT_REJECT,
                   help="regex of recipient addresses refused with 550 (empty: accept all)")
    a = p.parse_args(argv)
    try:
        handler = MaildirHandler(a.maildir.resolve(), a.reject_rcpt)
        asyncio.run(serve(a.host, a.port, handler))
    except OSError as exc:
        print(f"smtp-sink: cannot start on {a.host}:{a.port}: {exc}", file=sys.stderr)
        return 1
    except re.error as exc:
        print(f"smtp-sink: bad --reject-rcpt pattern: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
