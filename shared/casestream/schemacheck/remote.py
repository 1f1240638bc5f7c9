"""Check the working tree against a live Confluent-API registry (``--registry URL``).

Per catalog subject:

* every version registered there must equal one local version file (else
  ``registry-version-unknown``: a published file was edited, or someone registered by hand);
* every local version not yet registered is checked, under the catalog's level, against the
  registered versions in registry order (exactly what the registry will do on registration,
  plus this tool's extra rules);
* the subject-level compatibility on the registry should equal the catalog's
  (``compatibility-level-mismatch``, a warning: ``casestream schemas register`` sets it).

Registry errors (down, garbage answers) are :class:`CheckInputError` naming the URL (exit 2).
"""

from __future__ import annotations

import os

from typing import Any

from casestream.errors import ConfigError, RegistryUnavailable, SchemaError
from casestream.events.catalog import Catalog, same_schema
from casestream.events.registry import ConfluentSchemaRegistry
from casestream.kafka.properties import environ_properties
from casestream.schemacheck.compat import check_pair, pairs_for_level, parse_avro
from casestream.schemacheck.model import CheckInputError, Finding, finding_for

__all__ = ["compare_to_registry", "open_registry"]


def open_registry(registry: Any) -> Any:
    """A SchemaRegistry from a URL (fail-fast client: 5 s timeout, no retries; the client
    properties of CASESTREAM_REGISTRY_PROPERTIES_FILE / CASESTREAM_REGISTRY_PROP_*, e.g.
    authentication) or the object itself."""
    if isinstance(registry, str):
        try:
            return ConfluentSchemaRegistry(registry, timeout=5.0, max_retries=0,
                                           properties=environ_properties("registry", os.environ))
        except (RegistryUnavailable, ConfigError) as e:
            raise CheckInputError(str(e)) from e  # message starts with the URL
    return registry


def compare_to_registry(
    catalog: Catalog, registry: Any, *, display: str, subjects: list[str] | None = None
) -> list[Finding]:
    """Findings for the catalog (or ``subjects``) against the registry's subjects.

    Raises:
        CheckInputError: the registry is unreachable or answers garbage (names the URL).
    """
    reg = open_registry(registry)
    url = getattr(reg, "url", str(registry))
    wanted = subjects if subjects is not None else list(catalog.subjects)
    findings: list[Finding] = []
    try:
        remote_subjects = set(reg.subjects())
        for subject in wanted:
            findings.extend(_subject(catalog, reg, subject, display, url))
        for s in sorted(remote_subjects):
            if s.startswith(catalog.namespace + ".") and s not in catalog.subjects and subjects is None:
                findings.append(
                    finding_for(
                        "registry-subject-unknown", subject=s, versions="", path="",
                        message=f"{url} has subject {s}, which {display}/catalog.toml does not name",
                        severity="warning",
                    )
                )
    except (RegistryUnavailable, SchemaError) as e:
        raise CheckInputError(str(e) if str(e).startswith(url) else f"{url}: {e}") from e
    finally:
        close = getattr(reg, "close", None)
        if close is not None and isinstance(registry, str):
            close()
    return findings


def _subject(catalog: Catalog, reg: Any, subject: str, display: str, url: str) -> list[Finding]:
    spec = catalog.subjects[subject]
    out: list[Finding] = []
    registered = reg.versions(subject)
    local = [catalog.versions[(spec.event_type, v)] for v in spec.versions]
    for rv in registered:
        if not any(same_schema(sv.schema, rv.schema) for sv in local):
            out.append(
                finding_for(
                    "registry-version-unknown", subject=subject, versions=f"registry v{rv.version} (id {rv.schema_id})",
                    path="", message=f"{url} holds {subject} version {rv.version} (id {rv.schema_id}), "
                    f"which matches no version file",
                )
            )
    if registered:
        level = reg.get_compatibility(subject)
        if level != spec.compatibility:
            out.append(
                finding_for(
                    "compatibility-level-mismatch", subject=subject, versions="", path="",
                    message=f"{url} has level {level or 'unset (global default)'} for {subject}; "
                    f"the catalog says {spec.compatibility}",
                    severity="warning",
                )
            )
    history = [parse_avro(rv.schema) for rv in registered]
    labels = [f"registry v{rv.version} (id {rv.schema_id})" for rv in registered]
    for sv in local:
        if any(same_schema(sv.schema, rv.schema) for rv in registered):
            continue
        candidate = parse_avro(sv.schema)
        schemas = [*history, candidate]
        names = [*labels, f"v{sv.version}"]
        new = len(schemas) - 1
        for pair in pairs_for_level(spec.compatibility, new):
            issues = check_pair(
                schemas[pair.reader], schemas[pair.writer],
                reader_is_new=pair.direction == "BACKWARD", labels=(names[pair.reader], names[pair.writer]),
            )
            old = min(pair.reader, pair.writer)
            for issue in issues:
                out.append(
                    finding_for(
                        issue.rule, subject=subject, versions=f"{names[old]}->v{sv.version}", path=issue.path,
                        message=f"{pair.direction}: {issue.message}", mode=spec.compatibility,
                        file=f"{display}/{sv.path}", text=sv.text,
                    )
                )
        history.append(candidate)
        labels.append(f"v{sv.version} (unregistered)")
    return out
