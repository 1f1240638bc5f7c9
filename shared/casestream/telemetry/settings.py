"""Telemetry settings: the standard ``OTEL_*`` variables plus ``CASESTREAM_TELEMETRY_*``.

Read once at service start (``casestream.telemetry.install``). Standard variables
(OpenTelemetry SDK environment specification):

``OTEL_TRACES_EXPORTER``  ``none`` (default), ``console``, ``otlp`` (needs the package
                          ``opentelemetry-exporter-otlp-proto-http``; endpoint and headers from
                          ``OTEL_EXPORTER_OTLP_*``, read by that exporter itself), or
                          ``file`` (casestream extension: JSON lines, see below).
``OTEL_SERVICE_NAME``     overrides the service name resource attribute.
``OTEL_TRACES_SAMPLER``   read by the SDK (default ``parentbased_always_on``).

casestream variables (prefix ``CASESTREAM_TELEMETRY_``):

``TRACES_FILE``   path of a JSON-lines span file (one span per line, appended; several
                  processes may share one file: each line is written with one ``write``).
                  Setting it implies ``OTEL_TRACES_EXPORTER=file`` when that is unset.
``LOG_FORMAT``    ``json`` (default) or ``text`` (the runner's one-line text format).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class TelemetrySettings(BaseSettings):
    """What to export and where; see the module docstring for the variables."""

    model_config = SettingsConfigDict(env_prefix="CASESTREAM_TELEMETRY_", frozen=True,
                                      extra="ignore", populate_by_name=True)

    traces_exporter: str = Field(default="", validation_alias="OTEL_TRACES_EXPORTER",
                                 description="none, console, otlp or file (comma-separated)")
    service_name: str = Field(default="", validation_alias="OTEL_SERVICE_NAME",
                              description="overrides the service name resource attribute")
    traces_file: str = Field("", description="JSON-lines span file; implies OTEL_TRACES_EXPORTER=file")
    log_format: str = Field("json", description="json or text")

    def exporters(self) -> list[str]:
        """The trace exporters to build, lower-case, without ``none`` (may be empty)."""
        names = [n.strip().lower() for n in self.traces_exporter.split(",") if n.strip()]
        if not names and self.traces_file:
            names = ["file"]
        return [n for n in names if n != "none"]
