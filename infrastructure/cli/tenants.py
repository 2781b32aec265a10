"""``tidings tenants shred ID``: erase a tenant (its keys destroyed), as the operator."""

from __future__ import annotations

from typing import Annotated

import typer

from application import SYSTEM_TENANT_ID, User
from infrastructure.cli.commands import report
from infrastructure.cli.output import JsonFlag
from infrastructure.cli.runtime import opened_app

OPERATOR = User(id="cli-operator", tenant_id=SYSTEM_TENANT_ID, roles=frozenset({"SystemAdmin"}))

app = typer.Typer(name="tenants", help="Tenants as a whole.", no_args_is_help=True)


@app.command("shred")
def shred(
    tenant_id: Annotated[str, typer.Argument(metavar="ID", help="The tenant to erase.")],
    as_json: JsonFlag = False,
) -> None:
    """Erase a tenant for good: its keys are destroyed, so every value sealed under them
    (custom fields, mail, secrets, raw MIME) is unreadable everywhere. Ids remain."""
    with opened_app() as tidings:
        result = tidings.write("shred-tenant", {"tenantId": tenant_id}, OPERATOR)
    if as_json or result.error is not None:
        report(result, as_json)
        return
    typer.echo(f"tenant {tenant_id} shredded: its sealed data is erased for good")
