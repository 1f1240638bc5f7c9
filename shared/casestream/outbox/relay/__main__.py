"""Run one outbox relay as a standalone process: ``python -m casestream.outbox.relay``.

Services normally run their relay as a worker thread (``casestream.service.process``); this entry
point serves operations (a relay without the service) and the SIGKILL take-over test.
SIGTERM/SIGINT stop it cleanly (flush, release leases).

Usage::

    python -m casestream.outbox.relay --dsn postgresql://postgres@127.0.0.1:15432/case \\
        --bootstrap 127.0.0.1:19092 --name case.relay [--lease-s 10] [--batch-size 1000] \\
        [--topic-prefix outbox.event.] [--retention-s 3600] [--max-open-batches 2] \\
        [--max-attempts 10] [-X linger.ms=5 -X message.max.bytes=2000000 ...]

Record batches are sized to each topic's ``max.message.bytes`` (read from the broker): a row
too large for its topic on its own is marked ``failed`` with the limit named, and only it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

import psycopg
from psycopg.conninfo import conninfo_to_dict

from casestream.errors import ConfigError
from casestream.kafka.config import producer_config
from casestream.outbox.relay import OutboxRelay, RelaySettings
from casestream.outbox.relay.settings import DEFAULT_MAX_ATTEMPTS, relay_retry


def producer_property(text: str) -> tuple[str, str]:
    """Parse ``-X KEY=VALUE`` (a librdkafka producer property).

    Raises:
        argparse.ArgumentTypeError: no ``=`` or an empty key.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (a librdkafka property), got {text!r}")
    return key.strip(), value


def max_attempts(text: str) -> int | None:
    """Parse ``--max-attempts``: a count >= 1, or ``unbounded``."""
    if text == "unbounded":
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a count >= 1 or 'unbounded', got {text!r}")
    return n


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the relay until SIGTERM/SIGINT; return the exit status."""
    ap = argparse.ArgumentParser(prog="python -m casestream.outbox.relay", description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", required=True, help="PostgreSQL URL of the service database")
    ap.add_argument("--bootstrap", required=True, help="Kafka bootstrap.servers")
    ap.add_argument("--name", default="relay", help="relay name (lease owner prefix)")
    ap.add_argument("--lease-s", type=float, default=10.0, help="shard lease, seconds")
    ap.add_argument("--batch-size", type=int, default=1000, help="rows per batch")
    ap.add_argument("--poll-interval-s", type=float, default=0.5, help="idle polling fallback, seconds")
    ap.add_argument("--topic-prefix", default="outbox.event.", help="topic = prefix + aggregatetype")
    ap.add_argument("--retention-s", type=float, default=3600.0,
                    help="keep published rows this long (0: delete on publish)")
    ap.add_argument("--max-open-batches", type=int, default=2,
                    help="batches awaiting delivery reports at once (1: claim only after every "
                         "report of the previous batch is in)")
    ap.add_argument("--max-attempts", type=max_attempts, default=DEFAULT_MAX_ATTEMPTS,
                    metavar="N|unbounded",
                    help="attempts per row after retryable delivery errors (first try included) "
                         "before it is marked failed and counted in relay_gave_up_total "
                         f"(default {DEFAULT_MAX_ATTEMPTS})")
    ap.add_argument("-X", "--producer-property", dest="producer", type=producer_property,
                    action="append", default=[], metavar="KEY=VALUE",
                    help="librdkafka producer property, repeatable (e.g. -X linger.ms=5, "
                         "-X compression.type=zstd, -X message.max.bytes=2000000); "
                         "enable.idempotence and acks=all cannot be weakened")
    ap.add_argument("--log-level", default="INFO", type=str.upper,
                    choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        conninfo_to_dict(args.dsn)
    except psycopg.ProgrammingError as e:
        ap.error(f"--dsn is not a PostgreSQL URL: {str(e).strip()}")
    try:
        settings = RelaySettings(batch_size=args.batch_size, lease_s=args.lease_s,
                                 poll_interval_s=args.poll_interval_s, topic_prefix=args.topic_prefix,
                                 published_retention_s=args.retention_s,
                                 max_open_batches=args.max_open_batches,
                                 retry=relay_retry(args.max_attempts))
        relay = OutboxRelay(args.dsn, producer_config(args.bootstrap, client_id=args.name,
                                                      overrides=dict(args.producer)),
                            settings, args.name)
    except ConfigError as e:
        ap.error(str(e))  # usage line + message, exit status 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    relay.run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
