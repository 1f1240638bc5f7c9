"""Every platform listing comes from discovery: a package registered through entry points
(here a fake one, written to a temporary folder) shows up in ``casestream status``, the
``outbox`` service choices, the dev stack, ``replay --list`` and the command list; a
contributed command that clashes or does not import is one line."""

from __future__ import annotations

import importlib
import json
import socket
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from casestream.cli import main
from casestream.service import devstack, discovery

PKG = "fakewatchpkg"
PORT = 18999

FILES = {
    "__init__.py": '''
        from casestream.service import ServiceSpec

        SERVICE = ServiceSpec(name="watchx", module="fakewatchpkg",
                              settings="fakewatchpkg.settings:WatchSettings",
                              build="fakewatchpkg:build",
                              consumers=("watchx.events", "watchx.alerts"), outbox=True)
        QUIET = ServiceSpec(name="quietx", module="fakewatchpkg.quiet",
                            settings="fakewatchpkg.settings:QuietSettings",
                            build="fakewatchpkg:build", consumers=("quietx.journal",),
                            outbox=False)


        def build(settings=None):
            raise NotImplementedError
    ''',
    "settings.py": f'''
        from pydantic import Field

        from casestream.service import ServiceSettings, service_config


        class WatchSettings(ServiceSettings):
            model_config = service_config("CASESTREAM_WATCHX_")
            database: str = "watchx"
            port: int = Field({PORT}, ge=1, le=65535)


        class QuietSettings(ServiceSettings):
            model_config = service_config("CASESTREAM_QUIETX_")
            database: str = "quietx"
            port: int = Field({PORT + 1}, ge=1, le=65535)
    ''',
    "projection.py": '''
        from casestream.handlers import ProjectionSpec

        PROJECTION = ProjectionSpec(
            name="watchx.feed", description="the watch feed", topics=("outbox.event.watchx",),
            live_consumer="watchx.events", tables=("watch_feed",),
            dsn=lambda: "postgresql://postgres@127.0.0.1:1/watchx",
            create_tables=lambda conn, names: None, registry=lambda names, types: None,
            freshness=lambda conn, names: None)
    ''',
    "commands.py": '''
        import click


        @click.command("watchx")
        def watchx():
            """Watch things."""
            click.echo("watching")


        @click.command("status")
        def status():
            click.echo("impostor")
    ''',
}

ENTRY_POINTS = {
    discovery.SERVICES_GROUP: {"watchx": f"{PKG}:SERVICE", "quietx": f"{PKG}:QUIET"},
    discovery.PROJECTIONS_GROUP: {"watchx.feed": f"{PKG}.projection:PROJECTION"},
    discovery.COMMANDS_GROUP: {"watchx": f"{PKG}.commands:watchx",
                               "brokenx": "no_such_module_xyz.cli:command"},
}


@pytest.fixture()
def fake_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the fake package is installed, as far as discovery can tell."""
    root = tmp_path / PKG
    root.mkdir()
    for name, text in FILES.items():
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == PKG or m.startswith(PKG + ".")]:
        monkeypatch.delitem(sys.modules, name)  # an earlier test's copy, in its own folder

    def entry_points(*, group: str) -> list[EntryPoint]:
        return [EntryPoint(name, value, group) for name, value in ENTRY_POINTS.get(group, {}).items()]

    monkeypatch.setattr(discovery, "entry_points", entry_points)
    for var in ("CASESTREAM_WATCHX_PORT", "CASESTREAM_QUIETX_PORT", devstack.RUN_SERVICES_VAR):
        monkeypatch.delenv(var, raising=False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- discovery itself ------------------------------------------------------------------------

def test_the_fake_package_is_all_that_is_discovered(fake_package: None) -> None:
    assert list(discovery.services()) == ["quietx", "watchx"]
    assert discovery.services()["watchx"].port() == PORT
    assert discovery.services()["watchx"].port({"CASESTREAM_WATCHX_PORT": "4000"}) == 4000


# -- casestream status ---------------------------------------------------------------------

def test_status_rows_are_the_discovered_services_with_every_consumer(
        fake_package: None, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    monkeypatch.setenv("CASESTREAM_WATCHX_PORT", str(port))  # the default URL's port
    result = CliRunner().invoke(main, ["status", "--no-kafka", "--json"])
    assert result.exit_code == 1, result.output  # nothing answers: down
    rows = {r["service"]: r for r in map(json.loads, result.output.splitlines())}
    assert list(rows) == ["quietx", "watchx"]
    assert rows["watchx"]["consumer"] == "watchx.events,watchx.alerts"
    assert [c["name"] for c in rows["watchx"]["consumers"]] == ["watchx.events", "watchx.alerts"]
    table = CliRunner().invoke(main, ["status", "--no-kafka"]).output.splitlines()
    assert table[0].startswith("SERVICE")
    assert table[1].split()[:3] == ["quietx", "down", "quietx.journal"]
    assert table[2].split()[:3] == ["watchx", "down", "watchx.events"]
    assert table[3].split() == ["watchx.alerts", "-", "-", "-"]  # service columns blank


def test_status_url_names_a_discovered_service(fake_package: None) -> None:
    result = CliRunner().invoke(main, ["status", "--no-kafka", "--url", "case=http://x"])
    assert result.exit_code == 2
    assert "SVC one of the discovered services: quietx, watchx" in result.output


# -- casestream outbox ---------------------------------------------------------------------

def test_outbox_services_are_the_discovered_ones_with_an_outbox(
        fake_package: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CASESTREAM_PG_URL", f"postgresql://postgres@127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("CASESTREAM_WATCHX_DATABASE", "watch_db")
    result = CliRunner().invoke(main, ["outbox", "status"])
    assert result.exit_code == 1  # the database does not answer
    assert result.output.startswith("watchx: unavailable (")  # quietx has no outbox
    assert "quietx" not in result.output
    refused = CliRunner().invoke(main, ["outbox", "status", "--service", "quietx"])
    assert refused.exit_code == 2
    assert "'quietx' is not one of the discovered services with an outbox: watchx" in refused.output


def test_outbox_database_url_comes_from_the_services_settings(
        fake_package: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from casestream.cli import outbox

    monkeypatch.setenv("CASESTREAM_PG_URL", "postgresql://u@db.example:5432")
    monkeypatch.setenv("CASESTREAM_WATCHX_DATABASE", "watch_db")
    seen: list[str] = []

    def fake_status(dsn: str) -> Any:
        seen.append(dsn)
        raise outbox.NoOutboxTable("no outbox table")

    monkeypatch.setattr(outbox, "outbox_status", fake_status)
    result = CliRunner().invoke(main, ["outbox", "status", "--service", "watchx"])
    assert result.exit_code == 0, result.output
    from psycopg.conninfo import conninfo_to_dict

    assert [conninfo_to_dict(d) for d in seen] == [
        {"user": "u", "host": "db.example", "port": "5432", "dbname": "watch_db"}]


# -- the dev stack -------------------------------------------------------------------------

def test_devstack_runs_the_discovered_services_by_module(
        fake_package: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert devstack.selected_services() == ["quietx", "watchx"]
    assert devstack.selected_services(env={devstack.RUN_SERVICES_VAR: "watchx"}) == ["watchx"]
    assert devstack.selected_services("watchx, quietx") == ["watchx", "quietx"]
    assert devstack.service_port("watchx") == PORT
    started: list[list[str]] = []

    class FakePopen:
        def __init__(self, cmd: list[str], **kwargs: Any) -> None:
            started.append(cmd)

        def poll(self) -> None:
            return None

    monkeypatch.setattr(devstack.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(devstack, "_port_in_use", lambda port: False)
    provisioned: list[str] = []  # database creation is tested against PostgreSQL elsewhere
    monkeypatch.setattr(devstack.ServiceStack, "_provision",
                        lambda self, spec: provisioned.append(spec.name))
    stack = devstack.ServiceStack(log_dir=tmp_path)
    assert list(stack.specs) == ["quietx", "watchx"]
    stack.start("watchx")
    assert started[0][1:] == ["-m", PKG]
    assert provisioned == ["watchx"]


def test_devstack_refuses_an_unknown_service_naming_the_discovered_ones(
        fake_package: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert devstack.main(["run", "--services", "watchx,nope"]) == 2
    assert "unknown service 'nope'; discovered: quietx, watchx" in capsys.readouterr().err
    with pytest.raises(devstack.ConfigError, match="unknown service 'nope'"):
        devstack.ServiceStack().start_all(["nope"])


def test_devstack_help_names_the_choice_and_the_ready_line_counts() -> None:
    with pytest.raises(SystemExit):
        devstack.main(["run", "--help"])
    assert devstack.ready_message(["a", "b"]).startswith("all 2 services ready (a, b)")
    assert devstack.ready_message(["a"]).startswith("the one service ready (a)")


def test_devstack_help_mentions_the_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        devstack.main(["run", "--help"])
    assert devstack.RUN_SERVICES_VAR in capsys.readouterr().out.replace("\n", " ")


# -- casestream replay ---------------------------------------------------------------------

def test_replay_list_and_names_come_from_discovery(
        fake_package: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from casestream.replay import known_projections, load_projection, status

    assert list(known_projections()) == ["watchx.feed"]
    assert load_projection("watchx.feed").live_consumer == "watchx.events"
    monkeypatch.setattr(status, "kafka_problem", lambda bootstrap: "Kafka down")
    listed = CliRunner().invoke(main, ["replay", "--list"])
    assert listed.exit_code == 1  # Kafka down: said once, after the rows
    assert listed.output.startswith("watchx.feed  — the watch feed")
    unknown = CliRunner().invoke(main, ["replay", "nope"])
    assert unknown.exit_code == 2
    assert "unknown projection 'nope'; known: watchx.feed" in unknown.output


# -- contributed commands ------------------------------------------------------------------

def test_contributed_commands_are_listed_and_run(fake_package: None) -> None:
    help_text = CliRunner().invoke(main, ["--help"]).output
    assert f"Watch things. (from {PKG}.commands)" in help_text
    assert "(from no_such_module_xyz.cli) not available" in help_text
    assert "reconcile" not in help_text  # only installed entry points: here the fake ones
    ran = CliRunner().invoke(main, ["watchx"])
    assert ran.exit_code == 0 and ran.output.endswith("watching\n")


def test_a_contributed_command_clashing_with_a_built_in_is_refused_in_one_line(
        fake_package: None, monkeypatch: pytest.MonkeyPatch) -> None:
    clashing = {**ENTRY_POINTS[discovery.COMMANDS_GROUP], "status": f"{PKG}.commands:status"}
    monkeypatch.setitem(ENTRY_POINTS, discovery.COMMANDS_GROUP, clashing)
    result = CliRunner().invoke(main, ["status", "--help"])
    assert result.exit_code == 0
    refused = [line for line in result.output.splitlines() if "clashes" in line]
    assert len(refused) == 1 and "'status'" in refused[0]
    assert "impostor" not in result.output and "Per service" in result.output


def test_a_contributed_command_that_does_not_import_is_one_line_exit_2(fake_package: None) -> None:
    result = CliRunner().invoke(main, ["brokenx"])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "no_such_module_xyz" in errors[0]
    assert "Traceback" not in result.output


def test_the_suite_registers_reconcile_as_a_contributed_command() -> None:
    assert discovery.command_refs()["reconcile"] == "services.saga.adapters.cli_reconcile:reconcile"
    assert isinstance(main.get_command(click.Context(main), "reconcile"), click.Command)


# -- casestream dlq list -------------------------------------------------------------------

def test_dlq_list_without_consumer_names_discovered_consumers_and_dlq_topics(
        fake_package: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from casestream.cli import dlq

    monkeypatch.setattr(dlq, "_dlq_counts", lambda bootstrap: {"watchx.events": 3, "orphan.x": 1})
    result = CliRunner().invoke(main, ["dlq", "--bootstrap", "127.0.0.1:1", "list"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()[:-1]}
    assert list(lines) == ["quietx.journal", "watchx.events", "watchx.alerts", "orphan.x"]
    assert lines["watchx.events"].split()[1] == "3"
    assert lines["watchx.alerts"].split()[1] == "0" and "no dead-letter topic yet" in lines["watchx.alerts"]
    assert "not a consumer of a discovered service" in lines["orphan.x"]
    as_json = CliRunner().invoke(main, ["dlq", "--bootstrap", "127.0.0.1:1", "list", "--json"])
    assert json.loads(as_json.output.splitlines()[1]) == {
        "consumer": "watchx.events", "dead_letters": 3, "topic": "watchx.events.dlq",
        "discovered": True}


# -- one context ---------------------------------------------------------------------------

def test_the_commands_share_one_context_with_one_settings_object() -> None:
    from casestream.cli.context import CliContext, cli_context

    seen: list[CliContext] = []

    @click.group()
    @click.pass_context
    def root(ctx: click.Context) -> None:
        seen.append(cli_context(ctx))

    @root.command()
    def sub() -> None:
        seen.append(cli_context())
        seen.append(cli_context())

    assert CliRunner().invoke(root, ["sub"]).exit_code == 0
    assert seen[0] is seen[1] is seen[2]
    assert seen[0].settings is seen[0].settings
    given = CliContext(decoder=object())
    assert given.codec() is given.decoder


def test_a_contributed_command_missing_a_third_party_module_names_the_extra(
        fake_package: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / PKG / "needy.py").write_text("import no_such_driver_xyz\n")
    importlib.invalidate_caches()
    needy = {**ENTRY_POINTS[discovery.COMMANDS_GROUP], "needy": f"{PKG}.needy:command"}
    monkeypatch.setitem(ENTRY_POINTS, discovery.COMMANDS_GROUP, needy)
    result = CliRunner().invoke(main, ["needy"])
    assert result.exit_code == 2
    assert "'needy' needs the service packages (no_such_driver_xyz is not installed)" in result.output
