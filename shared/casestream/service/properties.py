"""The settings source of the client properties passed through from the environment:
``CASESTREAM_KAFKA_PROP_<NAME>`` and ``CASESTREAM_REGISTRY_PROP_<NAME>``, with secrets read
from files (the rules: :mod:`casestream.kafka.properties`).

A variable ``CASESTREAM_KAFKA_PROP_SASL_MECHANISM=SCRAM-SHA-512`` sets the librdkafka
property ``sasl.mechanism`` (the name lower-cased, ``_`` read as ``.``; librdkafka's
CONFIGURATION.md lists them); ``CASESTREAM_KAFKA_PROP_SASL_PASSWORD_FILE=/run/secrets/kafka``
sets ``sasl.password`` to that file's content (one trailing newline removed), so a secret
never sits in the environment. The registry's variables set properties of
``confluent_kafka.schema_registry.SchemaRegistryClient`` the same way
(``basic.auth.user.info``, ``bearer.auth.token``, ``ssl.ca.location``...).

:class:`ClientPropertiesSource` is the pydantic-settings source that reads them into the
``kafka_properties`` / ``registry_properties`` fields of
:class:`~casestream.service.settings.CommonSettings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from casestream.kafka.properties import PROPERTY_PREFIXES, properties_from_environ

__all__ = ["ClientPropertiesSource"]

class ClientPropertiesSource(PydanticBaseSettingsSource):
    """pydantic-settings source: the ``CASESTREAM_KAFKA_PROP_*`` / ``CASESTREAM_REGISTRY_PROP_*``
    variables as ``kafka_properties`` / ``registry_properties`` dicts (merged over a JSON
    ``CASESTREAM_KAFKA_PROPERTIES`` / ``CASESTREAM_REGISTRY_PROPERTIES`` when both are set)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str] | None = None):
        super().__init__(settings_cls)
        self._environ = os.environ if environ is None else environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        prefix = PROPERTY_PREFIXES.get(field_name.removesuffix("_properties"))
        if prefix is None or not field_name.endswith("_properties"):
            return None, field_name, False
        found = properties_from_environ(prefix, self._environ)
        return (found or None), field_name, True

    def __call__(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind in PROPERTY_PREFIXES:
            field_name = f"{kind}_properties"
            if field_name not in self.settings_cls.model_fields:
                continue
            value, _, _ = self.get_field_value(self.settings_cls.model_fields[field_name], field_name)
            if value:
                out[field_name] = value
        return out
