"""``tidings projections run`` follows the log, logs each batch, and stops on SIGTERM."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time

import pytest

from tests.e2e import timing
from tests.e2e.process import Cli

ADMIN = json.dumps({"id": "ann", "tenantId": "acme", "roles": ["TenantAdmin"]})


def lines_of(stream: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert stream.stderr is not None
        for line in stream.stderr:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def wait_for(
    lines: queue.Queue[str], needle: str, timeout: float = timing.PROJECTIONS_LOG
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=timing.LINE_POLL)
        except queue.Empty:
            continue
        if needle in line:
            return line
    raise AssertionError(f"no log line with {needle!r} within {timeout}s")


# The loop is the same on both backends (``run --once`` covers SQLite in the flow test);
# following a separate writer's commits is PostgreSQL's production setup.
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_run_follows_new_events_until_sigterm(cli: Cli) -> None:
    runner = cli.popen("projections", "run", "--interval", "0.1")
    try:
        lines = lines_of(runner)
        wait_for(lines, "event=started")
        written = cli(
            "write",
            "define-tenant-field",
            "--as",
            ADMIN,
            "--payload",
            '{"entityName": "contact", "fieldKey": "tier", "field": {"type": "text"}}',
            project_inline="false",
        )
        assert written.returncode == 0, written.stderr
        batch = wait_for(lines, "event=batch projection=custom_fields")
        fields = dict(part.split("=", 1) for part in batch.split())
        assert fields["level"] == "info"
        assert fields["applied"] == "2"
        assert fields["lag"] == "0"
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=timing.PROJECTIONS_EXIT) == 0
        wait_for(lines, "event=stopped")
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
