"""``casestream schemas check|rules|register``: the schema gate in CI, its rules, explicit registration.

Mounted by ``casestream.cli`` as the ``schemas`` group; also runs alone as
``python -m casestream.schemacheck``. ``check`` finds the repository's configuration
(:func:`_find_config`) and runs :func:`casestream.schemacheck.check_repository`. Exit codes:
0 compatible / done, 1 incompatible / registry refused, 2 usage or input error (malformed
file or configuration, unknown subject, rule or ref, registry down) — rendered in the chosen
``--format`` and as one line on stderr naming the file or URL; the traceback only with
``--verbose``.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any

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
    """Check Avro schema compatibility in any repository (casestream-schemas.toml) and register a catalog."""


def _find_config(config: str | None, schemas_dir: str | None) -> tuple[Any, str]:
    """(configuration, root) of this run; see :func:`check` for the order.

    Raises:
        CheckInputError: no configuration found, or it does not load (exit 2).
    """
    from casestream.schemacheck.config import CONFIG_FILE, folder_config, load_config

    if config:
        return load_config(config), str(Path(config).parent)
    if schemas_dir:
        if Path(schemas_dir, "catalog.toml").is_file():
            return _catalog(schemas_dir)
        if not Path(schemas_dir).is_dir():
            what = "is a file, not a folder of .avsc files" if Path(schemas_dir).exists() else "schemas folder not found"
            raise CheckInputError(what, target=schemas_dir)
        return folder_config(schemas_dir.rstrip("/") or "."), "."
    if Path(CONFIG_FILE).is_file():
        return load_config(CONFIG_FILE), "."
    if Path("pyproject.toml").is_file():
        import tomllib

        try:
            has = "schemas" in tomllib.loads(Path("pyproject.toml").read_text()).get("tool", {}).get("casestream", {})
        except (tomllib.TOMLDecodeError, OSError, AttributeError):
            has = False
        if has:
            return load_config("pyproject.toml"), "."
    if Path("schemas", "catalog.toml").is_file():
        return _catalog("schemas")
    # Never an installed package's folder: a team's CI run in the wrong folder (or with a
    # misnamed configuration) would pass by checking casestream's own bundled catalog.
    from casestream.service.discovery import schema_folders

    listed = ", ".join(map(str, schema_folders())) or "none"
    raise CheckInputError(
        f"no {CONFIG_FILE}, no [tool.casestream.schemas] in pyproject.toml and no ./schemas/catalog.toml "
        f"in {Path.cwd()}: add a {CONFIG_FILE} (see casestream schemas check --help) or pass --config / "
        f"--schemas-dir (installed schema folders: {listed})")


def _catalog(folder: str) -> tuple[Any, str]:
    from casestream.schemacheck.config import GateConfig

    path = Path(folder)
    parent = str(path.parent)
    return GateConfig(origin=f"{folder.rstrip('/')}/catalog.toml", base="" if parent == "." else parent,
                      catalogs=(path.name or ".",)), parent


def _registry_options(url: str | None, basic: str | None, bearer: str | None, ca: str | None, cert: str | None,
                      key: str | None) -> Any:
    if url is None:
        if basic or bearer or ca or cert or key:
            raise CheckInputError("--registry-* options need --registry URL")
        return None
    from casestream.schemacheck.remote import RegistryOptions

    if basic and bearer:
        raise CheckInputError("give --registry-basic-auth or --registry-bearer-token, not both", target=url)
    return RegistryOptions(url=url, basic_auth=basic or "", bearer_token=bearer or "", ca_file=ca or "",
                           cert_file=cert or "", key_file=key or "")


_CHECK_HELP = """Check every subject's versions against each other under its compatibility level.

\b
Where the subjects come from (first found):
  --config FILE              a casestream-schemas.toml, or a pyproject.toml with [tool.casestream.schemas]
  --schemas-dir DIR          DIR/catalog.toml (casestream layout), else every DIR/**/<Name>.v<N>.avsc
                             (and <Name>.avsc) as a subject named by its record (RecordNameStrategy)
  ./casestream-schemas.toml, ./pyproject.toml [tool.casestream.schemas], ./schemas/catalog.toml;
  none of them: exit 2 (an installed package's folder is checked only when named by --schemas-dir).

\b
casestream-schemas.toml:
  compatibility = "BACKWARD"              default level (NONE, BACKWARD, FORWARD, FULL, *_TRANSITIVE)
  naming_strategy = "RecordNameStrategy"  or TopicNameStrategy, TopicRecordNameStrategy
  references = ["avro/common/*.avsc"]     named types schemas reference across files
  ignore = ["RULE", "RULE:SUBJECT"]       waived rules
  upcasters = "pkg.module:function"       declares the upcaster chain (upcaster-* rules apply)
  python_path = ["src"]                   folders it is imported from besides the installed packages
                                          (default ["."]: the configuration's folder)
  [[folders]]  path = "avro"  pattern = "{name}.v{version}.avsc"  topic = "orders"
  [subjects."orders-value"]  files = ["a/v1.avsc", "a/v2.avsc"]  compatibility = "FULL"

Verdicts follow Apache Avro's SchemaCompatibility (the registry's checker), plus stricter rules
with their own ids (casestream schemas rules lists every rule; waive one with --ignore).
Exit 0 compatible, 1 incompatible, 2 bad input (in every --format).
"""


@schemas.command("check", help=_CHECK_HELP)
@click.option("--config", "config", type=click.Path(), default=None,
              help="casestream-schemas.toml or pyproject.toml [default: found in the current directory].")
@click.option("--schemas-dir", type=click.Path(), default=None,
              help="A catalog.toml folder, or a folder of .avsc files.")
@click.option("--against", metavar="GIT_REF", default=None,
              help="Fail when a version published at this git ref changed or disappeared (shows the diff); "
                   "a shallow clone fetches <remote>/<branch> or says which git fetch to run.")
@click.option("--registry", metavar="URL", default=None,
              help="Also compare with a live Confluent-API registry, e.g. http://127.0.0.1:18081/apis/ccompat/v7.")
@click.option("--registry-basic-auth", metavar="USER:PASSWORD", envvar="CASESTREAM_REGISTRY_BASIC_AUTH",
              default=None, help="HTTP basic auth for --registry [env CASESTREAM_REGISTRY_BASIC_AUTH].")
@click.option("--registry-bearer-token", metavar="TOKEN", envvar="CASESTREAM_REGISTRY_BEARER_TOKEN", default=None,
              help="Bearer token for --registry [env CASESTREAM_REGISTRY_BEARER_TOKEN].")
@click.option("--registry-ca-file", metavar="PEM", default=None, help="CA bundle for a TLS registry.")
@click.option("--registry-cert-file", metavar="PEM", default=None, help="Client certificate (mutual TLS).")
@click.option("--registry-key-file", metavar="PEM", default=None, help="Client key (mutual TLS).")
@click.option("--subject", "subjects", multiple=True, metavar="SUBJECT", help="Only this subject (repeatable).")
@click.option("--ignore", "ignore", multiple=True, metavar="RULE[:SUBJECT]",
              help="Waive a rule, everywhere or for one subject (repeatable).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text, json, github (Actions annotations), junit (JUnit XML), sarif (SARIF 2.1.0).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the report to this file instead of stdout.")
@click.option("--python-path", "python_path", multiple=True, metavar="DIR",
              help="Also import the upcasters module from this folder (repeatable; e.g. src).")
@click.option("--verbose", "-v", is_flag=True, help="List every pair checked; tracebacks on errors.")
def check(config: str | None, schemas_dir: str | None, against: str | None, registry: str | None,
          registry_basic_auth: str | None, registry_bearer_token: str | None, registry_ca_file: str | None,
          registry_cert_file: str | None, registry_key_file: str | None, subjects: tuple[str, ...],
          ignore: tuple[str, ...], fmt: str, output: str | None, python_path: tuple[str, ...],
          verbose: bool) -> None:
    from casestream.schemacheck.render import render_error
    from casestream.schemacheck.runner import check_repository

    def emit(text: str) -> None:
        if output:
            Path(output).write_text(text + "\n", encoding="utf-8")
        else:
            click.echo(text)

    try:
        try:
            options = _registry_options(registry, registry_basic_auth, registry_bearer_token, registry_ca_file,
                                        registry_cert_file, registry_key_file)
            gate_config, root = _find_config(config, schemas_dir)
            report = check_repository(gate_config, root=root, subjects=list(subjects) or None, against=against,
                                      registry=options, ignore=ignore, python_path=python_path)
        except ModuleNotFoundError as e:
            if registry is not None and (e.name or "").startswith(("confluent_kafka", "httpx", "authlib")):
                raise CheckInputError(f"--registry needs the service packages ({e.name} is not installed): "
                                      "pip install 'casestream[service]'") from e
            raise CheckInputError(f"{e.name} is not installed (imported by the repository's upcasters or "
                                  f"schemas code): {e}") from e
    except CheckInputError as e:
        if verbose:
            traceback.print_exception(e, file=sys.stderr)
        if fmt == "text":
            click.echo(render_error(e), err=True)
        else:
            emit(render_error(e, fmt))
            click.echo(render_error(e), err=True)
        sys.exit(EXIT_INPUT)
    emit(render(report, fmt, verbose=verbose))
    sys.exit(report.exit_code)


@schemas.command("rules")
def rules() -> None:
    """List every rule: id, what it catches, where it comes from; stricter rules are marked."""
    from casestream.schemacheck.rules import RULES

    for rule in RULES.values():
        click.echo(f"{rule.id:36} {rule.title}")
        click.echo(f"{'':36} source: {rule.source}")
        if rule.stricter:
            click.echo(f"{'':36} stricter than Avro: {rule.stricter}")


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

    Versions already registered (the exact schema, docs and aliases included) are not
    registered again; running it twice changes nothing. When the registry answers a new
    catalog version with an existing version (Apicurio folds schemas equal up to docs, aliases
    and enum defaults), the version is stored as a distinct one through Apicurio's core API;
    a registry that cannot do that gets a `shared` line and a warning saying what follows.
    Exit 0 done, 1 catalog incompatible or registry refused, 2 bad input or registry down.
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
                                      options=environ_properties("registry", os.environ))
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
        if s.action == "shared":
            click.echo(f"warning: {s.subject} {what} is not a version of its own in the registry: {s.detail}",
                       err=True)
    summary = ", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
    click.echo(f"schemas register{' (dry run)' if dry_run else ''} against {registry}: {summary}")


def main() -> None:
    """Entry point of ``python -m casestream.schemacheck``."""
    schemas(prog_name="python -m casestream.schemacheck")
