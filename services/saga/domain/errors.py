"""Errors of the saga domain::

    SagaError                 root of every saga-orchestrator error
    ├── DefinitionError       a saga definition is inconsistent; raised at start-up by
    │                         SagaDefinition.validate(), names every problem found
    └── UnknownTrigger        an operator trigger (e.g. resolve) is not allowed in the
                              saga's current state
"""

from __future__ import annotations


class SagaError(Exception):
    """Root of every error raised by the saga-orchestrator."""


class DefinitionError(SagaError):
    """A saga definition failed validation.

    Attributes:
        problems: every problem found, one sentence each.
    """

    def __init__(self, name: str, problems: list[str]):
        super().__init__(f"saga definition {name!r} is invalid: " + "; ".join(problems))
        self.problems = tuple(problems)


class UnknownTrigger(SagaError):
    """An operator trigger is not allowed in the saga's current state.

    Attributes:
        saga_id, state, trigger: what was attempted, and where.
    """

    def __init__(self, saga_id: str, state: str, trigger: str):
        super().__init__(f"saga {saga_id}: {trigger!r} is not allowed in state {state}")
        self.saga_id = saga_id
        self.state = state
        self.trigger = trigger
