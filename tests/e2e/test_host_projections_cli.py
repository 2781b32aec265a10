"""A host projection named by ``TIDINGS_HOST_PROJECTIONS`` is run, counted and rebuilt
by the command line like the built-in ones, on both backends: ``projections run
--once`` fills the host's column, ``status`` lists it, ``rebuild NAME`` repairs it."""

from __future__ import annotations

import json
from pathlib import Path

from infrastructure.bootstrap import bootstrap, projection_runner
from tests.e2e.process import Cli
from tests.support.host_tables import NAME, add_contact, columns, create_contacts

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})
HOST = "tests.support.host_tables:contacts_column"


def test_the_cli_runs_lists_and_rebuilds_a_host_projection(cli: Cli, tmp_path: Path) -> None:
    app = bootstrap(
        database_url=cli.env["TIDINGS_DATABASE_URL"],
        blob_dir=tmp_path / "blobs",
        master_key=cli.env["TIDINGS_MASTER_KEY"],
        project_inline=False,
    )
    try:
        db = projection_runner(app).db
        create_contacts(db)
        add_contact(db, "acme", "c1")
        for name, payload in (
            (
                "define-tenant-field",
                {"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}},
            ),
            (
                "set-custom-field",
                {"entityName": "contact", "entityId": "c1", "fieldKey": "tier", "value": "gold"},
            ),
        ):
            written = cli(
                "write",
                name,
                "--as",
                ADMIN,
                "--payload",
                json.dumps(payload),
                project_inline="false",
            )
            assert written.returncode == 0, written.stderr

        ran = cli("projections", "run", "--once", host_projections=HOST)
        assert ran.returncode == 0, ran.stderr
        assert columns(db) == {("acme", "c1"): {"tier": "gold"}}

        status = cli("projections", "status", "--json", host_projections=HOST)
        assert status.returncode == 0, status.stderr
        rows = {row["name"]: row for row in json.loads(status.stdout)}
        assert (rows[NAME]["lag"], rows[NAME]["quarantined"]) == (0, 0)
        with db.transaction() as cur:
            cur.execute("UPDATE contacts SET custom_fields = NULL")
        rebuilt = cli("projections", "rebuild", NAME, host_projections=HOST)
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert columns(db) == {("acme", "c1"): {"tier": "gold"}}

        bad = cli("projections", "status", host_projections="no_such_module:thing")
        assert bad.returncode != 0
        assert "host projection 'no_such_module:thing' cannot be loaded" in bad.stderr
    finally:
        app.close()
