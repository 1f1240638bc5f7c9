"""Operator actions: the audit log of what an operator did, on a Kafka topic.

Every operator action — a dead-letter re-drive or discard, a saga resolve, from the CLI or
the web console — is one JSON record (UTF-8) on :data:`ACTIONS_TOPIC`
(``CASESTREAM_OPERATOR_ACTIONS_TOPIC`` overrides), keyed by the target (e.g. the consumer
name), so the actions on one target stay in order::

    {"action_id": "...", "at": "2026-01-31T12:00:00.123Z", "actor": "alice",
     "tenant": "acme" | null, "roles": ["supervisor"], "action": "dlq.redrive",
     "target": "billing.invoices", "items": ["0:17", "0:18"], "reason": "fixed in 1.4.2",
     "outcome": "ok" | "failed", "detail": "re-drove 2 dead letter(s)", "params": {}}

The topic is also state: a ``dlq.discard`` record resolves the dead letters it names
(:mod:`casestream.operations.deadletters`), so it must be kept at least as long as the
dead-letter topics (``deploy/kafka/topics.conf``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from casestream.consumer.deadletters import DeadLetterError, iso
from casestream.errors import CasestreamError
from casestream.kafka.config import KafkaTarget, client_config

__all__ = ["ACTIONS_TOPIC", "OperatorAction", "ActionLogError", "actions_topic", "record_action",
           "read_actions", "ACTION_REDRIVE", "ACTION_DISCARD", "ACTION_SAGA_RESOLVE",
           "ACTION_REDRIVE_AFTER_DEPLOY"]

ACTIONS_TOPIC = "casestream.operator.actions"
ACTION_REDRIVE = "dlq.redrive"
ACTION_DISCARD = "dlq.discard"
ACTION_SAGA_RESOLVE = "saga.resolve"
ACTION_REDRIVE_AFTER_DEPLOY = "dlq.redrive-after-deploy"
REASON_MAX = 1000
"""Characters an action's reason may hold."""


class ActionLogError(CasestreamError):
    """An operator action could not be recorded or read, or its fields are invalid."""


def actions_topic() -> str:
    """``CASESTREAM_OPERATOR_ACTIONS_TOPIC`` or :data:`ACTIONS_TOPIC`."""
    return os.environ.get("CASESTREAM_OPERATOR_ACTIONS_TOPIC") or ACTIONS_TOPIC


@dataclass(frozen=True, slots=True, kw_only=True)
class OperatorAction:
    """One operator action (module docstring). ``items``: what inside ``target`` it touched
    (dead-letter labels ``PARTITION:OFFSET``, a saga id); ``params``: strings an action kind
    needs besides (a re-drive after deploy's failure group and builds, the request a re-drive
    carries out). ``reason`` is kept verbatim, line
    breaks and control characters included: the record is JSON, which escapes them, so a
    reason never splits or drops a record; whoever shows it escapes it for its medium.

    Raises:
        ActionLogError: blank or over :data:`REASON_MAX` characters reason, blank actor."""

    actor: str
    action: str
    target: str
    reason: str
    items: tuple[str, ...] = ()
    tenant: str | None = None
    roles: tuple[str, ...] = ()
    outcome: str = "ok"
    detail: str = ""
    params: dict[str, str] = field(default_factory=dict)
    at: str = field(default_factory=lambda: iso(datetime.now(timezone.utc)))
    action_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        reason = self.reason.strip()
        if not reason:
            raise ActionLogError("reason: required (why the operator acts), got an empty one")
        if len(reason) > REASON_MAX:
            raise ActionLogError(f"reason: at most {REASON_MAX} characters, got {len(reason)}")
        if not self.actor.strip():
            raise ActionLogError("actor: required (who acts)")

    def to_json(self) -> bytes:
        body = asdict(self)
        body["items"], body["roles"] = list(self.items), list(self.roles)
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> OperatorAction:
        """Raises ActionLogError: not a JSON object with the fields above."""
        try:
            body = json.loads(raw)
            return cls(**{**body, "items": tuple(body.get("items") or ()),
                          "roles": tuple(body.get("roles") or ()),
                          "params": {str(k): str(v) for k, v in (body.get("params") or {}).items()}})
        except (ValueError, TypeError) as e:
            raise ActionLogError(f"operator action record not readable: {e}") from None


def record_action(bootstrap: KafkaTarget, action: OperatorAction, *, topic: str | None = None,
                  timeout_s: float = 15.0) -> None:
    """Append ``action`` to the actions topic (idempotent producer, ``acks=all``) and wait
    for its delivery.

    Raises:
        ActionLogError: the record was not delivered within ``timeout_s``.
    """
    # lazy (start-up cost): confluent_kafka loads when a client is built
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**client_config(bootstrap), "acks": "all", "enable.idempotence": True})
    producer.produce(topic or actions_topic(), key=action.target.encode(), value=action.to_json(),
                     on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    left = producer.flush(timeout_s)
    if left or errors:
        raise ActionLogError(f"operator action not recorded on {topic or actions_topic()}: "
                             f"{left} undelivered, {errors[:1]}")


def read_actions(bootstrap: KafkaTarget, *, topic: str | None = None,
                 timeout_s: float = 10.0) -> list[OperatorAction]:
    """Every action on the topic, oldest first per target ([] when the topic does not exist
    yet; unreadable records are skipped).

    Raises:
        ActionLogError: Kafka did not answer.
    """
    from casestream.operations.deadletters import read_if_exists

    try:
        records = read_if_exists(bootstrap, topic or actions_topic(), timeout_s=timeout_s)
    except DeadLetterError as e:
        raise ActionLogError(str(e)) from None
    out: list[OperatorAction] = []
    for r in sorted(records, key=lambda r: (r.timestamp_ms or 0, r.partition, r.offset)):
        try:
            out.append(OperatorAction.from_json(r.value or b""))
        except ActionLogError:
            continue
    return out


def discarded(actions: Sequence[OperatorAction], consumer: str) -> set[str]:
    """Labels (``PARTITION:OFFSET`` on ``<consumer>.dlq``) the successful discards of ``consumer`` name."""
    return {item for a in actions if a.action == ACTION_DISCARD and a.target == consumer
            and a.outcome == "ok" for item in a.items}


def as_dict(action: OperatorAction) -> dict[str, Any]:
    return json.loads(action.to_json())
