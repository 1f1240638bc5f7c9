"""Schema registry port, its Confluent-API adapter, and an in-memory implementation for tests.

Port :class:`SchemaRegistry` (``typing.Protocol``): register / lookup / get by id / versions of a
subject / compatibility level per subject. Two implementations:

* :class:`ConfluentSchemaRegistry` — over ``confluent_kafka.schema_registry.SchemaRegistryClient``
  (Confluent REST API; here Apicurio Registry 3.x at ``.../apis/ccompat/v7``). Driver errors are
  translated at this boundary: HTTP 404 -> :class:`~casestream.errors.UnknownSchemaError`,
  409 -> :class:`~casestream.errors.IncompatibleSchemaError`, 422 -> ``SchemaError``,
  connection failure / timeout / 5xx / unparseable answer -> :class:`~casestream.errors.RegistryUnavailable`.
* :class:`InMemoryRegistry` — same semantics in a dict (ids shared across subjects for equal
  schemas, like Confluent); no compatibility enforcement.

The adapter caches reads (the driver's id and version caches) for at most ``cache_ttl`` seconds,
drops the cache before every write (a registration always reaches the registry, even for a
subject it saw before) and on every 404, so a subject deleted, a new version or a compatibility
change made by another client is seen within ``cache_ttl``.

Registration is explicit (``casestream schemas register`` or ``EnvelopeCodec.prepare(auto_register=True)``
in dev/test) and idempotent: registering an already registered schema returns its id and
creates no version (Confluent API, "POST /subjects/(subject)/versions"). Production services
only :meth:`~SchemaRegistry.lookup` ("POST /subjects/(subject)", never registers).

A registry may answer a registration with an *existing* version whose schema differs from the
one sent (Apicurio folds schemas equal up to docs, aliases and enum defaults):
:func:`register_catalog` notices and, when the adapter has the optional
``add_version(subject, schema) -> int | None`` (:meth:`ConfluentSchemaRegistry.add_version`:
Apicurio's core API), stores the schema as a distinct version; otherwise it reports ``shared``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from casestream.events.catalog import same_schema, schema_text
from casestream.errors import (
    IncompatibleSchemaError,
    RegistryAuthError,
    RegistryUnavailable,
    SchemaError,
    UnknownSchemaError,
)

__all__ = [
    "ConfluentSchemaRegistry",
    "InMemoryRegistry",
    "RegisteredVersion",
    "RegistrationStep",
    "SchemaRegistry",
    "register_catalog",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisteredVersion:
    """One registered version of a subject: registry version number, global schema id, and the
    schema's JSON (a dict; a string or a list for a subject whose schema is a primitive or a union,
    e.g. a ``-key`` subject of ``"string"``)."""

    subject: str
    version: int
    schema_id: int
    schema: Any


class SchemaRegistry(Protocol):
    """Port to a Confluent-API schema registry. Schemas are Avro schema dicts."""

    def register(self, subject: str, schema: Mapping[str, Any]) -> int:
        """Register ``schema`` under ``subject`` (idempotent) and return its schema id.

        Raises IncompatibleSchemaError (violates the subject's level), SchemaError (invalid),
        RegistryUnavailable.
        """
        ...

    def lookup(self, subject: str, schema: Mapping[str, Any]) -> int:
        """Id of ``schema`` already registered under ``subject``; never registers.

        Raises UnknownSchemaError (subject or schema not registered), RegistryUnavailable.
        """
        ...

    def get_schema(self, schema_id: int) -> dict[str, Any]:
        """The schema dict of ``schema_id``. Raises UnknownSchemaError, RegistryUnavailable."""
        ...

    def subjects(self) -> list[str]:
        """Every registered subject. Raises RegistryUnavailable."""
        ...

    def versions(self, subject: str) -> list[RegisteredVersion]:
        """Every version of ``subject``, ascending; ``[]`` for an unknown subject. Raises RegistryUnavailable."""
        ...

    def set_compatibility(self, subject: str, level: str) -> None:
        """Set the subject-level compatibility (e.g. ``BACKWARD_TRANSITIVE``). Raises RegistryUnavailable."""
        ...

    def get_compatibility(self, subject: str) -> str | None:
        """Subject-level compatibility, or None when the subject has none set. Raises RegistryUnavailable."""
        ...


#: SchemaRegistryClient properties it checks as numbers (a properties file gives strings).
_NUMERIC = {"timeout": float, "max.retries": int, "retries.wait.ms": int, "retries.max.wait.ms": int,
            "cache.capacity": int, "cache.latest.ttl.sec": int}


def _typed(properties: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(properties)
    for key, kind in _NUMERIC.items():
        if isinstance(out.get(key), str):
            try:
                out[key] = kind(out[key])
            except ValueError:
                raise RegistryUnavailable(f"registry property {key}={out[key]!r} is not a number") from None
    return out


def _parse_schema_str(text: str | None, what: str, *, any_schema: bool = False) -> Any:
    """The JSON of a registered schema: an object, or with ``any_schema`` also a string or a list
    (a primitive or a union, Avro spec "Schema Declaration")."""
    try:
        data = json.loads(text or "")
    except (TypeError, ValueError) as e:
        raise RegistryUnavailable(f"{what}: registry answered a schema that is not JSON") from e
    if not isinstance(data, (dict, str, list) if any_schema else dict):
        raise RegistryUnavailable(f"{what}: registry answered a schema that is not a JSON object")
    return data


class ConfluentSchemaRegistry:
    """:class:`SchemaRegistry` over ``SchemaRegistryClient`` (Confluent REST API v7).

    Args:
        url: registry base URL, e.g. ``http://127.0.0.1:18081/apis/ccompat/v7``.
        timeout: per-request timeout, seconds.
        max_retries: client retries on transport errors / 5xx (0 = fail fast; CLI default).
        client: an existing ``SchemaRegistryClient`` to wrap (then url/timeout/max_retries
            only name the registry in messages).
        cache_ttl: seconds a cached read (id of a schema, schema of an id, a subject version)
            is served before the registry is asked again; > 0.
        options: further ``SchemaRegistryClient`` settings: ``basic.auth.user.info``
            (``user:password``), ``bearer.auth.credentials.source`` + ``bearer.auth.token``
            (+ ``bearer.auth.logical.cluster``, which that client requires),
            ``ssl.ca.location`` (a CA bundle to verify the registry's certificate),
            ``ssl.certificate.location``/``ssl.key.location`` (a client certificate); values
            given as strings are converted where the client wants numbers.

    Raises:
        RegistryUnavailable: the client refuses the URL or a property (names it, never a
            secret value).
    """

    def __init__(self, url: str, *, timeout: float = 10.0, max_retries: int = 2, client: Any = None,
                 options: Mapping[str, Any] | None = None, cache_ttl: float = 60.0):
        self.url = url
        if not cache_ttl > 0:
            raise RegistryUnavailable(f"{url}: registry cache_ttl={cache_ttl!r}: must be > 0 seconds")
        self.cache_ttl = float(cache_ttl)
        self._cached_since = time.monotonic()
        if client is None:
            # lazy (start-up cost): the registry client loads on first use; the catalog-only users skip it
            from confluent_kafka.schema_registry import SchemaRegistryClient

            conf = {"url": url, "timeout": timeout, "max.retries": max_retries, "retries.wait.ms": 200,
                    **_typed(options or {})}
            try:
                client = SchemaRegistryClient(conf)
            except (ValueError, TypeError, OSError) as e:  # OSError: an unreadable CA or certificate
                raise RegistryUnavailable(f"{url}: invalid registry URL or settings: {e}") from e
        self._client = client

    def close(self) -> None:
        """Close the HTTP session (call it, or use the adapter as a context manager)."""
        self._client.close()

    def __enter__(self) -> ConfluentSchemaRegistry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _drop_cache(self) -> None:
        self._client.clear_caches()
        self._cached_since = time.monotonic()

    def _fresh(self) -> None:
        """Drop the driver's caches once they are older than ``cache_ttl``."""
        if time.monotonic() - self._cached_since >= self.cache_ttl:
            self._drop_cache()

    @contextmanager
    def _translated(self, what: str, *, write: bool = False) -> Iterator[None]:
        """Map driver errors to casestream.errors (the one translation boundary); keep the cache
        fresh (dropped before a write, after ``cache_ttl``, and on a 404)."""
        if write:
            self._drop_cache()
        else:
            self._fresh()
        try:
            with self._driver_errors(what):
                yield
        except UnknownSchemaError:
            self._drop_cache()
            raise

    @contextmanager
    def _driver_errors(self, what: str) -> Iterator[None]:
        # lazy (start-up cost): the registry client loads on first use; the catalog-only users skip it
        from confluent_kafka.schema_registry.common._httpx_compat import httpx  # httpx or httpx2
        from confluent_kafka.schema_registry.error import OAuthTokenError, SchemaRegistryError

        try:
            yield
        except SchemaRegistryError as e:
            status = e.http_status_code
            msg = f"{self.url}: {what}: {e.error_message} (HTTP {status}, code {e.error_code})"
            if status == 404:
                raise UnknownSchemaError(msg) from e
            if status == 409:
                raise IncompatibleSchemaError(msg) from e
            if status == 422:
                raise SchemaError(msg) from e
            if status in (401, 403):
                raise RegistryAuthError(f"{msg}: the registry refused the credentials (registry client "
                                        "properties basic.auth.user.info, bearer.auth.*)") from e
            raise RegistryUnavailable(msg) from e
        except (httpx.HTTPError, httpx.InvalidURL, OAuthTokenError, OSError) as e:
            raise RegistryUnavailable(f"{self.url}: {what}: registry unreachable: {type(e).__name__}: {e}") from e
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            # response.json() on garbage, or a JSON shape the client did not expect
            raise RegistryUnavailable(f"{self.url}: {what}: unparseable registry answer: {e}") from e

    def _schema(self, schema: Mapping[str, Any]) -> Any:
        # lazy (start-up cost): the registry client loads on first use; the catalog-only users skip it
        from confluent_kafka.schema_registry import Schema

        return Schema(schema_text(schema), "AVRO")

    def register(self, subject: str, schema: Mapping[str, Any]) -> int:
        """See :meth:`SchemaRegistry.register`."""
        with self._translated(f"register {subject}", write=True):
            return int(self._client.register_schema(subject, self._schema(schema)))

    def lookup(self, subject: str, schema: Mapping[str, Any]) -> int:
        """See :meth:`SchemaRegistry.lookup`."""
        with self._translated(f"look up {subject}"):
            return int(self._client.lookup_schema(subject, self._schema(schema)).schema_id)

    def get_schema(self, schema_id: int) -> dict[str, Any]:
        """See :meth:`SchemaRegistry.get_schema`."""
        with self._translated(f"get schema id {schema_id}"):
            text = self._client.get_schema(schema_id).schema_str
        return _parse_schema_str(text, f"{self.url}: schema id {schema_id}")

    def subjects(self) -> list[str]:
        """See :meth:`SchemaRegistry.subjects`."""
        with self._translated("list subjects"):
            out = self._client.get_subjects()
            if not isinstance(out, list):
                raise TypeError(f"expected a JSON list, got {type(out).__name__}")
            return [str(s) for s in out]

    def versions(self, subject: str) -> list[RegisteredVersion]:
        """See :meth:`SchemaRegistry.versions`."""
        try:
            with self._translated(f"list versions of {subject}"):
                numbers = self._client.get_versions(subject)
                if not isinstance(numbers, list):
                    raise TypeError(f"expected a JSON list, got {type(numbers).__name__}")
                numbers = sorted(int(v) for v in numbers)
        except UnknownSchemaError:
            return []
        out = []
        for n in numbers:
            with self._translated(f"get {subject} version {n}"):
                rs = self._client.get_version(subject, n)
                sid, text = int(rs.schema_id), rs.schema.schema_str
            out.append(
                RegisteredVersion(
                    subject=subject,
                    version=n,
                    schema_id=sid,
                    schema=_parse_schema_str(text, f"{self.url}: {subject} version {n}", any_schema=True),
                )
            )
        return out

    def set_compatibility(self, subject: str, level: str) -> None:
        """See :meth:`SchemaRegistry.set_compatibility`. Apicurio Registry answers 409 "A rule
        named 'COMPATIBILITY' already exists" to the loser of two processes setting a subject's
        first rule at once; the write is sent again (it then updates the rule)."""
        for attempt in range(3):
            try:
                with self._translated(f"set compatibility of {subject}", write=True):
                    self._client.set_compatibility(subject_name=subject, level=level)
                return
            except IncompatibleSchemaError as e:
                if "already exists" not in str(e) or attempt == 2:
                    raise
                time.sleep(0.1)

    def add_version(self, subject: str, schema: Mapping[str, Any]) -> int | None:
        """Store ``schema`` as a new version of ``subject`` even when the registry deems it equal
        to an existing one; returns its schema id, or None when this registry cannot.

        Apicurio Registry (>= 3.2) folds a schema into an existing version when both are equal
        after its canonicalization (docs, aliases and enum defaults dropped), on the Confluent API
        whatever ``apicurio.ccompat.use-canonical-hash`` says; its core API
        (``POST /apis/registry/v3/groups/default/artifacts/{subject}/versions``) stores the text
        as a new version with its own content id, which is the id the Confluent API serves
        (``apicurio.ccompat.legacy-id-mode.enabled=false``). Other registries: None.

        Raises:
            IncompatibleSchemaError: the subject's compatibility rule refused it (HTTP 409).
            RegistryUnavailable: the registry did not answer.
        """
        base, sep, _ = self.url.rstrip("/").rpartition("/apis/ccompat/")
        if not sep:
            return None
        # lazy (start-up cost): loaded by `schemas register` only
        from urllib.parse import quote

        from confluent_kafka.schema_registry.common._httpx_compat import httpx  # httpx or httpx2

        url = f"{base}/apis/registry/v3/groups/default/artifacts/{quote(subject, safe='')}/versions"
        self._drop_cache()
        body = {"content": {"content": schema_text(schema), "contentType": "application/json"}}
        try:
            resp = httpx.post(url, json=body, timeout=10.0)
        except httpx.HTTPError as e:
            raise RegistryUnavailable(f"{url}: registry unreachable: {type(e).__name__}: {e}") from e
        if resp.status_code == 409:
            raise IncompatibleSchemaError(f"{url}: {subject}: {resp.text[:300]} (HTTP 409)")
        if resp.status_code == 404:
            return None  # not an Apicurio core API
        if resp.status_code >= 300:
            raise RegistryUnavailable(f"{url}: {subject}: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return int(resp.json()["contentId"])
        except (ValueError, KeyError, TypeError) as e:
            raise RegistryUnavailable(f"{url}: unparseable answer: {resp.text[:300]}") from e

    def get_compatibility(self, subject: str) -> str | None:
        """See :meth:`SchemaRegistry.get_compatibility`."""
        try:
            with self._translated(f"get compatibility of {subject}"):
                return str(self._client.get_compatibility(subject)).upper()
        except UnknownSchemaError:
            return None


class InMemoryRegistry:
    """:class:`SchemaRegistry` in memory, for unit tests and local tools.

    Ids are global and shared by equal schemas (as in Confluent); ``available = False`` makes
    every call raise RegistryUnavailable (to test outage handling). ``calls`` counts calls per
    method name.
    """

    def __init__(self, *, first_id: int = 1, url: str = "memory://registry"):
        self.url = url
        self.available = True
        self.calls: dict[str, int] = {}
        self._next_id = first_id
        self._ids: dict[str, int] = {}
        self._by_id: dict[int, dict[str, Any]] = {}
        self._subjects: dict[str, list[int]] = {}
        self._compat: dict[str, str] = {}

    def _enter(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if not self.available:
            raise RegistryUnavailable(f"{self.url}: registry unavailable")

    @staticmethod
    def _key(schema: Mapping[str, Any]) -> str:
        return json.dumps(schema, sort_keys=True, separators=(",", ":"))

    def add_schema(self, schema_id: int, schema: Mapping[str, Any], subject: str | None = None) -> None:
        """Install ``schema`` under a fixed ``schema_id`` (e.g. ids baked into golden fixtures)."""
        key = self._key(schema)
        self._ids[key] = schema_id
        self._by_id[schema_id] = json.loads(key)
        self._next_id = max(self._next_id, schema_id + 1)
        if subject is not None and schema_id not in self._subjects.setdefault(subject, []):
            self._subjects[subject].append(schema_id)

    def register(self, subject: str, schema: Mapping[str, Any]) -> int:
        """See :meth:`SchemaRegistry.register`."""
        self._enter("register")
        key = self._key(schema)
        sid = self._ids.get(key)
        if sid is None:
            sid = self._next_id
            self._next_id += 1
            self._ids[key] = sid
            self._by_id[sid] = json.loads(key)
        versions = self._subjects.setdefault(subject, [])
        if sid not in versions:
            versions.append(sid)
        return sid

    def lookup(self, subject: str, schema: Mapping[str, Any]) -> int:
        """See :meth:`SchemaRegistry.lookup`."""
        self._enter("lookup")
        sid = self._ids.get(self._key(schema))
        if sid is None or sid not in self._subjects.get(subject, []):
            raise UnknownSchemaError(f"{self.url}: schema not registered under subject {subject}")
        return sid

    def get_schema(self, schema_id: int) -> dict[str, Any]:
        """See :meth:`SchemaRegistry.get_schema`."""
        self._enter("get_schema")
        try:
            return json.loads(json.dumps(self._by_id[schema_id]))
        except KeyError:
            raise UnknownSchemaError(f"{self.url}: schema id {schema_id} not found") from None

    def subjects(self) -> list[str]:
        """See :meth:`SchemaRegistry.subjects`."""
        self._enter("subjects")
        return sorted(self._subjects)

    def versions(self, subject: str) -> list[RegisteredVersion]:
        """See :meth:`SchemaRegistry.versions`."""
        self._enter("versions")
        return [
            RegisteredVersion(subject=subject, version=i, schema_id=sid, schema=json.loads(json.dumps(self._by_id[sid])))
            for i, sid in enumerate(self._subjects.get(subject, []), start=1)
        ]

    def set_compatibility(self, subject: str, level: str) -> None:
        """See :meth:`SchemaRegistry.set_compatibility`."""
        self._enter("set_compatibility")
        self._compat[subject] = level.upper()

    def get_compatibility(self, subject: str) -> str | None:
        """See :meth:`SchemaRegistry.get_compatibility`."""
        self._enter("get_compatibility")
        return self._compat.get(subject)


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrationStep:
    """What :func:`register_catalog` did for one subject version or setting.

    ``action``: ``unchanged`` (already registered), ``registered``, ``would-register`` (dry run),
    ``shared`` (the registry holds this catalog version as one of its versions that also
    stands for another: ``detail`` says which and what follows), ``compatibility-set``,
    ``compatibility-would-set``, ``compatibility-ok``.
    """

    subject: str
    version: int | None
    action: str
    schema_id: int | None = None
    detail: str = ""


def _exact(registered: list[RegisteredVersion], schema: Mapping[str, Any]) -> RegisteredVersion | None:
    """The registered version whose schema is ``schema`` itself (docs, aliases, defaults included)."""
    return next((rv for rv in registered if same_schema(rv.schema, schema)), None)


SHARED_CONSEQUENCE = (
    "consumers still decode both (the envelope carries the event version), but the registry "
    "checks later versions against {twin}'s schema, not this one's, and `schemas check "
    "--registry` sees {twin} only")


def register_catalog(
    catalog: Any, registry: SchemaRegistry, *, subjects: list[str] | None = None, dry_run: bool = False
) -> list[RegistrationStep]:
    """Register every catalog version (ascending) and set each subject's compatibility level.

    Idempotent: a version whose exact schema (docs, aliases and defaults included) is already
    a registered version is not registered again. A registry that answers a registration
    with an *existing* version (it deduplicates by a canonical form that drops docs, aliases or
    enum defaults, as Apicurio does) gets the schema as a distinct version through
    ``registry.add_version`` when it has one (:meth:`ConfluentSchemaRegistry.add_version`);
    otherwise the step is ``shared`` and says what follows. The level is set right after
    version 1 exists, so the registry itself enforces it for later versions.

    Args:
        catalog: a ``casestream.events.catalog.Catalog``.
        registry: the registry port.
        subjects: restrict to these subjects.
        dry_run: only look up; report what would be registered or set.

    Returns:
        One :class:`RegistrationStep` per version and per subject level.

    Raises:
        IncompatibleSchemaError: the registry refused a version (its own compatibility check).
        SchemaError: the registry rejected a schema as invalid.
        RegistryUnavailable: the registry is down or answered garbage.
    """
    steps: list[RegistrationStep] = []
    for spec in catalog.subjects.values():
        if subjects is not None and spec.subject not in subjects:
            continue
        level_done = False
        registered = registry.versions(spec.subject)
        for v in spec.versions:
            sv = catalog.versions[(spec.event_type, v)]
            found = _exact(registered, sv.schema)
            sid: int | None = None
            if found is not None:
                sid = found.schema_id
                steps.append(RegistrationStep(subject=spec.subject, version=v, action="unchanged", schema_id=sid))
            elif dry_run:
                steps.append(RegistrationStep(subject=spec.subject, version=v, action="would-register"))
            else:
                step = _register_one(registry, spec.subject, v, sv.schema, registered)
                registered = registry.versions(spec.subject)
                sid = step.schema_id
                steps.append(step)
            if not level_done and (sid is not None or dry_run):
                level_done = True
                current = registry.get_compatibility(spec.subject) if sid is not None else None
                if current == spec.compatibility:
                    steps.append(RegistrationStep(subject=spec.subject, version=None, action="compatibility-ok",
                                                  detail=current))
                elif dry_run:
                    steps.append(RegistrationStep(subject=spec.subject, version=None, action="compatibility-would-set",
                                                  detail=f"{current or 'unset'} -> {spec.compatibility}"))
                else:
                    registry.set_compatibility(spec.subject, spec.compatibility)
                    steps.append(RegistrationStep(subject=spec.subject, version=None, action="compatibility-set",
                                                  detail=f"{current or 'unset'} -> {spec.compatibility}"))
    return steps


def _register_one(registry: SchemaRegistry, subject: str, v: int, schema: Mapping[str, Any],
                  before: list[RegisteredVersion]) -> RegistrationStep:
    """Register catalog version ``v``; detect and undo a fold into an existing version."""
    sid = registry.register(subject, schema)
    twin = next((rv for rv in before if rv.schema_id == sid), None)
    if twin is None:
        return RegistrationStep(subject=subject, version=v, action="registered", schema_id=sid)
    folded = (f"the registry answered with its version {twin.version} (id {twin.schema_id}), "
              f"an existing schema equal to this one up to docs, aliases or enum defaults")
    add = getattr(registry, "add_version", None)
    distinct = add(subject, schema) if add is not None else None
    if distinct is not None:
        return RegistrationStep(subject=subject, version=v, action="registered", schema_id=distinct,
                                detail=f"as a distinct version ({folded})")
    return RegistrationStep(subject=subject, version=v, action="shared", schema_id=sid,
                            detail=f"{folded}; " + SHARED_CONSEQUENCE.format(twin=f"registry version {twin.version}"))
