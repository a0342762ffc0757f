"""requirements.lock is what `make lock` generates from pyproject.toml: every exact pin there is the
locked version, every group the lock was made for is resolved, and every locked package carries
hashes (so `pip install --require-hashes`, as `make venv` runs it, accepts the file)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCK_TEXT = (ROOT / "requirements.lock").read_text()
# one entry: "name==version \" followed by its "--hash=sha256:..." continuation lines
LOCK_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})*)", re.M)


def locked() -> dict[str, tuple[str, int]]:
    return {
        canonicalize_name(name): (version, hashes.count("--hash="))
        for name, version, hashes in LOCK_ENTRY.findall(LOCK_TEXT)
    }


def declared() -> list[tuple[str, Requirement]]:
    groups = {"dependencies": PROJECT["dependencies"], **PROJECT["optional-dependencies"]}
    return [(group, Requirement(line)) for group, lines in groups.items() for line in lines]


def test_every_pin_of_pyproject_is_the_locked_version():
    lock, mismatched = locked(), []
    for group, requirement in declared():
        if canonicalize_name(requirement.name) == canonicalize_name(PROJECT["name"]):
            assert requirement.extras <= PROJECT["optional-dependencies"].keys(), f"{group}: {requirement}"
            continue
        pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        assert pins, f"{group}: {requirement} is not pinned exactly"
        have = lock.get(canonicalize_name(requirement.name), ("missing",))[0]
        if have != pins[0]:
            mismatched.append(f"{group}: {requirement} but the lock has {have}")
    assert not mismatched, "run `make lock`: " + "; ".join(mismatched)


def test_the_lock_is_generated_for_every_group_with_hashes():
    assert "#    make lock\n" in LOCK_TEXT, "the header says how the lock is regenerated"
    lock = locked()
    assert len(lock) == sum(1 for line in LOCK_TEXT.splitlines() if re.match(r"^[A-Za-z0-9]", line))
    unhashed = [name for name, (_, hashes) in lock.items() if hashes == 0]
    assert not unhashed, f"locked without hashes: {unhashed}"
    makefile = (ROOT / "Makefile").read_text()
    extras = re.search(r"^LOCK_EXTRAS := (.+)$", makefile, re.M).group(1).split()
    assert sorted(extras) == sorted(PROJECT["optional-dependencies"]), "`make lock` resolves every group"
