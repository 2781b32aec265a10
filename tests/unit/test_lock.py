"""The lock is what the tests ran on: it agrees with pyproject.toml, and it is installed.

`requirements/dev.txt` pins the tested environment (runtime and dev, with hashes);
`requirements/runtime.txt` pins the runtime part of it. `bash .ci/forward` rewrites both.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
# Installed by venv itself, or the project under test: never in a lock.
NOT_LOCKED = {"pip", "setuptools", "wheel", "tidings"}


def pins(lock: str) -> dict[str, tuple[Version, int]]:
    """Each pinned name with its version and how many hashes it carries."""
    found: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in (ROOT / "requirements" / lock).read_text().splitlines():
        if match := PIN.match(line):
            name = canonicalize_name(match[1])
            assert name not in found, f"{lock}: {name} pinned twice"
            found[name] = (Version(match[2]), 0)
        elif name and (hashes := HASH.findall(line)):
            version, count = found[name]
            found[name] = (version, count + len(hashes))
    return found


def declared() -> tuple[list[Requirement], list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = [Requirement(text) for text in project["dependencies"]]
    dev = [Requirement(text) for text in project["optional-dependencies"]["dev"]]
    return runtime, dev


def disagreements(requirements: list[Requirement], lock: str) -> list[str]:
    pinned = pins(lock)
    wrong = []
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name not in pinned:
            wrong.append(f"{requirement} is not in requirements/{lock}")
        elif not requirement.specifier.contains(pinned[name][0], prereleases=True):
            wrong.append(f"requirements/{lock} pins {name}=={pinned[name][0]}: not {requirement}")
    return wrong


def test_every_dependency_is_locked_within_its_bounds() -> None:
    runtime, dev = declared()
    assert disagreements(runtime, "runtime.txt") == []
    assert disagreements(runtime + dev, "dev.txt") == []


def test_runtime_dependencies_are_bounded_above() -> None:
    runtime, _ = declared()
    unbounded = [
        str(r) for r in runtime if not any(s.operator in {"<", "~=", "=="} for s in r.specifier)
    ]
    assert unbounded == []


def test_the_runtime_lock_is_the_dev_lock_s_runtime_part() -> None:
    runtime, dev = pins("runtime.txt"), pins("dev.txt")
    assert {name: runtime[name][0] for name in runtime} == {
        name: dev[name][0] for name in runtime if name in dev
    }
    assert set(runtime) <= set(dev)


def test_every_pin_carries_a_hash() -> None:
    for lock in ("runtime.txt", "dev.txt"):
        assert [name for name, (_, hashes) in pins(lock).items() if hashes == 0] == []


def test_the_environment_under_test_is_the_lock() -> None:
    """What `pip freeze` shows here equals requirements/dev.txt: nothing more, nothing else."""
    installed = {
        name: Version(dist.version)
        for dist in metadata.distributions()
        if (name := canonicalize_name(dist.metadata["Name"])) not in NOT_LOCKED
    }
    locked = {name: version for name, (version, _) in pins("dev.txt").items()}
    assert installed == locked, (
        f"{sys.prefix} is not the lock: install it with the README's test command"
    )
