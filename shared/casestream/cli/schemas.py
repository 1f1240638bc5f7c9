"""``casestream schemas check|register``: the schema catalog's CI check and explicit registration.

Mounted by ``casestream.cli`` as the ``schemas`` group; also runs alone as
``python -m casestream.schemacheck``. Exit codes: 0 compatible / done, 1 incompatible /
registry refused, 2 usage or input error (malformed file, unknown subject or ref, registry
down) — printed as one line naming the file or URL; the traceback only with ``--verbose``.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import click

from casestream.schemacheck.model import EXIT_INCOMPATIBLE, EXIT_INPUT, CheckInputError
from casestream.schemacheck.render import FORMATS, render
from casestream.schemacheck.runner import check_catalog

__all__ = ["main", "schemas"]


def _default_dir() -> str:
    """``./schemas`` of the current directory (a team's repository) when it holds a
    catalog, else the one folder an installed package registers (entry point group
    ``casestream.schemas``).

    Raises:
        click.UsageError: no ``./schemas``, and none or several installed folders (named).
    """
    if Path("schemas", "catalog.toml").is_file():
        return "schemas"
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.service.discovery import schema_folders

    folders = schema_folders()
    if len(folders) != 1:
        listed = ", ".join(map(str, folders)) or "none installed"
        raise click.UsageError(f"no ./schemas/catalog.toml here; pass --schemas-dir "
                               f"(installed schema folders: {listed})")
    return str(folders[0])


def _fail_input(e: BaseException, verbose: bool) -> None:
    if verbose:
        traceback.print_exception(e, file=sys.stderr)
    click.echo(f"error: {e}", err=True)
    sys.exit(EXIT_INPUT)


@click.group("schemas", context_settings={"help_option_names": ["-h", "--help"]})
def schemas() -> None:
    """Check and register the Avro schema catalog (schemas/catalog.toml + .avsc files)."""


@schemas.command("check")
@click.option("--schemas-dir", type=click.Path(file_okay=False), default=None,
              help="Folder holding catalog.toml [default: ./schemas, else the installed one's].")
@click.option("--against", metavar="GIT_REF", default=None,
              help="Fail when a version published at this git ref changed or disappeared (shows the diff).")
@click.option("--registry", metavar="URL", default=None,
              help="Also check against a live Confluent-API registry, e.g. http://127.0.0.1:18081/apis/ccompat/v7.")
@click.option("--subject", "subjects", multiple=True, metavar="SUBJECT",
              help="Only this subject (repeatable), e.g. casestream.case.CaseOpened.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text, json, or github (GitHub Actions annotations).")
@click.option("--verbose", "-v", is_flag=True, help="List every pair checked; tracebacks on errors.")
def check(schemas_dir: str | None, against: str | None, registry: str | None, subjects: tuple[str, ...],
          fmt: str, verbose: bool) -> None:
    """Parse, lint and check every version against earlier ones under the subject's compatibility level.

    Levels have Confluent's meanings (BACKWARD, FORWARD, FULL, their *_TRANSITIVE forms, NONE),
    verdicts come from Apache avro's ReaderWriterCompatibilityChecker plus rules it lacks:
    enum symbols added without an enum default, logical type changes, enum defaults that are
    not symbols, union defaults not matching the first branch. Exit 0 ok, 1 incompatible, 2 bad input.
    """
    folder = schemas_dir or _default_dir()
    try:
        report = check_catalog(folder, subjects=list(subjects) or None, against=against, registry=registry)
    except CheckInputError as e:
        _fail_input(e, verbose)
        return
    except ModuleNotFoundError as e:  # --registry on a base install: no registry client
        if registry is None:
            raise
        _fail_input(CheckInputError(f"--registry needs the service packages ({e.name} is not "
                                    "installed): pip install 'casestream[service]'"), verbose)
        return
    click.echo(render(report, fmt, verbose=verbose))
    sys.exit(report.exit_code)


@schemas.command("register")
@click.option("--schemas-dir", type=click.Path(file_okay=False), default=None,
              help="Folder holding catalog.toml [default: ./schemas, else the installed one's].")
@click.option("--registry", metavar="URL", envvar="CASESTREAM_REGISTRY_URL", required=True,
              help="Confluent-API registry URL [env CASESTREAM_REGISTRY_URL].")
@click.option("--subject", "subjects", multiple=True, metavar="SUBJECT", help="Only this subject (repeatable).")
@click.option("--dry-run", is_flag=True, help="Only look up; print what would be registered or set.")
@click.option("--verbose", "-v", is_flag=True, help="Tracebacks on errors.")
def register(schemas_dir: str | None, registry: str, subjects: tuple[str, ...], dry_run: bool, verbose: bool) -> None:
    """Check the catalog, then register every version (idempotent) and set each subject's level.

    Versions already registered are looked up, not registered again; running it twice
    changes nothing. Exit 0 done, 1 catalog incompatible or registry refused, 2 bad input or
    registry down.
    """
    # lazy (start-up cost): loaded when this command runs, not for every CLI call
    from casestream.errors import ConfigError, IncompatibleSchemaError, RegistryUnavailable, SchemaError
    from casestream.events.registry import ConfluentSchemaRegistry, register_catalog
    from casestream.kafka.properties import environ_properties
    from casestream.schemacheck.runner import load_for_check

    folder = schemas_dir or _default_dir()
    try:
        report = check_catalog(folder, subjects=list(subjects) or None)
        if report.errors:
            click.echo(render(report, "text"))
            click.echo("register: not registering an incompatible catalog", err=True)
            sys.exit(EXIT_INCOMPATIBLE)
        catalog = load_for_check(folder)
        reg = ConfluentSchemaRegistry(registry, timeout=10.0, max_retries=1,
                                      properties=environ_properties("registry", os.environ))
        try:
            steps = register_catalog(catalog, reg, subjects=list(subjects) or None, dry_run=dry_run)
        finally:
            reg.close()
    except CheckInputError as e:
        _fail_input(e, verbose)
        return
    except (RegistryUnavailable, ConfigError) as e:  # ConfigError: a registry property file
        _fail_input(e, verbose)
        return
    except IncompatibleSchemaError as e:
        if verbose:
            traceback.print_exception(e, file=sys.stderr)
        click.echo(f"error: registry refused: {e}", err=True)
        sys.exit(EXIT_INCOMPATIBLE)
    except SchemaError as e:
        _fail_input(e, verbose)
        return
    counts: dict[str, int] = {}
    for s in steps:
        counts[s.action] = counts.get(s.action, 0) + 1
        what = f"v{s.version}" if s.version is not None else "compatibility"
        extra = f" id={s.schema_id}" if s.schema_id is not None else ""
        extra += f" {s.detail}" if s.detail else ""
        click.echo(f"{s.action:24} {s.subject} {what}{extra}")
    summary = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    click.echo(f"schemas register{' (dry run)' if dry_run else ''} against {registry}: {summary}")


def main() -> None:
    """Entry point of ``python -m casestream.schemacheck``."""
    schemas(prog_name="python -m casestream.schemacheck")
