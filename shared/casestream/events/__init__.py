"""Events: the envelope, the schema catalog, the Avro codec, the schema registry, upcasting.

Public API::

    from casestream.events import Envelope, new_event, load_catalog, open_codec
    from casestream.events import ConfluentSchemaRegistry, InMemoryRegistry, UpcasterChain
    from casestream.events import asyncapi_document          # the catalog as AsyncAPI 3.0

Modules: ``envelope`` (the in-process event), ``catalog`` (schemas/ on disk, composed
message schemas), ``codec`` (Confluent-framed Avro over fastavro), ``registry`` (registry
port, Confluent/Apicurio adapter, in-memory fake), ``upcasting`` (version chains),
``asyncapi`` (the catalog as an AsyncAPI 3.0 document).
The catalog, envelope and upcasting parts import neither fastavro nor a Kafka or
PostgreSQL driver; the codec (fastavro) is re-exported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports

from casestream.events.asyncapi import asyncapi_document
from casestream.events.catalog import (
    Catalog,
    CatalogError,
    SchemaVersion,
    SubjectSpec,
    load_catalog,
    same_schema,
    schema_text,
)
from casestream.events.envelope import DecodedMessage, Envelope, EnvelopeError, new_event
from casestream.events.registry import (
    ConfluentSchemaRegistry,
    InMemoryRegistry,
    SchemaRegistry,
    register_catalog,
)
from casestream.events.upcasting import (
    EventUpcaster,
    UpcastError,
    Upcaster,
    UpcasterChain,
    VersionCatalog,
    derived_event_id,
)

if TYPE_CHECKING:
    from casestream.events.codec import ENVELOPE_FIELDS, EnvelopeCodec, InvalidEventError, open_codec, schema_id_of

# Lazy: the codec imports fastavro, which the catalog-only users (schema check) skip.
_LAZY = {name: "casestream.events.codec"
         for name in ("ENVELOPE_FIELDS", "EnvelopeCodec", "InvalidEventError", "open_codec", "schema_id_of")}

__all__ = [
    "ENVELOPE_FIELDS", "asyncapi_document", "Catalog", "CatalogError", "ConfluentSchemaRegistry", "DecodedMessage",
    "Envelope", "EnvelopeCodec", "EnvelopeError", "EventUpcaster", "InMemoryRegistry",
    "InvalidEventError", "SchemaRegistry", "SchemaVersion", "SubjectSpec", "UpcastError",
    "Upcaster", "UpcasterChain", "VersionCatalog", "derived_event_id", "load_catalog",
    "new_event", "open_codec", "register_catalog", "same_schema", "schema_id_of", "schema_text",
]


__getattr__ = lazy_exports(__name__, _LAZY, globals())
