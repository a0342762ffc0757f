"""Per-client Python environments for GEPA programs: DSPy plus the repository's
``requirements.txt``, installed once per requirements hash into a host directory that the
program containers mount read-only (PYTHONPATH).

Installing runs the worker's own pip with ``--only-binary :all:``: wheels only, so no package's
build code (setup.py) ever runs on the host. Requirement lines are plain specifiers only (no
options, URLs, paths or direct references), so a repository cannot point pip anywhere else."""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REQUIREMENTS_FILE = "requirements.txt"
_SPECIFIER = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]+\])?\s*([<>=!~]=?[^;@\s]*(\s*,\s*[<>=!~]=?[^;@\s]*)*)?\s*(;[^@]*)?$"
)
INSTALL_TIMEOUT_S = 900.0


class RequirementsRejected(ValueError):
    pass


def parse_requirements(text: str) -> list[str]:
    """The plain requirement specifiers of a requirements.txt, or RequirementsRejected naming the line."""
    specs = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if not _SPECIFIER.match(line):
            raise RequirementsRejected(
                f"{REQUIREMENTS_FILE} line {number} ({line[:80]!r}) is not a plain requirement specifier "
                "(options, URLs, paths and direct references are not installed)"
            )
        specs.append(line)
    return specs


def environment_key(requirements: list[str], dspy_requirement: str) -> str:
    """Same requirements, same interpreter -> same environment."""
    identity = {
        "python": sys.version.split()[0],
        "abi": sys.implementation.cache_tag,
        "dspy": dspy_requirement,
        "requirements": sorted(requirements),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def requirements_of(worktree: Path) -> list[str]:
    path = worktree / REQUIREMENTS_FILE
    return parse_requirements(path.read_text(errors="replace")) if path.is_file() else []


def ensure_environment(
    envs_dir: Path, requirements: list[str], dspy_requirement: str, progress: Callable[[str], None] = lambda _: None
) -> Path:
    """The environment directory for these requirements, installed unless present. Concurrent
    callers for the same key wait for one install (a file lock); a failed install leaves nothing."""
    key = environment_key(requirements, dspy_requirement)
    target = envs_dir / key
    if (target / ".complete").exists():
        return target
    envs_dir.mkdir(parents=True, exist_ok=True)
    with open(envs_dir / f"{key}.lock", "w") as lock:
        while True:  # another step (or worker) may be installing it: wait, showing progress
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                progress(f"waiting for the program environment {key} to be installed")
                time.sleep(2)
        if (target / ".complete").exists():
            return target
        staging = envs_dir / f"{key}.installing"
        shutil.rmtree(staging, ignore_errors=True)
        progress(f"installing the program environment {key} ({len(requirements)} requirements + {dspy_requirement})")
        started = time.monotonic()
        log = envs_dir / f"{key}.log"
        with open(log, "w") as output:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--only-binary",
                    ":all:",
                    "--target",
                    str(staging),
                    dspy_requirement,
                    *requirements,
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
            while process.poll() is None:  # a long install still shows progress (activity heartbeats)
                if time.monotonic() - started > INSTALL_TIMEOUT_S:
                    process.kill()
                progress(f"installing the program environment {key}: {time.monotonic() - started:.0f}s")
                time.sleep(2)
        if process.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise RequirementsRejected(
                f"installing the requirements failed: {log.read_text(errors='replace').strip()[-1500:]}"
            )
        (staging / ".complete").write_text(
            json.dumps(
                {
                    "requirements": requirements,
                    "dspy": dspy_requirement,
                    "seconds": round(time.monotonic() - started, 1),
                }
            )
        )
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target
