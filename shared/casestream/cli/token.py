"""``casestream token``: mint a bearer token (JWT) for local use, printed on stdout.

::

    casestream token --tenant tenant-a --role officer [--role supervisor]
                     [--subject alice] [--client-id cli] [--ttl 3600]
                     [--private-key key.pem] [--header]

    curl -H "Authorization: Bearer $(casestream token --tenant tenant-a --role officer)" ...

Signs with the key the services verify with (``CASESTREAM_AUTH_*``, see
``casestream.auth.tokens``): by default the HS256 development key. With RS256/ES256 configured,
pass the private key matching the configured public key (``--private-key``).
"""

from __future__ import annotations

from pathlib import Path

import click

from casestream.auth.tokens import ROLES, SUBJECT_PATTERN, TENANT_PATTERN, AuthSettings, mint_token
from casestream.errors import ConfigError


@click.command("token")
@click.option("--tenant", required=True, help="Tenant the token acts for (claim tenant).")
@click.option("--role", "roles", multiple=True, default=("officer",), show_default=True,
              type=click.Choice(sorted(ROLES)), help="Role (claim roles); repeat for several.")
@click.option("--subject", default=None,
              help="Actor id (claim sub); default local-<first role>.")
@click.option("--client-id", default=None, help="OAuth client (claim client_id); default sub.")
@click.option("--ttl", "ttl_s", type=click.IntRange(min=1), default=None,
              help="Lifetime in seconds (default CASESTREAM_AUTH_TOKEN_TTL_S, 3600).")
@click.option("--private-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="PEM private key, for RS256/ES256.")
@click.option("--header", "as_header", is_flag=True,
              help='Print "Authorization: Bearer <token>" instead of the bare token.')
def token(tenant: str, roles: tuple[str, ...], subject: str | None, client_id: str | None,
          ttl_s: int | None, private_key: Path | None, as_header: bool) -> None:
    """Mint a bearer token (JWT) for a tenant and roles, signed with the configured key."""
    if not TENANT_PATTERN.fullmatch(tenant):
        raise click.BadParameter("1..64 characters of A-Z a-z 0-9 . _ : -", param_hint="--tenant")
    for hint, value in (("--subject", subject), ("--client-id", client_id)):
        if value is not None and not SUBJECT_PATTERN.fullmatch(value):
            raise click.BadParameter("1..128 printable ASCII characters", param_hint=hint)
    settings = AuthSettings()
    if settings.jwt_algorithm == "HS256":
        if private_key is not None:
            raise click.UsageError("--private-key is for RS256/ES256; HS256 signs with "
                                   "CASESTREAM_AUTH_JWT_KEY")
        try:
            key = settings.verification_key()
        except ConfigError as e:
            raise click.ClickException(str(e)) from None
    elif private_key is None:
        raise click.UsageError(f"CASESTREAM_AUTH_JWT_ALGORITHM={settings.jwt_algorithm}: "
                               "pass --private-key FILE (PEM)")
    else:
        key = private_key.read_text(encoding="utf-8")
    try:
        value = mint_token(tenant=tenant, roles=roles, subject=subject or f"local-{roles[0]}",
                           key=key, algorithm=settings.jwt_algorithm,
                           issuer=settings.jwt_issuer, audience=settings.jwt_audience,
                           ttl_s=ttl_s or settings.token_ttl_s, client_id=client_id)
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"Authorization: Bearer {value}" if as_header else value)
