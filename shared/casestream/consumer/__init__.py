"""Consumer runtime: every service consumes Kafka through this package.

Public API::

    from casestream.consumer import ConsumerRuntime, ConsumerSettings, RetryPolicy
    from casestream.handlers import HandlerRegistry, HandlerKind, HandlerContext
    from casestream.processing import ProcessingMode
    from casestream.guard import FirstSeenPolicy

    runtime = ConsumerRuntime("audit.journal", ["outbox.event.case"], registry, codec, pool,
                              {"bootstrap.servers": settings.kafka_bootstrap}, ConsumerSettings())
    runtime.run(stop)          # a ServiceProcess worker
    group = ConsumerGroup(2, "audit.journal", ...)   # same arguments: 2 members, partition-parallel

Modules: ``runtime`` (Kafka loop, offsets, rebalance), ``group`` (several members of one
group in one process), ``batch`` (one transaction per poll
batch, no Kafka; its steps in ``batch_model``, ``batch_dispatch``, ``batch_fast``,
``batch_slow``, ``batch_held``, ``batch_failures``), ``settings`` (policy), ``failures``
(classification), ``records`` (values and the decoder port). Tables: ``casestream.inbox``; dead letters: ``casestream.dlq``; the guard
rule: ``casestream.guard``.
"""

from casestream.consumer.batch import BatchProcessor, BatchResult, Decoded
from casestream.consumer.failures import FailureClass, classify
from casestream.consumer.group import ConsumerGroup, GroupStats
from casestream.consumer.records import ConsumerStats, EnvelopeDecoder, Record
from casestream.consumer.runtime import ConsumerRuntime, ensure_topics
from casestream.consumer.settings import ConsumerSettings, RetryPolicy

__all__ = [
    "BatchProcessor", "BatchResult", "ConsumerGroup", "ConsumerRuntime", "Decoded", "GroupStats", "ConsumerSettings", "ConsumerStats",
    "EnvelopeDecoder", "FailureClass", "Record", "RetryPolicy", "classify", "ensure_topics",
]
