"""``tidings retention run [--dry-run]``: sweep what has expired now, as the workers do
on a schedule, and show it (counts per kind, tenant, subject — a field
``entity.key``, or a mail account ``mail.<id>`` — and action). ``--dry-run`` only
counts: nothing is recorded. The projections are caught up first, so the sweep sees
every earlier write; another sweeper holding the lease is an error."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from infrastructure.bootstrap import retention_sweeper
from infrastructure.cli.output import JsonFlag, out, print_data
from infrastructure.cli.runtime import CliError, load_settings, opened_app

app = typer.Typer(name="retention", help="Data that expires: sweep it.", no_args_is_help=True)


@app.command("run")
def run(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would expire; record nothing.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Sweep every expired custom-field value, mail body and message now (or, with
    --dry-run, count them)."""
    settings = load_settings()
    with opened_app() as tidings:
        tidings.projections.catch_up()
        report = retention_sweeper(tidings, settings, holder="cli").run(dry_run=dry_run)
        if report is None:
            raise CliError("another sweeper holds the retention lease; try again later")
        tidings.projections.catch_up()
    rows = [
        {"kind": kind, "tenantId": tenant, "subject": subject, "action": action, "count": n}
        for (kind, tenant, subject, action), n in sorted(report.counts.items())
    ]
    data = {
        "dryRun": dry_run,
        "now": report.now.isoformat(),
        "found": report.found,
        "recorded": report.recorded,
        "items": rows,
    }
    if as_json:
        print_data(data, as_json=True)
        return
    table = Table("kind", "tenant", "subject", "action", "count")
    for (kind, tenant, subject, action), count in sorted(report.counts.items()):
        table.add_row(kind, tenant, subject, action, str(count))
    out().print(table)
    if dry_run:
        out().print(f"{report.found} would expire (dry run: nothing recorded)")
    else:
        out().print(f"{report.found} found, {report.recorded} expiries recorded")
