"""Re-drive after deploy: a failure group waits for a new build of its consumer, then is
re-driven without anyone watching.

A non-retryable failure (corrupt bytes, schema resolution, a handler that rejects the event)
fails again the same way until a fix is deployed. The operator asks, once, for the group to be
re-driven *after* that deploy (the console's "Re-drive after deploy", ``casestream dlq redrive
--group FP --after-deploy``):

- **The request** (:func:`request_redrive_after_deploy`) records, on the operator-action topic,
  an action ``dlq.redrive-after-deploy`` naming the group (``params``: fingerprint, failure
  class) and the builds the consumer group's members run now (``params["builds"]``). The build
  of a member is read from its Kafka client id, ``<consumer>@<build>``
  (:mod:`casestream.kafka.builds`, ``CASESTREAM_BUILD``), as the broker reports it
  (``describe_consumer_groups``). A consumer whose members report no build, or that has no
  member, is refused: there is nothing to tell a later deploy from.
- **The deploy is seen** when the group is stable, has members, and none of them runs a build
  the request recorded: the rollout is over, so no member of the old code can take the copies.
- **The re-drive** (:func:`redrive_after_deploy_due`, run by :class:`AfterDeployRedrives` in the
  consumer's own service every few seconds) re-drives the group's entries still ``open`` then:
  the whole group as it is by then (entries dead-lettered by the old build after the request
  included; ``params["scope"]`` ``group``: the CLI, an operator of every tenant), else
  (``items``: a tenant's supervisor, who saw only theirs) only the entries the request
  named. It is an ordinary ``dlq.redrive``
  action of the requester with ``params["request"]`` = the request's ``action_id`` and the
  builds in its reason; a request with such an action (outcome ``ok``) is done. With nothing
  open any more (discarded meanwhile, resolved), the same action records that, with no items.

Several replicas of a service may check at once: one whose check finds the entries already
``redriving`` (another replica's copies) leaves the request to it; should two re-drive in the
same instant, the second copy of each message is a duplicate the consumer's inbox drops
(re-driving twice has one effect, :mod:`casestream.consumer.deadletters`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from casestream.consumer.deadletters import DeadLetterError
from casestream.kafka.builds import member_builds
from casestream.kafka.config import KafkaTarget, client_config
from casestream.operations.actions import (
    ACTION_REDRIVE,
    ACTION_REDRIVE_AFTER_DEPLOY,
    OperatorAction,
    read_actions,
    record_action,
)
from casestream.operations.commands import Actor, redrive_dead_letters
from casestream.operations.deadletters import STATE_OPEN, STATE_REDRIVING, load_dead_letter_state
from casestream.operations.failuregroups import FailureGroup, failure_groups

log = logging.getLogger(__name__)

__all__ = ["GroupBuilds", "AfterDeployRedrives", "consumer_builds", "pending_after_deploy",
           "request_redrive_after_deploy", "redrive_after_deploy_due"]


@dataclass(frozen=True, slots=True)
class GroupBuilds:
    """The broker's view of consumer group ``consumer``: its state (``STABLE``, ``EMPTY``,
    ``PREPARING_REBALANCE``...; ``DEAD`` when it does not exist) and each member's build
    (None: its client id names none)."""

    consumer: str
    state: str
    builds: tuple[str | None, ...]

    @property
    def stable(self) -> bool:
        return self.state == "STABLE" and bool(self.builds)


def consumer_builds(bootstrap: KafkaTarget, consumer: str, *, timeout_s: float = 10.0) -> GroupBuilds:
    """The builds the members of group ``consumer`` run (:class:`GroupBuilds`).

    Raises:
        DeadLetterError: Kafka did not describe the group within ``timeout_s``.
    """
    try:
        state, builds = member_builds(client_config(bootstrap), consumer, timeout_s=timeout_s)
    except Exception as e:  # noqa: BLE001 - librdkafka errors: one kind for the caller
        raise DeadLetterError(f"consumer group {consumer} not described: {e}") from None
    return GroupBuilds(consumer, state, tuple(sorted(builds, key=lambda b: b or "")))


def request_redrive_after_deploy(bootstrap: KafkaTarget, group: FailureGroup, *, actor: Actor,
                                 reason: str, whole_group: bool = True, actions_topic: str | None = None,
                                 timeout_s: float = 10.0) -> OperatorAction:
    """Record that ``group`` (open entries of one consumer) is to be re-driven once a build
    other than the running ones is deployed (module docstring); nothing is re-driven now.
    ``whole_group``: the group as it is then; False: only ``group``'s entries of now (the
    group as a tenant's operator sees it).

    Raises:
        DeadLetterError: the consumer has no member, or a member reports no build (names
            CASESTREAM_BUILD), or Kafka did not answer.
        ActionLogError: ``reason`` is blank or too long, or the request was not recorded.
    """
    now = consumer_builds(bootstrap, group.consumer, timeout_s=timeout_s)
    if not now.builds:
        raise DeadLetterError(f"consumer {group.consumer} has no running member: a re-drive after "
                              "deploy compares the builds running now with later ones; start it, or "
                              "re-drive once the fix runs")
    if None in now.builds:
        raise DeadLetterError(f"a member of consumer {group.consumer} reports no build (its client id "
                              "is not <consumer>@<build>): set CASESTREAM_BUILD (the image tag) on "
                              "its service, or re-drive once the fix runs")
    builds = ",".join(sorted({b for b in now.builds if b}))
    action = OperatorAction(
        actor=actor.name, tenant=actor.tenant, roles=actor.roles, action=ACTION_REDRIVE_AFTER_DEPLOY,
        target=group.consumer, reason=reason, items=tuple(e.label for e in group.entries),
        params={"fingerprint": group.fingerprint, "failure_class": group.failure_class, "builds": builds,
                "scope": "group" if whole_group else "items"},
        detail=(f"group {group.fingerprint} ({group.count} dead letter(s)) waits for a deploy of "
                f"{group.consumer} other than build {builds}"))
    record_action(bootstrap, action, topic=actions_topic)
    return action


def pending_after_deploy(actions: Sequence[OperatorAction], consumer: str | None = None) -> list[OperatorAction]:
    """The re-drive-after-deploy requests (of ``consumer``, or of every consumer) no successful
    re-drive carried out yet, oldest first."""
    done = {a.params.get("request") for a in actions
            if a.action == ACTION_REDRIVE and a.outcome == "ok" and a.params.get("request")}
    return [a for a in actions if a.action == ACTION_REDRIVE_AFTER_DEPLOY and a.outcome == "ok"
            and (consumer is None or a.target == consumer) and a.action_id not in done]


def redrive_after_deploy_due(bootstrap: KafkaTarget, consumer: str, *, actions_topic: str | None = None,
                             actions: Sequence[OperatorAction] | None = None,
                             timeout_s: float = 10.0) -> list[OperatorAction]:
    """Carry out the pending requests of ``consumer`` whose deploy is seen (module docstring);
    returns the re-drive actions recorded (none while the old build runs). ``actions``: the
    operator actions already read (several consumers at once), else they are read here.

    Raises:
        DeadLetterError: Kafka did not answer (the requests stay pending).
        ActionLogError: an action could not be read or recorded.
    """
    if actions is None:
        actions = read_actions(bootstrap, topic=actions_topic, timeout_s=timeout_s)
    pending = pending_after_deploy(actions, consumer)
    if not pending:
        return []
    now = consumer_builds(bootstrap, consumer, timeout_s=timeout_s)
    if not now.stable or None in now.builds:
        return []
    running = sorted({b for b in now.builds if b})
    state = None
    done = []
    for request in pending:
        old = set(request.params.get("builds", "").split(","))
        if old & set(running):
            continue  # a member still runs a build the request saw: not deployed (everywhere) yet
        if state is None:
            state = load_dead_letter_state(bootstrap, consumer, actions_topic=actions_topic, timeout_s=timeout_s)
        fingerprint = request.params.get("fingerprint", "")
        group = next((g for g in failure_groups(state) if g.fingerprint == fingerprint), None)
        entries = list(group.entries) if group is not None else []
        if request.params.get("scope") == "items":  # a tenant's operator: only what they saw
            entries = [e for e in entries if e.label in request.items]
        if any(e.state == STATE_REDRIVING for e in entries):
            continue  # another replica's copies are in flight: its action settles the request
        chosen = [e for e in entries if e.state == STATE_OPEN]
        why = (f"{request.reason} (after deploy: build {request.params.get('builds')} -> "
               f"{','.join(running)})")
        params = {"request": request.action_id, "fingerprint": fingerprint, "builds": ",".join(running)}
        actor = Actor(request.actor, tenant=request.tenant, roles=request.roles)
        if not chosen:
            action = OperatorAction(actor=actor.name, tenant=actor.tenant, roles=actor.roles,
                                    action=ACTION_REDRIVE, target=consumer, reason=why, params=params,
                                    detail=f"nothing open in group {fingerprint} after the deploy")
            record_action(bootstrap, action, topic=actions_topic)
        else:
            action = redrive_dead_letters(bootstrap, consumer, [e.record for e in chosen], actor=actor,
                                          reason=why, actions_topic=actions_topic, params=params)
        log.info("%s: re-drive after deploy %s: %s", consumer, request.action_id, action.detail)
        done.append(action)
        state = None  # the next request sees these copies
    return done


class AfterDeployRedrives:
    """Worker (``run(stop)``) carrying out the re-drive-after-deploy requests of ``consumers``
    every ``interval_s`` seconds (:func:`redrive_after_deploy_due`); a failed check is logged
    and tried again."""

    def __init__(self, bootstrap: KafkaTarget, consumers: Sequence[str], *, interval_s: float = 30.0,
                 actions_topic: str | None = None) -> None:
        self._bootstrap = bootstrap
        self.consumers = tuple(dict.fromkeys(consumers))
        self.interval_s = interval_s
        self._actions_topic = actions_topic

    def check(self) -> list[OperatorAction]:
        """One pass over every consumer; the re-drive actions recorded."""
        done: list[OperatorAction] = []
        try:
            actions = read_actions(self._bootstrap, topic=self._actions_topic)
        except Exception as e:  # noqa: BLE001 - the requests stay pending; next pass
            log.warning("re-drive after deploy not checked: %s", e)
            return done
        for consumer in self.consumers:
            try:
                done += redrive_after_deploy_due(self._bootstrap, consumer, actions=actions,
                                                 actions_topic=self._actions_topic)
            except Exception as e:  # noqa: BLE001 - the request stays pending; next pass
                log.warning("re-drive after deploy of %s not checked: %s", consumer, e)
        return done

    def run(self, stop: threading.Event) -> None:
        """Check now, then every ``interval_s`` until ``stop`` is set."""
        while not stop.is_set():
            self.check()
            stop.wait(self.interval_s)
