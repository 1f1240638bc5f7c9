"""The operations web console: journeys, sagas, dead letters and flow, and the operators' actions.

Public API::

    from casestream.console import console_app, ConsoleSettings, ConsoleSources
    app = console_app(ConsoleSources.discover(ConsoleSettings(), kafka=..., codec=...), verifier)

``casestream console`` serves it. Modules: ``app`` (routes, auth, tenancy), ``pages``
(HTML), ``sources`` (what is shown: services, consumers, topics; from settings or
discovery), ``settings`` (``CASESTREAM_CONSOLE_*``). Read models and actions are those of
:mod:`casestream.operations`, shared with the CLI.
"""

from __future__ import annotations

from casestream.console.app import console_app
from casestream.console.settings import ConsoleSettings
from casestream.console.sources import ConsoleSources

__all__ = ["console_app", "ConsoleSettings", "ConsoleSources"]
