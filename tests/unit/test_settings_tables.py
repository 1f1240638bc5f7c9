"""README's Configuration table and ``casestream settings`` are
:func:`casestream.service.settings_table` of the settings classes, and every settings field is
documented (``Field(description=...)``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from casestream.service import CommonSettings, ServiceSettings, settings_table
from casestream.service.settings import undocumented_fields
from casestream.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"audit": "AuditSettings", "case": "CaseSettings", "decision": "DecisionSettings",
            "notification": "NotificationSettings", "saga": "SagaSettings"}


def _settings_class(svc: str) -> type[ServiceSettings]:
    import importlib

    return getattr(importlib.import_module(f"services.{svc}.settings"), SERVICES[svc])  # type: ignore[no-any-return]


def test_the_readme_table_is_the_generated_one() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- settings-table CommonSettings[^\n]*-->\n(.*?)\n<!-- end settings-table -->", text, re.S)
    assert m, "README.md: no settings-table block"
    assert m.group(1) == settings_table(CommonSettings, fmt="markdown")


def test_common_settings_are_documented() -> None:
    assert undocumented_fields(CommonSettings) == []


@pytest.mark.parametrize("svc", sorted(SERVICES))
def test_every_service_field_is_documented(svc: str) -> None:
    assert undocumented_fields(_settings_class(svc)) == []


def test_a_field_without_a_description_fails_the_table() -> None:
    from pydantic import Field

    from casestream.service import service_config

    class Probe(ServiceSettings):
        model_config = service_config("CASESTREAM_PROBE_")
        database: str = Field("probe", description="database")
        port: int = 1  # undocumented

    with pytest.raises(ConfigError, match="port"):
        settings_table(Probe)


def test_the_table_names_prefixed_variables_and_defaults() -> None:
    table = settings_table(_settings_class("decision"))
    assert "CASESTREAM_DECISION_POOL_SIZE" in table and "(default 5)" in table
    assert "CASESTREAM_DECISION_CONSUMER_BATCH_SIZE" in table
    assert "CASESTREAM_KAFKA_BOOTSTRAP" not in table


def test_the_settings_command_prints_every_installed_service() -> None:
    from click.testing import CliRunner

    from casestream.cli import main
    from casestream.service import discovery

    result = CliRunner().invoke(main, ["settings"])
    assert result.exit_code == 0, result.output
    assert settings_table(CommonSettings) in result.output
    for name, spec in discovery.services().items():
        assert f"# service {name} ({spec.settings})\n{settings_table(spec.settings_class())}" in result.output
    one = CliRunner().invoke(main, ["settings", "decision", "--markdown"])
    assert one.output == (f"## service decision (services.decision.settings:DecisionSettings)\n\n"
                          f"{settings_table(_settings_class('decision'), fmt='markdown')}\n")
    bad = CliRunner().invoke(main, ["settings", "nope"])
    assert bad.exit_code == 2 and "unknown service nope" in bad.output


@pytest.mark.parametrize("svc", sorted(SERVICES))
def test_each_settings_docstring_points_at_the_command(svc: str) -> None:
    import importlib

    assert f"casestream settings {svc}" in (importlib.import_module(f"services.{svc}.settings").__doc__ or "")


def test_the_settings_command_lists_auth_and_telemetry_and_never_prints_the_key() -> None:
    from click.testing import CliRunner

    from casestream.auth import AuthSettings
    from casestream.auth.tokens import DEV_JWT_KEY
    from casestream.cli import main

    out = CliRunner().invoke(main, ["settings"]).output
    for var in ("CASESTREAM_AUTH_JWT_KEY ", "CASESTREAM_AUTH_JWT_KEY_FILE", "OTEL_TRACES_EXPORTER",
                "CASESTREAM_TELEMETRY_TRACES_FILE", "CASESTREAM_TELEMETRY_LOG_FORMAT"):
        assert var in out, var
    assert DEV_JWT_KEY not in out and "(default the public development key)" in out
    assert undocumented_fields(AuthSettings) == []
