"""Run the ``tidings`` command line as a child process.

The CLI runs as ``python -m infrastructure.cli.main`` (no install needed) from a temp
working directory, with only the ``TIDINGS_*`` variables a test sets: none are
inherited from the caller's environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e import timing

ROOT = Path(__file__).resolve().parents[2]


def tidings_vars(**settings: str) -> dict[str, str]:
    return {f"TIDINGS_{key.upper()}": value for key, value in settings.items()}


def cli_env(**settings: str) -> dict[str, str]:
    """The environment for a child process; the test servers are on loopback, so
    private hosts are allowed unless a test says otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDINGS_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "120"
    return {**env, **tidings_vars(**{"allow_private_hosts": "true", **settings})}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "infrastructure.cli.main", *args]


class Cli:
    """``cli("query", "get-entity", ..., database_url=...)`` → the finished process;
    keyword arguments override this runner's ``TIDINGS_*`` settings for one call."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.env = env

    def __call__(
        self, *args: str, stdin: str | None = None, **settings: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command(*args),
            cwd=self.cwd,
            env={**self.env, **tidings_vars(**settings)},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timing.PROCESS,
            check=False,
        )

    def popen(self, *args: str, **settings: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            command(*args),
            cwd=self.cwd,
            env={**self.env, **tidings_vars(**settings)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
