"""The codebase's own gates, run by the test command: layering, types, lint."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.unit import gates

ROOT = Path(__file__).resolve().parents[2]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


def test_dependencies_point_inward() -> None:
    beside = Path(sys.executable).parent / "lint-imports"
    lint_imports = str(beside) if beside.exists() else shutil.which("lint-imports")
    assert lint_imports, "import-linter is not installed (the README's test command)"
    result = _run(lint_imports, "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict() -> None:
    result = gates.MYPY.result()  # started with the first unit test (tests/unit/gates.py)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run(sys.executable, "-m", "ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


PRODUCT_PACKAGES = ("domain", "application", "infrastructure", "projections", "workers")
MAX_MODULE_BYTES = 20 * 1024


def test_no_product_module_is_over_20_kb() -> None:
    """A module this big holds more than one thing: split it (the README's module map
    says where each part goes)."""
    modules = [path for package in PRODUCT_PACKAGES for path in (ROOT / package).rglob("*.py")]
    assert len(modules) > 100  # the packages were found
    too_big = {
        str(path.relative_to(ROOT)): size
        for path in modules
        if (size := path.stat().st_size) > MAX_MODULE_BYTES
    }
    assert not too_big, too_big
