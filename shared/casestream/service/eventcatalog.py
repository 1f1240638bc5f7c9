"""The installed platform's event catalog: every registered schemas folder and service spec
(entry points ``casestream.schemas`` and ``casestream.services``) as one AsyncAPI 3.0 document.

A team's service appears once its package is installed with those two entry points; nothing
is started, no broker or registry is asked. Its consumers' topics come from
``ServiceSpec.subscriptions``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from casestream.events.asyncapi import asyncapi_document
from casestream.events.catalog import load_catalog
from casestream.service.discovery import schema_folders, services

__all__ = ["installed_asyncapi"]


def installed_asyncapi(*, folders: list[Path] | None = None, specs: dict[str, Any] | None = None,
                       title: str = "casestream event catalog", version: str = "1.0.0") -> dict[str, Any]:
    """The AsyncAPI 3.0 document (a dict) of ``folders`` (default: every installed schemas
    folder) and ``specs`` (default: every installed service), with the catalogs' upcaster chains.

    Raises:
        ConfigError: no schemas folder is installed, an entry point does not resolve, two
            services declare one topic.
        CatalogError: a catalog is malformed, or two folders declare one event type.
    """
    from casestream.errors import ConfigError

    found = schema_folders() if folders is None else list(folders)
    if not found:
        raise ConfigError("no schemas folder installed (entry point group casestream.schemas): "
                          "the event catalog has nothing to show")
    catalog = load_catalog(*found)
    return asyncapi_document(catalog, (services() if specs is None else specs).values(),
                             upcasters=catalog.upcaster_chain(), title=title, version=version)
