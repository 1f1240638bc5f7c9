"""``ConfluentSchemaRegistry.set_compatibility`` when another process creates the subject's
rule at the same moment: Apicurio Registry answers the loser 409 "A rule named
'COMPATIBILITY' already exists"; the write is sent again. Any other 409 is raised at once."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from casestream.errors import IncompatibleSchemaError
from casestream.events.registry import ConfluentSchemaRegistry

RACE = "A rule named 'COMPATIBILITY' already exists."


class Client:
    def __init__(self, errors: list[SchemaRegistryError]) -> None:
        self.errors, self.calls = errors, []

    def set_compatibility(self, subject_name: str, level: str) -> None:
        self.calls.append((subject_name, level))
        if self.errors:
            raise self.errors.pop(0)

    def clear_caches(self) -> None:
        pass


def _registry(client: Client) -> ConfluentSchemaRegistry:
    return ConfluentSchemaRegistry("http://registry.invalid/apis/ccompat/v7", client=client)


def test_the_rule_created_meanwhile_is_written_again() -> None:
    client = Client([SchemaRegistryError(409, 0, RACE)])
    _registry(client).set_compatibility("s", "BACKWARD")
    assert client.calls == [("s", "BACKWARD"), ("s", "BACKWARD")]


def test_another_conflict_is_raised_at_once() -> None:
    client = Client([SchemaRegistryError(409, 0, "incompatible")])
    with pytest.raises(IncompatibleSchemaError):
        _registry(client).set_compatibility("s", "BACKWARD")
    assert len(client.calls) == 1


def test_a_race_that_does_not_end_is_raised() -> None:
    client = Client([SchemaRegistryError(409, 0, RACE)] * 5)
    with pytest.raises(IncompatibleSchemaError, match="already exists"):
        _registry(client).set_compatibility("s", "BACKWARD")
    assert len(client.calls) == 3
