"""``tidings demo`` runs to completion on the embedded default, in its working directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e import timing
from tests.e2e.process import cli_env, command


def test_demo_runs_on_the_embedded_default(tmp_path: Path) -> None:
    done = subprocess.run(
        command("demo"),
        cwd=tmp_path,
        env=cli_env(allow_private_hosts="false"),  # the demo allows its loopback server itself
        capture_output=True,
        text=True,
        timeout=timing.PROCESS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tidings.db").exists()  # ./tidings.db, the default
    for milestone in (
        "Define custom fields",
        "Hi, the quarterly report is attached.",
        "q3-résumé.csv",
        "outbound",  # a reply in Sent joins its thread
        "True → False",  # read in another client
        "INBOX → Archive",
        "ok → deleted",
        "message.deleted, message.flags_changed, message.moved",
        "alice.note = '[anonymized]'",
        "tier (deleted)",
        "generation 2",
        "identical after the rebuild",
        "signature valid",
        "arrived in support@example.test's INBOX: Re: Quarterly numbers",
        "1 outbound message in the sender's thread",
        "Projection status",
        "open the console: http://127.0.0.1:8080/console",
        "sign in with the key tdk_",
    ):
        assert milestone in done.stdout
    assert "Traceback" not in done.stderr
    assert "Skipped: no private Postfix" not in done.stdout
