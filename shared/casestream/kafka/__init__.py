"""Kafka client configuration shared by the relay, the consumers and the admin tools.

Public API::

    from casestream.kafka import producer_config, enforce_producer_guarantees, admin_config

Module: ``config`` (no Kafka client import: plain configuration dictionaries).
"""

from casestream.kafka.config import PRODUCER_DEFAULTS, admin_config, enforce_producer_guarantees, producer_config

__all__ = ["PRODUCER_DEFAULTS", "admin_config", "enforce_producer_guarantees", "producer_config"]
