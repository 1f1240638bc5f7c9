"""Running a casestream service: the process, its settings, migrations wiring, dev stack.

Public API::

    from casestream.service import ServiceProcess, Worker, run_service     # process
    from casestream.service import ServiceSettings, CommonSettings, service_config
    from casestream.service import wiring        # bootstrap helpers: wiring.groundwork(...)
    from casestream.service import ServiceStack, service_port               # dev stack
    from casestream.service import ServiceSpec, discovery                    # what a service declares; entry points

Modules: ``process`` (workers, health routes, SIGTERM), ``settings`` (``CASESTREAM_*``),
``wiring`` (what a bootstrap composes: pools, codec, consumer runtime, relay, readiness),
``gctune``, ``devstack`` (``python -m casestream.service.devstack run``). Every name is
re-exported lazily: the process pulls uvicorn/starlette and wiring every driver, and listing
services (``discovery``) loads none of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from casestream.service import discovery, wiring
    from casestream.service.devstack import ServiceStack, StackError, running_stack, selected_services, service_port
    from casestream.service.gctune import freeze_startup_objects
    from casestream.service.process import ReadinessCheck, ServiceProcess, Worker, configure_logging, run_service
    from casestream.service.settings import (
        CommonSettings,
        ServiceSettings,
        describe_settings_error,
        service_config,
        settings_error,
    )
    from casestream.service.wiring import OutboxSink, read_settings, utc_now
    from casestream.service.spec import ServiceSpec, resolve
    from casestream.service.discovery import command_refs, projection_refs, services

_LAZY = {
    "wiring": "casestream.service.wiring",
    **{name: "casestream.service.process" for name in (
        "ReadinessCheck", "ServiceProcess", "Worker", "configure_logging", "run_service")},
    **{name: "casestream.service.settings" for name in (
        "CommonSettings", "ServiceSettings", "describe_settings_error", "service_config", "settings_error")},
    **{name: "casestream.service.wiring" for name in ("OutboxSink", "read_settings", "utc_now")},
    "freeze_startup_objects": "casestream.service.gctune",
    "ServiceSpec": "casestream.service.spec", "resolve": "casestream.service.spec",
    "discovery": "casestream.service.discovery",
    **{name: "casestream.service.discovery" for name in ("command_refs", "projection_refs", "services")},
    **{name: "casestream.service.devstack" for name in (
        "ServiceStack", "StackError", "running_stack", "selected_services", "service_port")},
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = importlib.import_module(module) if module == f"{__name__}.{name}" else getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
