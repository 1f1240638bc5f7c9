"""``casestream new service NAME``: write a service skeleton (``casestream.scaffold``).

::

    casestream new service inspections [--directory DIR] [--package PKG] [--namespace NS]
                                       [--force]

Writes into DIR (default ``./NAME``), refusing a folder that is not empty unless ``--force``,
and prints the next steps. A bad name or target is one line naming it (``casestream.errors.ConfigError``: exit status
2, through the ``casestream`` group).
"""

from __future__ import annotations

from pathlib import Path

import click


@click.group("new")
def new() -> None:
    """Write a starting point: a service skeleton."""


@new.command("service")
@click.argument("name")
@click.option("--directory", "directory", type=click.Path(path_type=Path), default=None,
              help="Folder to write into (default ./NAME).")
@click.option("--package", default=None, help="Python package name (default NAME).")
@click.option("--namespace", default=None,
              help="Avro namespace of the service's subjects (default the package name).")
@click.option("--force", is_flag=True, help="Write into a folder that is not empty "
              "(overwrites the skeleton's files, leaves the others).")
def service(name: str, directory: Path | None, package: str | None, namespace: str | None,
            force: bool) -> None:
    """Write a service skeleton NAME: pyproject with its entry points, schemas with a first
    event, settings, bootstrap, a migration, domain, use cases, adapters and unit tests."""
    from casestream.scaffold import service_scaffold, write_service

    scaffold = service_scaffold(name, package=package, namespace=namespace)
    target = directory if directory is not None else Path(name)
    written = write_service(scaffold, target, force=force)
    click.echo(f"wrote service {scaffold.name!r} (package {scaffold.package}) into {target}: "
               f"{len(written)} files")
    click.echo("next steps:")
    steps = [(f"cd {target}", ""),
             ("pip install -e '.[test]'", "registers the service, its schemas and projection"),
             ("casestream schemas check --schemas-dir schemas", "the schema gate, as CI runs it"),
             ("pytest", "its unit tests, in memory"),
             (f"casestream settings {scaffold.name}", "its environment variables"),
             ("casestream topics apply", f"creates outbox.event.{scaffold.name}"),
             (f"casestream migrate {scaffold.name}", "its tables"),
             (f"python -m {scaffold.package}", "runs it")]
    width = max(len(command) for command, _ in steps)
    for command, why in steps:
        click.echo(f"  {command.ljust(width)}  # {why}" if why else f"  {command}")
