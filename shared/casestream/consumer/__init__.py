"""Consumer runtime: every service consumes Kafka through this package.

Public API::

    from casestream.consumer import ConsumerRuntime, ConsumerSettings
    from casestream.retry import RetryPolicy      # ConsumerSettings(retry=...)
    from casestream.consumer import HandlerRegistry, HandlerKind, HandlerContext
    from casestream.consumer import ProcessingMode, FirstSeenPolicy

    runtime = ConsumerRuntime("billing.invoices", ["outbox.event.order"], registry, codec, pool,
                              {"bootstrap.servers": settings.kafka_bootstrap}, ConsumerSettings())
    runtime.run(stop)          # a ServiceProcess worker
    group = ConsumerGroup(2, "billing.invoices", ...)   # same arguments: 2 members, partition-parallel

Modules: ``runtime`` (Kafka loop, offsets, rebalance), ``group`` (several members of one
group in one process), ``batch`` (one transaction per poll
batch, no Kafka; its collaborators in ``batch_dispatch``, ``batch_fast``, ``batch_slow``,
``batch_held``, ``batch_failures``, its values in ``batch_model``), ``settings`` (policy), ``failures``
(classification), ``records`` (values and the decoder port). Tables: ``inbox``; durable
attempt counts and backoffs: ``retries``; dead letters: ``deadletters``; the guard
rule: ``guard``; handler registration: ``handlers``; processing modes: ``processing``;
key-parallel mode (``ConsumerSettings.key_concurrency``): ``keyparallel`` (per-aggregate queues,
committable offsets), ``keyworkers`` (the worker threads) and ``handlerloop`` (the event loop
their coroutine handlers share).

The handler, guard, processing, record and settings names import eagerly (no driver); the
runtime, batch, inbox and dead-letter names (psycopg, confluent_kafka) are re-exported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports

from casestream.consumer.guard import AggregateState, FirstSeenPolicy, Verdict, decide
from casestream.consumer.handlers import (
    DiscardingOutbox,
    HandlerContext,
    HandlerKind,
    HandlerRegistry,
    OutboxAppender,
    RegisteredHandler,
)
from casestream.consumer.processing import ProcessingMode
from casestream.consumer.records import ConsumerStats, EnvelopeDecoder, Record
from casestream.consumer.settings import ConsumerSettings

if TYPE_CHECKING:
    from casestream.consumer.batch import BatchProcessor, BatchResult, Decoded
    from casestream.consumer.deadletters import DeadLetter, DeadLetterSink, KafkaDeadLetters, MemoryDeadLetters
    from casestream.consumer.failures import FailureClass, classify
    from casestream.consumer.group import ConsumerGroup, GroupStats
    from casestream.consumer.inbox import ensure_schema
    from casestream.consumer.runtime import ConsumerRuntime, ensure_topics

# Lazy: these modules import psycopg and/or confluent_kafka; the replay applier and the
# services' application layers use only the eager names above.
_LAZY = {
    **{name: "casestream.consumer.batch" for name in ("BatchProcessor", "BatchResult", "Decoded")},
    **{name: "casestream.consumer.deadletters" for name in (
        "DeadLetter", "DeadLetterSink", "KafkaDeadLetters", "MemoryDeadLetters")},
    **{name: "casestream.consumer.failures" for name in ("FailureClass", "classify")},
    **{name: "casestream.consumer.group" for name in ("ConsumerGroup", "GroupStats")},
    "ensure_schema": "casestream.consumer.inbox",
    **{name: "casestream.consumer.runtime" for name in ("ConsumerRuntime", "ensure_topics")},
}

__all__ = sorted([
    "AggregateState", "ConsumerSettings", "ConsumerStats", "DiscardingOutbox", "EnvelopeDecoder",
    "FirstSeenPolicy", "HandlerContext", "HandlerKind", "HandlerRegistry", "OutboxAppender",
    "ProcessingMode", "Record", "RegisteredHandler", "Verdict", "decide", *_LAZY,
])


__getattr__ = lazy_exports(__name__, _LAZY, globals())
