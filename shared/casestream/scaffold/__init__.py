"""Starting points for a team: ``casestream new service NAME`` writes a service skeleton.

Public API::

    from casestream.scaffold import service_scaffold, write_service
    write_service(service_scaffold("inspections"), Path("inspections"))

The skeleton has the shape of a casestream service package: ``pyproject.toml`` with its entry
points (``casestream.services``, ``casestream.schemas``, ``casestream.projections``), a
schemas folder (``catalog.toml``, ``envelope.avsc``, a first event), settings, a bootstrap on
``casestream.service.ServiceBuilder``, a migration, the domain, use cases, adapters (HTTP,
PostgreSQL, a rebuildable projection, in-memory doubles) and unit tests that run in memory.
The templates are package data (``templates/service/**/*.tmpl``, ``string.Template``
placeholders such as ``${package}``; ``__package__``, ``__name__``, ``__event__`` in paths).
"""

from casestream.scaffold.service import TEMPLATE_SUFFIX, ServiceScaffold, service_scaffold, write_service

__all__ = ["TEMPLATE_SUFFIX", "ServiceScaffold", "service_scaffold", "write_service"]
