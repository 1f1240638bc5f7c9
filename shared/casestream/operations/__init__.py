"""Operations read models and actions: what an operator sees and does, from the topics.

Public API::

    from casestream.operations import load_dead_letter_state, DeadLetterState, DeadLetterEntry
    from casestream.operations import redrive_dead_letters, discard_dead_letters, Actor
    from casestream.operations import OperatorAction, record_action, read_actions, ACTIONS_TOPIC
    from casestream.operations import group_lag, outbox_flow, parse_prometheus, load_journey
    from casestream.operations import load_replay_runs, ReplayRun, ReplayRuns, ReplayRunsCache
    from casestream.operations import DeadLetterDepth      # the dead_letter_open gauge worker
    from casestream.operations import failure_groups, FailureGroup, retry_warning  # grouped failures
    from casestream.operations import request_redrive_after_deploy, AfterDeployRedrives  # after a deploy

Modules: ``deadletters`` (open / resolved / discarded entries of ``<consumer>.dlq``),
``failuregroups`` (dead letters by failure class and fingerprint, the non-retryable classes),
``actions`` (the operator-action audit log, a Kafka topic), ``commands`` (re-drive and
discard, each recorded), ``afterdeploy`` (a group re-driven once a new build of its consumer
runs), ``depth`` (the service worker behind ``dead_letter_open``),
``flow`` (outbox backlog from ``/metrics``, lag per partition), ``journeys`` (a case's
events across topics), ``replays`` (replay runs with progress and ETA). Nothing here knows the suite's services: topics, consumers and
service URLs are arguments, so the console and the CLI work for any team's services.
"""

from __future__ import annotations

from casestream.operations.actions import (
    ACTION_DISCARD,
    ACTION_REDRIVE,
    ACTION_REDRIVE_AFTER_DEPLOY,
    ACTION_SAGA_RESOLVE,
    ACTIONS_TOPIC,
    ActionLogError,
    OperatorAction,
    actions_topic,
    read_actions,
    record_action,
)
from casestream.operations.afterdeploy import (
    AfterDeployRedrives,
    GroupBuilds,
    consumer_builds,
    pending_after_deploy,
    redrive_after_deploy_due,
    request_redrive_after_deploy,
)
from casestream.operations.commands import Actor, discard_dead_letters, redrive_dead_letters
from casestream.operations.deadletters import (
    DeadLetterEntry,
    DeadLetterState,
    dead_letter_counts,
    dead_letter_state,
    load_dead_letter_state,
)
from casestream.operations.depth import DEPTH_METRIC, DeadLetterDepth
from casestream.operations.failuregroups import (
    NON_RETRYABLE,
    FailureGroup,
    failure_class,
    failure_fingerprint,
    failure_groups,
    find_failure_group,
    normalise_message,
    retry_warning,
)
from casestream.operations.flow import OutboxFlow, PartitionLag, group_lag, outbox_flow, parse_prometheus
from casestream.operations.journeys import Journey, JourneyEvent, journey_of, load_journey
from casestream.operations.replays import ReplayRun, ReplayRuns, ReplayRunsCache, load_replay_runs, read_replay_runs

__all__ = ["ACTION_DISCARD", "ACTION_REDRIVE", "ACTION_REDRIVE_AFTER_DEPLOY", "ACTION_SAGA_RESOLVE",
           "ACTIONS_TOPIC", "ActionLogError", "AfterDeployRedrives", "GroupBuilds", "consumer_builds",
           "pending_after_deploy", "redrive_after_deploy_due", "request_redrive_after_deploy",
           "OperatorAction", "actions_topic", "read_actions", "record_action", "Actor",
           "discard_dead_letters", "redrive_dead_letters", "DeadLetterEntry", "DeadLetterState", "dead_letter_counts",
           "dead_letter_state", "load_dead_letter_state", "DEPTH_METRIC", "DeadLetterDepth",
           "NON_RETRYABLE", "FailureGroup", "failure_class", "failure_fingerprint", "failure_groups",
           "find_failure_group", "normalise_message", "retry_warning",
           "OutboxFlow", "PartitionLag", "group_lag", "outbox_flow", "parse_prometheus",
           "Journey", "JourneyEvent", "journey_of", "load_journey",
           "ReplayRun", "ReplayRuns", "ReplayRunsCache", "load_replay_runs", "read_replay_runs"]
