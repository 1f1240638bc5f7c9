"""RelaySettings validation and the standalone relay's answer to a bad option."""

from __future__ import annotations

import pytest

from casestream.errors import ConfigError
from casestream.outbox.relay import RelaySettings
from casestream.outbox.relay.__main__ import main


@pytest.mark.parametrize(("kw", "message"), [
    ({"max_open_batches": 0}, "max_open_batches must be >= 1, got 0"),
    ({"open_wait_s": 0}, "open_wait_s must be > 0"),
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"report_timeout_s": 0}, "report_timeout_s must be > 0 or None"),
])
def test_bad_settings_are_config_errors(kw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        RelaySettings(**kw)


def test_overlap_is_on_by_default() -> None:
    assert RelaySettings().max_open_batches == 2


def test_a_stalled_producer_is_recreated_after_30_s_by_default_and_never_when_disabled() -> None:
    assert RelaySettings().report_timeout_s == 30.0
    assert RelaySettings(report_timeout_s=None).report_timeout_s is None


def test_standalone_relay_reports_a_bad_option_in_one_line_with_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--dsn", "postgresql://x", "--bootstrap", "127.0.0.1:1", "--max-open-batches", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == ("python -m casestream.outbox.relay: error: relay max_open_batches "
                                    "must be >= 1, got 0")
    assert "Traceback" not in err


@pytest.mark.parametrize(("args", "message"), [
    (["--bootstrap", "", "--dsn", "postgresql://x"], "bootstrap.servers is empty"),
    (["--bootstrap", "b:1", "--dsn", "not a url"], "--dsn is not a PostgreSQL URL"),
    (["--bootstrap", "b:1", "--dsn", "postgresql://x", "--log-level", "bogus"],
     "argument --log-level: invalid choice: 'BOGUS'"),
    (["--bootstrap", "b:1", "--dsn", "postgresql://x", "-X", "linger.ms"],
     "argument -X/--producer-property: expected KEY=VALUE"),
    (["--bootstrap", "b:1", "--dsn", "postgresql://x", "-X", "acks=1"],
     "producer setting acks='1' is not allowed"),
    (["--bootstrap", "b:1", "--dsn", "postgresql://x", "-X", "linger.mss=5"],
     'producer properties of relay \'relay\': No such configuration property: "linger.mss"'),
    (["--bootstrap", "b:1", "--dsn", "postgresql://x", "--max-attempts", "0"],
     "argument --max-attempts: expected a count >= 1 or 'unbounded', got '0'"),
])
def test_standalone_relay_bad_values_are_usage_errors(
        capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


def test_relay_attempts_are_bounded_by_default_and_settable() -> None:
    from casestream.outbox.relay import DEFAULT_MAX_ATTEMPTS, relay_retry
    from casestream.service.settings import ServiceSettings

    assert RelaySettings().retry.max_attempts == DEFAULT_MAX_ATTEMPTS
    assert ServiceSettings.model_fields["relay_max_attempts"].default == DEFAULT_MAX_ATTEMPTS
    assert relay_retry(3).max_attempts == 3 and relay_retry(None).max_attempts is None
    with pytest.raises(ConfigError, match="relay max_attempts must be >= 1, got 0"):
        relay_retry(0)
