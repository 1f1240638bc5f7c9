"""Consumer runtime: every service consumes Kafka through this package.

Public API::

    from casestream.consumer import ConsumerRuntime, ConsumerSettings
    from casestream.retry import RetryPolicy      # ConsumerSettings(retry=...)
    from casestream.handlers import HandlerRegistry, HandlerKind, HandlerContext  # what handlers use

    runtime = ConsumerRuntime("billing.invoices", ["outbox.event.order"], registry, codec, pool,
                              {"bootstrap.servers": settings.kafka_bootstrap}, ConsumerSettings())
    runtime.run(stop)          # a ServiceProcess worker
    group = ConsumerGroup(2, "billing.invoices", ...)   # same arguments: 2 members, partition-parallel

Modules: ``runtime`` (Kafka loop, offsets, rebalance), ``group`` (several members of one
group in one process), ``batch`` (one transaction per poll
batch, no Kafka; its collaborators in ``batch_dispatch``, ``batch_fast``, ``batch_slow``,
``batch_held``, ``batch_failures``, its values in ``batch_model``), ``settings`` (policy), ``failures``
(classification), ``records`` (values and the decoder port). Tables: ``inbox``; durable
attempt counts and backoffs: ``retries``; dead letters: ``deadletters``; the handlers, the
guard rule and the processing modes live in ``casestream.handlers`` (the runner that calls
handlers is ``casestream.handlers.runner``, the same under replay); key-parallel mode (``ConsumerSettings.key_concurrency``): ``keyparallel`` (per-aggregate queues,
committable offsets), ``keyworkers`` (the worker threads) and ``handlerloop`` (the event loop
their coroutine handlers share).

The record and settings names import eagerly (no driver); the runtime, batch, inbox and
dead-letter names (psycopg, confluent_kafka) are re-exported lazily. The handler, guard and
processing names this package used to export still resolve, with a ``DeprecationWarning``
naming ``casestream.handlers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports, moved_exports
from casestream.consumer.records import ConsumerStats, EnvelopeDecoder, Record
from casestream.consumer.settings import ConsumerSettings

if TYPE_CHECKING:
    from casestream.consumer.batch import BatchProcessor, BatchResult, Decoded
    from casestream.consumer.deadletters import DeadLetter, DeadLetterSink, KafkaDeadLetters, MemoryDeadLetters
    from casestream.consumer.failures import FailureClass, classify
    from casestream.consumer.group import ConsumerGroup, GroupStats
    from casestream.consumer.inbox import ensure_schema
    from casestream.consumer.runtime import ConsumerFenced, ConsumerRuntime, ensure_topics

# Lazy: these modules import psycopg and/or confluent_kafka.
_LAZY = {
    **{name: "casestream.consumer.batch" for name in ("BatchProcessor", "BatchResult", "Decoded")},
    **{name: "casestream.consumer.deadletters" for name in (
        "DeadLetter", "DeadLetterSink", "KafkaDeadLetters", "MemoryDeadLetters")},
    **{name: "casestream.consumer.failures" for name in ("FailureClass", "classify")},
    **{name: "casestream.consumer.group" for name in ("ConsumerGroup", "GroupStats")},
    "ensure_schema": "casestream.consumer.inbox",
    **{name: "casestream.consumer.runtime" for name in ("ConsumerFenced", "ConsumerRuntime",
                                                         "ensure_topics")},
}

#: names that moved to casestream.handlers (deprecated here)
_MOVED = dict.fromkeys((
    "AggregateState", "DiscardingOutbox", "FirstSeenPolicy", "HandlerContext", "HandlerKind",
    "HandlerRegistry", "OutboxAppender", "ProcessingMode", "RegisteredHandler", "Verdict", "decide",
), "casestream.handlers")

__all__ = sorted(["ConsumerSettings", "ConsumerStats", "EnvelopeDecoder", "Record", *_LAZY])


__getattr__ = moved_exports(__name__, _MOVED, lazy_exports(__name__, _LAZY, globals()))
