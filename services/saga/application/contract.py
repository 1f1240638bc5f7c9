"""Start-up check: the saga definition against the event catalog (schemas/catalog.toml).

Every event type the definition emits must be a ``saga`` event of the catalog whose newest
payload has exactly the fields the definition fills; every trigger must be a catalog event
type. A mismatch is a deployment bug and stops the service at start-up instead of producing
events the codec would refuse at the first saga.
"""

from __future__ import annotations

from casestream.events import Catalog
from casestream.errors import ConfigError, UnknownSchemaError
from services.saga.domain.definition import Request, SagaDefinition


def payload_fields(catalog: Catalog, event_type: str) -> tuple[str, ...]:
    """Field names of the newest payload schema of ``event_type``, in schema order.

    Raises:
        UnknownSchemaError: ``event_type`` is not in the catalog.
    """
    return tuple(f["name"] for f in catalog.version(event_type).payload["fields"])


def check_against_catalog(definition: SagaDefinition, catalog: Catalog,
                          aggregate_type: str = "saga") -> None:
    """Raise ConfigError naming every mismatch between ``definition`` and ``catalog``."""
    problems: list[str] = []
    requests: list[Request] = list(definition.requests())
    for req in requests:
        try:
            spec = catalog.subject_for(req.event_type)
        except UnknownSchemaError:
            problems.append(f"{req.event_type} is not in the catalog")
            continue
        if spec.aggregate_type != aggregate_type:
            problems.append(f"{req.event_type} belongs to aggregate {spec.aggregate_type}, "
                            f"not {aggregate_type}")
        declared = {target for target, _ in req.payload}
        schema = set(payload_fields(catalog, req.event_type))
        if declared != schema:
            problems.append(f"{req.event_type}: the saga fills {sorted(declared)}, "
                            f"the schema has {sorted(schema)}")
    for trigger in sorted(definition.triggers() | {definition.start_on}):
        try:
            catalog.subject_for(trigger)
        except UnknownSchemaError:
            problems.append(f"trigger {trigger} is not in the catalog")
    if problems:
        raise ConfigError(f"saga definition {definition.name!r} does not match the catalog: "
                          + "; ".join(problems))
