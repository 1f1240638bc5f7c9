"""Readiness probes and one-shot set-up steps for the local infrastructure (deploy/infra.sh).

Usage (exit 0 = ready / done, 1 = not ready, 2 = usage error; one line on stderr says why):

    probe.py kafka  --bootstrap 127.0.0.1:19092 [--brokers N] [--timeout 5]
        a real metadata request through the admin client (confluent_kafka) listing >= N brokers.
    probe.py topics --bootstrap 127.0.0.1:19092 --partitions 6 [--replication 1] [--config k=v ...] [--alter] TOPIC...
        create the topics if missing (idempotent) and wait until each has a leader;
        --alter also sets the --config values on topics that exist already.
    probe.py delete-topics --bootstrap 127.0.0.1:19092 [--prefix test.] [--prefix bench.] [--timeout 30]
        delete every topic whose name starts with one of the prefixes (default: test. and bench.,
        what test and bench runs create; internal topics starting with _ never match).
    probe.py scram-user --bootstrap 127.0.0.1:19092 --user NAME --password-file FILE
        create or update the SCRAM-SHA-512 credential of NAME (idempotent; KIP-554).
    probe.py http   URL [--timeout 5]         HTTP GET answers 2xx.
    probe.py smtp   HOST PORT [--timeout 5]   an SMTP greeting 220 and a clean QUIT.

Only `kafka` and `topics` need the project's virtual environment; the rest is stdlib.
"""

from __future__ import annotations

import argparse
import smtplib
import sys
import time
import urllib.error
import urllib.request


def _kafka_admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient  # venv only

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000, "log_level": 0})


def probe_kafka(bootstrap: str, timeout: float, brokers: int = 1) -> None:
    """Raise if the cluster does not answer a metadata request listing ``brokers`` brokers."""
    md = _kafka_admin(bootstrap).list_topics(timeout=timeout)
    if len(md.brokers) < brokers:
        raise RuntimeError(f"metadata lists {len(md.brokers)} of {brokers} brokers")


def scram_user(bootstrap: str, user: str, password: str, timeout: float) -> None:
    """Create or update ``user``'s SCRAM-SHA-512 credential (AlterUserScramCredentials)."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          password.encode())
    admin = _kafka_admin(bootstrap)  # kept alive until the futures resolve
    for fut in admin.alter_user_scram_credentials([upsert]).values():
        fut.result(timeout=timeout)


def ensure_topics(bootstrap: str, topics: list[str], partitions: int, configs: dict[str, str],
                  timeout: float, replication: int = 1, alter: bool = False) -> None:
    """Create missing topics and wait until all partitions have leaders; ``alter``: set
    ``configs`` on the existing ones too (IncrementalAlterConfigs)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

    admin = _kafka_admin(bootstrap)
    existing = admin.list_topics(timeout=timeout).topics
    missing = [t for t in topics if t not in existing]
    present = [t for t in topics if t in existing]
    if alter and configs and present:
        resources = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
            for t in present]
        for res, fut in admin.incremental_alter_configs(resources).items():
            fut.result(timeout)
            print(f"set {', '.join(f'{k}={v}' for k, v in configs.items())} on topic {res.name}",
                  file=sys.stderr)
    if missing:
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=partitions, replication_factor=replication, config=configs)
             for t in missing],
            operation_timeout=timeout,
        )
        for name, fut in futures.items():
            try:
                fut.result()
                print(f"created topic {name} ({partitions} partitions)", file=sys.stderr)
            except KafkaException as exc:
                if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":
                    raise
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=timeout).topics
        pending = [t for t in topics if t not in md or md[t].error is not None
                   or any(p.leader < 0 for p in md[t].partitions.values())]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"topics without leaders: {pending}")
        time.sleep(0.2)


SWEEP_PREFIXES = ("test.", "bench.")


def topics_to_sweep(names: list[str], prefixes: tuple[str, ...] = SWEEP_PREFIXES) -> list[str]:
    """The names starting with one of ``prefixes``, sorted; names starting with ``_`` (the
    broker's and Connect's internal topics) never, and an empty prefix is refused (ValueError)."""
    if any(not p for p in prefixes):
        raise ValueError("an empty prefix would match every topic")
    return sorted(n for n in names if not n.startswith("_") and n.startswith(tuple(prefixes)))


def delete_topics(bootstrap: str, prefixes: tuple[str, ...], timeout: float) -> None:
    """Delete the topics :func:`topics_to_sweep` selects; one line on stderr with the count of
    topics and partitions deleted."""
    from confluent_kafka import KafkaException

    admin = _kafka_admin(bootstrap)
    md = admin.list_topics(timeout=timeout).topics
    doomed = topics_to_sweep(list(md), prefixes)
    partitions = sum(len(md[t].partitions) for t in doomed)
    if doomed:
        for fut in admin.delete_topics(doomed, operation_timeout=timeout).values():
            try:
                fut.result()
            except KafkaException as exc:
                if exc.args[0].name() != "UNKNOWN_TOPIC_OR_PART":
                    raise
    print(f"deleted {len(doomed)} topics ({partitions} partitions) starting with "
          f"{' or '.join(prefixes)}; {len(md) - len(doomed)} topics left", file=sys.stderr)


def probe_http(url: str, timeout: float, contains: str | None = None) -> None:
    """Raise unless GET url answers 2xx (and its body has ``contains``, when given)."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback URL)
        if not 200 <= resp.status < 300:
            raise RuntimeError(f"HTTP {resp.status}")
        if contains is not None and contains not in resp.read().decode("utf-8", "replace"):
            raise RuntimeError(f"{url}: the answer does not mention {contains}")


def probe_smtp(host: str, port: int, timeout: float) -> None:
    """Raise unless the server greets with 220 and answers NOOP."""
    with smtplib.SMTP(host, port, timeout=timeout) as smtp:
        code, _ = smtp.noop()
        if code != 250:
            raise RuntimeError(f"NOOP answered {code}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="probe.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("kafka")
    k.add_argument("--bootstrap", required=True)
    k.add_argument("--timeout", type=float, default=5)
    k.add_argument("--brokers", type=int, default=1)
    u = sub.add_parser("scram-user")
    u.add_argument("--bootstrap", required=True)
    u.add_argument("--user", required=True)
    u.add_argument("--password-file", required=True)
    u.add_argument("--timeout", type=float, default=30)
    t = sub.add_parser("topics")
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--partitions", type=int, default=6)
    t.add_argument("--replication", type=int, default=1)
    t.add_argument("--config", action="append", default=[], help="topic config k=v")
    t.add_argument("--timeout", type=float, default=30)
    t.add_argument("--alter", action="store_true", help="set --config on existing topics too")
    t.add_argument("topics", nargs="+")
    d = sub.add_parser("delete-topics")
    d.add_argument("--bootstrap", required=True)
    d.add_argument("--prefix", action="append", help="topic name prefix (repeatable; default test. and bench.)")
    d.add_argument("--timeout", type=float, default=30)
    h = sub.add_parser("http")
    h.add_argument("url")
    h.add_argument("--timeout", type=float, default=5)
    h.add_argument("--contains", help="the body must contain this text")
    s = sub.add_parser("smtp")
    s.add_argument("host")
    s.add_argument("port", type=int)
    s.add_argument("--timeout", type=float, default=5)
    a = p.parse_args(argv)
    try:
        if a.cmd == "kafka":
            probe_kafka(a.bootstrap, a.timeout, a.brokers)
        elif a.cmd == "topics":
            configs = dict(kv.split("=", 1) for kv in a.config)
            ensure_topics(a.bootstrap, a.topics, a.partitions, configs, a.timeout, a.replication, a.alter)
        elif a.cmd == "delete-topics":
            delete_topics(a.bootstrap, tuple(a.prefix or SWEEP_PREFIXES), a.timeout)
        elif a.cmd == "scram-user":
            with open(a.password_file, encoding="utf-8") as f:
                scram_user(a.bootstrap, a.user, f.read().strip(), a.timeout)
        elif a.cmd == "http":
            probe_http(a.url, a.timeout, a.contains)
        else:
            probe_smtp(a.host, a.port, a.timeout)
    except ImportError as exc:
        print(f"probe {a.cmd}: {exc} (run 'make venv')", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"probe {a.cmd}: {exc}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError, urllib.error.URLError, smtplib.SMTPException) as exc:
        print(f"probe {a.cmd}: not ready: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a probe reports, it never dumps a trace
        print(f"probe {a.cmd}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
