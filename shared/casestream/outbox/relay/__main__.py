"""Run one outbox relay as a standalone process: ``python -m casestream.outbox.relay``.

Services normally run their relay as a worker thread (``casestream.service.process``); this entry
point serves operations (a relay without the service) and the SIGKILL take-over test.
SIGTERM/SIGINT stop it cleanly (flush, release leases).

Usage::

    python -m casestream.outbox.relay --dsn postgresql://postgres@127.0.0.1:15432/case \\
        --bootstrap 127.0.0.1:19092 --name case.relay [--lease-s 10] [--batch-size 1000] \\
        [--topic-prefix outbox.event.] [--retention-s 3600] [--max-open-batches 2]
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
                                 max_open_batches=args.max_open_batches)
        relay = OutboxRelay(args.dsn, producer_config(args.bootstrap, client_id=args.name),
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
