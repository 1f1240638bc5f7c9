"""A bad environment variable is one line naming the variable, never a traceback: in a
service's start-up (``casestream.service.read_settings``) and in every ``casestream`` command."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from casestream.service import read_settings
from casestream.cli import main
from casestream.errors import ConfigError
from casestream.service.settings import CommonSettings
from services.audit.settings import AuditSettings
from services.case.settings import CaseSettings


@pytest.mark.parametrize(("variable", "value", "settings", "reason"), [
    ("CASESTREAM_CASE_PORT", "abc", CaseSettings, "valid integer"),
    ("CASESTREAM_AUDIT_REQUEST_DEADLINE_S", "-1", AuditSettings, "greater than"),
    ("CASESTREAM_KAFKA_SESSION_TIMEOUT_MS", "abc", CaseSettings, "valid integer"),
    ("CASESTREAM_CONSUMER_CONCURRENCY", "0", AuditSettings, "greater than or equal to 1"),
    ("CASESTREAM_GC_FREEZE", "sometimes", CommonSettings, "valid boolean"),
    ("CASESTREAM_AUTO_REGISTER_SCHEMAS", "maybe", CommonSettings, "valid boolean"),
    ("CASESTREAM_LOG_LEVEL", "LOUD", CommonSettings, "not a logging level"),
    ("CASESTREAM_PG_URL", "garbage", CommonSettings, "not a PostgreSQL URL"),
])
def test_read_settings_names_the_variable_and_its_value(
        monkeypatch: pytest.MonkeyPatch, variable: str, value: str, settings: type,
        reason: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as e:
        read_settings(settings, "svc")
    message = str(e.value)
    assert f"{variable}={value!r}" in message and reason in message
    assert "\n" not in message and e.value.__cause__ is None


def test_log_level_is_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASESTREAM_LOG_LEVEL", "debug")
    assert CommonSettings().log_level == "DEBUG"


@pytest.mark.parametrize(("variable", "value", "args"), [
    ("CASESTREAM_CASE_PORT", "abc", ["status", "--no-kafka"]),
    ("CASESTREAM_AUTH_TOKEN_TTL_S", "abc", ["token", "--tenant", "acme"]),
])
def test_cli_commands_report_a_bad_variable_in_one_line_with_exit_2(
        monkeypatch: pytest.MonkeyPatch, variable: str, value: str, args: list[str]) -> None:
    monkeypatch.setenv(variable, value)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert variable in result.output and "Traceback" not in result.output
    assert not isinstance(result.exception, (ValueError, ConfigError))  # handled, not raised
