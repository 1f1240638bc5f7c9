"""Test helpers for code built on casestream (not used by services at run time).

Modules: ``memory`` (``MemoryBus``: a service's handlers in memory, with the runtime's inbox,
guard, upcasting and dead-letter rules and a ``ManualClock``; unit tests) beside ``consumer``
(consumer harness on the real Kafka / PostgreSQL, in-memory or
real codecs: ``memory_codec(catalog)`` is the one test codec; ``python -m casestream.testing.consumer`` is the crash-test child) and
``relay`` (isolated schemas, topics, a private Kafka broker) and ``faults`` (fault injection
and invariant reads for soaks: infrastructure restarts, forced rebalances, poison messages,
group lag, inbox sizes) and ``replicas`` (how work was shared between the instances of a
service: per-instance applied events, partitions, relay shards and leases). Import the modules; the
names below are re-exported lazily so that importing this package loads no driver.
``contracts`` (one test body per behaviour of a port, run against every adapter:
``REGISTRY_CONTRACT``, ``DEAD_LETTER_CONTRACT``, ``OUTBOX_SINK_CONTRACT``). ``MemorySink`` is :class:`casestream.outbox.MemorySink` (the in-memory ``EventSink``).
"""

from __future__ import annotations

from casestream._lazy import lazy_exports

_LAZY = {
    **{name: "casestream.testing.consumer" for name in (
        "Harness", "close_codec", "create_topic", "headers_of", "make_event", "real_codec",
        "memory_codec")},
    "MemorySink": "casestream.outbox.sink",
    **{name: "casestream.testing.memory" for name in ("ManualClock", "MemoryBus", "Published")},
    **{name: "casestream.testing.contracts" for name in (
        "DEAD_LETTER_CONTRACT", "OUTBOX_SINK_CONTRACT", "REGISTRY_CONTRACT")},
    **{name: "casestream.testing.faults" for name in (
        "end_offsets", "force_rebalance", "group_lag", "hold_rows", "hold_snapshot", "inbox_size",
        "inject_poison", "query", "read_since", "restart_infra")},
    **{name: "casestream.testing.toxiproxy" for name in (
        "Toxiproxy", "ToxiproxyError", "ToxiproxyServer", "upstream", "via")},
    **{name: "casestream.testing.replicas" for name in (
        "InstanceWork", "Target", "WorkSampler", "group_members", "relay_leases",
        "scrape_metrics", "unshared")},
    **{name: "casestream.testing.relay" for name in (
        "FakeEnvelope", "JsonCodec", "PrivateKafka", "create_topics", "delete_topics",
        "isolated_schema", "read_topics")},
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_exports(__name__, _LAZY, globals())
