"""Check the files as written against a live Confluent-API registry (``--registry URL``).

Per subject of the layout:

* every version registered there must equal one version file (canonical form: names fully
  qualified, attribute order and whitespace ignored, like the registry's ``normalize``), else
  ``registry-version-unknown`` (a published file was edited, or someone registered by hand);
* every version file not yet registered is checked, under the subject's level, against the
  registered versions in registry order (what the registry will do on registration, plus the
  gate's stricter rules); a problem the local history check already reported for the same file
  and field is not reported again (one finding per problem);
* a subject-level compatibility on the registry other than the configured one is a warning
  (``compatibility-level-mismatch``).

Authentication and TLS (:class:`RegistryOptions`) use the client settings of
``confluent_kafka.schema_registry.SchemaRegistryClient`` (``basic.auth.user.info``,
``bearer.auth.credentials.source = STATIC_TOKEN`` + ``bearer.auth.token``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``);
the client comes with the ``service`` extra. Registry errors (down, refusing, garbage answers)
are :class:`CheckInputError` naming the URL (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from casestream.errors import RegistryUnavailable, SchemaError
from casestream.schemacheck.compat import canonical, check_pair, pairs_for_level, parse_avro
from casestream.schemacheck.layout import Layout, Subject
from casestream.schemacheck.model import CheckInputError, Finding, finding_for

__all__ = ["RegistryOptions", "compare_to_registry", "open_registry"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryOptions:
    """How to reach a registry.

    Attributes:
        url: base URL, e.g. ``http://127.0.0.1:18081/apis/ccompat/v7``.
        basic_auth: ``"user:password"`` (HTTP basic), or "".
        bearer_token: a static bearer token (``Authorization: Bearer ...``), or "".
        ca_file: PEM bundle to verify the registry's TLS certificate, or "" (system store).
        cert_file, key_file: client certificate and key (PEM) for mutual TLS, or "".
        timeout: per-request timeout, seconds.
    """

    url: str
    basic_auth: str = ""
    bearer_token: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    timeout: float = 5.0

    def client_config(self) -> dict[str, Any]:
        """``SchemaRegistryClient`` settings (fail fast: no retries)."""
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout, "max.retries": 0}
        if self.basic_auth:
            conf["basic.auth.user.info"] = self.basic_auth
        if self.bearer_token:
            conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
            conf["bearer.auth.token"] = self.bearer_token
            # required by the client for a static token; Confluent Cloud values, unused elsewhere
            conf["bearer.auth.logical.cluster"] = "-"
            conf["bearer.auth.identity.pool.id"] = "-"
        if self.ca_file:
            conf["ssl.ca.location"] = self.ca_file
        if self.cert_file:
            conf["ssl.certificate.location"] = self.cert_file
        if self.key_file:
            conf["ssl.key.location"] = self.key_file
        return conf


def open_registry(registry: Any) -> Any:
    """A SchemaRegistry from a URL or :class:`RegistryOptions`, or the object itself.

    Raises:
        CheckInputError: bad settings (names the URL).
        ModuleNotFoundError: the ``service`` extra (confluent-kafka) is not installed.
    """
    if isinstance(registry, str):
        registry = RegistryOptions(url=registry)
    if isinstance(registry, RegistryOptions):
        from casestream.events.registry import ConfluentSchemaRegistry

        conf = registry.client_config()
        url = conf.pop("url")
        try:
            return ConfluentSchemaRegistry(url, timeout=conf.pop("timeout"), max_retries=conf.pop("max.retries"),
                                           options=conf)
        except RegistryUnavailable as e:
            raise CheckInputError(str(e)) from e  # message starts with the URL
    return registry


def _key(f: Finding) -> tuple[str, str, str, str, str]:
    direction = f.message.partition(":")[0]
    return (f.rule, f.subject, f.path, f.file, direction)


def compare_to_registry(
    layout: Layout, registry: Any, *, subjects: list[str] | None = None, already: Sequence[Finding] = ()
) -> list[Finding]:
    """Findings for the layout's subjects (or ``subjects``) against the registry.

    ``already``: findings of the local check; a registry finding with the same rule, subject,
    field, file and direction is dropped.

    Raises:
        CheckInputError: the registry is unreachable or answers garbage (names the URL).
    """
    reg = open_registry(registry)
    url = getattr(reg, "url", str(registry))
    wanted = subjects if subjects is not None else list(layout.subjects)
    seen = {_key(f) for f in already}
    findings: list[Finding] = []
    try:
        for name in wanted:
            for f in _subject(layout.subjects[name], reg, url):
                if _key(f) not in seen:
                    seen.add(_key(f))
                    findings.append(f)
    except (RegistryUnavailable, SchemaError) as e:
        raise CheckInputError(str(e) if str(e).startswith(url) else f"{url}: {e}") from e
    finally:
        if reg is not registry:
            reg.close()
    return findings


def same_schema(a: Any, b: Any) -> bool:
    """Equal up to layout (:func:`~casestream.schemacheck.compat.canonical`)."""
    return bool(canonical(a) == canonical(b))


def _subject(subject: Subject, reg: Any, url: str) -> list[Finding]:
    out: list[Finding] = []
    registered = reg.versions(subject.name)
    for rv in registered:
        if not any(same_schema(v.schema, rv.schema) for v in subject.versions):
            out.append(finding_for(
                "registry-version-unknown", subject=subject.name,
                versions=f"registry v{rv.version} (id {rv.schema_id})", path="",
                message=f"{url} holds {subject.name} version {rv.version} (id {rv.schema_id}), "
                        f"which matches no version file",
                file=subject.versions[-1].file))
    if registered:
        level = reg.get_compatibility(subject.name)
        if level is not None and level != subject.level:
            out.append(finding_for(
                "compatibility-level-mismatch", subject=subject.name, versions="", path="",
                message=f"{url} has level {level} for {subject.name}; the configuration says {subject.level}",
                severity="warning"))
    try:
        history = [parse_avro(rv.schema, references=subject.references) for rv in registered]
    except Exception as e:  # noqa: BLE001 - a registered schema this parser rejects
        raise CheckInputError(f"a registered version of {subject.name} does not parse: {e}", target=url) from e
    labels = [f"registry v{rv.version} (id {rv.schema_id})" for rv in registered]
    for v in subject.versions:
        if any(same_schema(v.schema, rv.schema) for rv in registered):
            continue
        candidate = parse_avro(v.schema, references=subject.references)
        schemas = [*history, candidate]
        names = [*labels, v.label]
        for pair in pairs_for_level(subject.level, len(schemas) - 1):
            issues = check_pair(schemas[pair.reader], schemas[pair.writer],
                                reader_is_new=pair.direction == "BACKWARD",
                                labels=(names[pair.reader], names[pair.writer]))
            old = min(pair.reader, pair.writer)
            for issue in issues:
                out.append(finding_for(
                    issue.rule, subject=subject.name, versions=f"{names[old]}->{v.label}", path=issue.path,
                    message=f"{pair.direction}: {issue.message}", mode=subject.level, file=v.file, text=v.text))
        history.append(candidate)
        labels.append(f"{v.label} (unregistered)")
    return out
