"""The quality gates' commands, and mypy's run in the background.

mypy over the code, the tests and the benchmarks takes ~14 s of one core with a cold cache
(as in CI; close to a minute on a loaded machine), while the unit tests keep only the
other core busy. So ``MYPY`` starts when the first unit test does
(``tests/unit/conftest.py``; after the process tests, whose timings a busy core would
squeeze) and ``test_mypy_strict`` waits for its answer, starting it itself when it runs
alone.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class BackgroundCommand:
    """One command run at most once, from ``start()`` (or ``result()``) to its answer."""

    def __init__(self, *argv: str) -> None:
        self.argv = argv
        self._proc: subprocess.Popen[str] | None = None
        self._result: subprocess.CompletedProcess[str] | None = None

    def start(self) -> None:
        if self._proc is None:
            self._proc = subprocess.Popen(
                self.argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )

    def result(self) -> subprocess.CompletedProcess[str]:
        self.start()
        assert self._proc is not None
        if self._result is None:
            stdout, stderr = self._proc.communicate()
            self._result = subprocess.CompletedProcess(
                self.argv, self._proc.returncode, stdout, stderr
            )
        return self._result

    def stop(self) -> None:
        """End a run nobody asked for the answer of (an interrupted test run)."""
        if self._proc is not None and self._result is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.communicate()


MYPY = BackgroundCommand(sys.executable, "-m", "mypy")
MYPY_TEST = "tests/unit/test_quality.py::test_mypy_strict"
