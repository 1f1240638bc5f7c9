"""Kafka client configuration shared by the relay, the consumers and the admin tools.

Public API::

    from casestream.kafka import producer_config, enforce_producer_guarantees, admin_config
    from casestream.kafka import client_config, KafkaTarget, read_properties_file
    from casestream.kafka import TopicSpec, ObservedTopic, TopicPlan, plan_topics  # declared topics

Modules: ``config`` (plain configuration dictionaries; librdkafka is loaded only by
:func:`check_client_properties`, to validate a deployment's properties at start);
``properties`` (client properties from ``CASESTREAM_*_PROP_*`` variables and files);
``topicplan`` (pure: declared topics and the plan that brings a cluster to them);
``topicadmin`` (driver: reads declared topics off a cluster, applies a plan).
"""

from casestream.kafka.config import (
    PRODUCER_DEFAULTS,
    RESERVED_CLIENT_PROPERTIES,
    KafkaTarget,
    admin_config,
    bootstrap_of,
    check_client_properties,
    client_config,
    connection_config,
    enforce_producer_guarantees,
    producer_config,
    redact,
)
from casestream.kafka.properties import environ_properties, read_properties_file, read_secret_file
from casestream.kafka.topicplan import ObservedTopic, TopicChange, TopicPlan, TopicSpec, declared_owners, plan_topics

__all__ = ["PRODUCER_DEFAULTS", "RESERVED_CLIENT_PROPERTIES", "KafkaTarget", "admin_config",
           "bootstrap_of", "check_client_properties", "client_config", "connection_config",
           "enforce_producer_guarantees",
           "environ_properties", "producer_config", "read_properties_file", "read_secret_file", "redact",
           "ObservedTopic", "TopicChange", "TopicPlan", "TopicSpec", "declared_owners", "plan_topics"]
