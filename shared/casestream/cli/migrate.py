"""``casestream migrate [SERVICE]...``: apply the installed services' database migrations.

For a deployment that migrates before it starts the services (a Kubernetes Job, the compose
``migrate`` service) and runs them with ``CASESTREAM_MIGRATE_AT_START=false``. Each service's
database is ``spec.read_settings().dsn`` (``CASESTREAM_PG_URL`` + ``CASESTREAM_<NAME>_DATABASE``);
its migrations are :meth:`casestream.service.ServiceSpec.migrations_folder` (the outbox DDL
first when the service has an outbox). Idempotent: a second run applies nothing. Exit status
0 when every database is up to date, 2 on a configuration or database problem (one line).
"""

from __future__ import annotations

import click

from casestream.cli.context import cli_context


@click.command("migrate")
@click.argument("services", nargs=-1)
def migrate(services: tuple[str, ...]) -> None:
    """Apply the migrations of SERVICES (default: every installed service) to their databases.

    One line per service: the migrations applied now, or "up to date". Safe beside running
    instances (PostgreSQL advisory lock); the databases must exist.
    """
    # lazy (start-up cost): the builder loads the drivers only when this command runs
    from casestream.service.builder import migrate_service

    specs = cli_context().services()
    unknown = [name for name in services if name not in specs]
    if unknown:
        raise click.BadParameter(f"unknown service {', '.join(unknown)} (installed: "
                                 f"{', '.join(specs) or 'none'})", param_hint="SERVICES")
    for name in services or tuple(specs):
        applied = migrate_service(specs[name])
        click.echo(f"{name}: " + (f"applied {', '.join(applied)}" if applied else "up to date"))
