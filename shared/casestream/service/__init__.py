"""Running a casestream service: the builder, the process, its settings, the dev stack.

Public API::

    from casestream.service import ServiceBuilder                          # a bootstrap's build()
    from casestream.service import ServiceProcess, Worker, run_service     # process
    from casestream.service import ServiceSettings, CommonSettings, service_config, settings_table
    from casestream.service import migrate_service                          # casestream migrate
    from casestream.service import ServiceStack, service_port, replica_env  # dev stack
    from casestream.service import ServiceSpec, discovery                    # what a service declares; entry points
    from casestream.service import TopicSpec                                 # a topic it owns (ServiceSpec.topics)
    from casestream.service import schema_folder                             # another team's schemas folder
    from casestream.service import installed_asyncapi                        # the installed event catalog (AsyncAPI)

Modules: ``builder`` (:class:`ServiceBuilder`: settings, logging, edge, migrations, catalog,
codec, pool, consumers, projections, relay, readiness, closers -> ServiceProcess),
``process`` (workers, health routes, SIGTERM), ``settings`` (``CASESTREAM_*``), ``gctune``,
``devstack`` (``python -m casestream.service.devstack run``). Every name is re-exported
lazily: the process pulls uvicorn/starlette and the builder every driver, and the CLI's
``status`` command needs only the dev-stack ports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from casestream._lazy import lazy_exports

if TYPE_CHECKING:
    from casestream.service import discovery
    from casestream.service.builder import ServiceBuilder, consumer_ready, migrate_service, service_migrations
    from casestream.service.devstack import (
        CONSOLE_HINT,
        ServiceStack,
        StackError,
        console_process,
        replica_env,
        running_stack,
        selected_services,
        service_port,
    )
    from casestream.service.eventcatalog import installed_asyncapi
    from casestream.service.gctune import freeze_startup_objects
    from casestream.service.process import ReadinessCheck, ServiceProcess, Worker, configure_logging, run_service
    from casestream.service.settings import (
        CommonSettings,
        ServiceSettings,
        describe_settings_error,
        read_settings,
        service_config,
        settings_error,
        settings_table,
    )
    from casestream.service.spec import ServiceSpec, TopicSpec, resolve
    from casestream.service.discovery import command_refs, projection_refs, schema_folder, schema_folders, services

_LAZY = {
    "ServiceBuilder": "casestream.service.builder", "service_migrations": "casestream.service.builder",
    "consumer_ready": "casestream.service.builder", "migrate_service": "casestream.service.builder",
    **{name: "casestream.service.process" for name in (
        "ReadinessCheck", "ServiceProcess", "Worker", "configure_logging", "run_service")},
    **{name: "casestream.service.settings" for name in (
        "CommonSettings", "ServiceSettings", "describe_settings_error", "read_settings",
        "service_config", "settings_error", "settings_table")},
    "freeze_startup_objects": "casestream.service.gctune",
    "installed_asyncapi": "casestream.service.eventcatalog",
    "ServiceSpec": "casestream.service.spec", "resolve": "casestream.service.spec",
    "TopicSpec": "casestream.service.spec",
    "discovery": "casestream.service.discovery",
    **{name: "casestream.service.discovery" for name in (
        "command_refs", "projection_refs", "schema_folder", "schema_folders", "services")},
    **{name: "casestream.service.devstack" for name in (
        "ServiceStack", "StackError", "replica_env", "running_stack", "selected_services",
        "service_port", "console_process", "CONSOLE_HINT")},
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_exports(__name__, _LAZY, globals())
