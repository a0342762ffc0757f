"""Git operations of GEPA steps through the ``git`` CLI: argument lists, never a shell.

Callers pass ids already checked by genesis/programs.py. Git never asks for credentials on a
terminal, never runs hooks from the client's repository and never reads the user's config."""

from __future__ import annotations

import fcntl
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

GIT_TIMEOUT_S = 120.0
# Commits of GEPA steps are made by Genesis, not by whoever runs the worker.
AUTHOR = {"GIT_AUTHOR_NAME": "Genesis GEPA", "GIT_AUTHOR_EMAIL": "gepa@genesis.invalid",
          "GIT_COMMITTER_NAME": "Genesis GEPA", "GIT_COMMITTER_EMAIL": "gepa@genesis.invalid"}


class GitError(RuntimeError):
    """A git command failed; the message carries git's own explanation."""


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(AUTHOR)
    env.update({
        "GIT_TERMINAL_PROMPT": "0",  # fail instead of waiting for a password
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ASKPASS": "true",
    })
    return env


def git(*args: str, cwd: Path | None = None, config: dict[str, str] | None = None,
        input: bytes | None = None, timeout: float = GIT_TIMEOUT_S, redact: str | None = None) -> str:
    """Run ``git args`` and return stdout. ``config`` entries travel in the environment
    (GIT_CONFIG_COUNT/KEY/VALUE: a credential header must land neither in .git/config nor on a
    command line other users can see); ``redact`` is removed from error messages."""
    argv = ["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always", *args]
    env = _env()
    for index, (key, value) in enumerate((config or {}).items()):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    if config:
        env["GIT_CONFIG_COUNT"] = str(len(config))
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, input=input, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise GitError(f"git {args[0]} did not finish within {timeout:.0f}s") from exc
    if done.returncode != 0:
        message = (done.stderr or done.stdout).decode(errors="replace").strip()
        if redact:
            message = message.replace(redact, "***")
        raise GitError(f"git {args[0]} failed: {message[-2000:]}")
    return done.stdout.decode(errors="replace")


def clone(url: str, dest: Path, config: dict[str, str] | None = None, redact: str | None = None) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "--quiet", "--no-recurse-submodules", "--", url, str(dest), config=config, redact=redact, timeout=600)


def default_branch(repo: Path) -> str:
    return git("symbolic-ref", "--short", "HEAD", cwd=repo).strip()


def head_commit(repo: Path, ref: str = "HEAD") -> str:
    return git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=repo).strip()


def branch_exists(repo: Path, branch: str) -> bool:
    done = subprocess.run(["git", "show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=repo, env=_env())
    return done.returncode == 0


@contextmanager
def worktree_admin(repo: Path):
    """Worktree bookkeeping of one repository, one change at a time (threads and processes):
    a ``git worktree prune`` next to another step's ``add`` would delete its half-made entry."""
    with open(repo / ".git" / "genesis-worktrees.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def add_worktree(repo: Path, path: Path, branch: str, start: str) -> None:
    """A new worktree at ``path`` on a new branch ``branch`` from ``start``. A leftover of an
    earlier attempt of the same step (same path/branch) is removed first, so a retry starts clean."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with worktree_admin(repo):
        _remove_worktree(repo, path)
        git("worktree", "add", "--quiet", "-B", branch, str(path), start, cwd=repo)


def remove_worktree(repo: Path, path: Path) -> None:
    with worktree_admin(repo):
        _remove_worktree(repo, path)


def _remove_worktree(repo: Path, path: Path) -> None:
    if path.exists():
        git("worktree", "remove", "--force", str(path), cwd=repo)
    git("worktree", "prune", cwd=repo)


def delete_branch(repo: Path, branch: str) -> None:
    with worktree_admin(repo):
        if branch_exists(repo, branch):
            git("branch", "-D", branch, cwd=repo)


def commit_all(worktree: Path, message: str) -> str:
    """Stage everything in the worktree and commit (an empty change still gets its commit, so
    every program version has one); returns the commit id."""
    git("add", "--all", cwd=worktree)
    git("commit", "--quiet", "--allow-empty", "--no-verify", "-m", message, cwd=worktree)
    return head_commit(worktree)


def apply_patch(worktree: Path, patch: str) -> list[str]:
    """``git apply`` a unified diff (checked first, so a patch that does not apply changes
    nothing); returns the files it touches."""
    data = patch.encode()
    git("apply", "--check", "--whitespace=nowarn", "-", cwd=worktree, input=data)
    files = [line.split("\t")[-1] for line in git("apply", "--numstat", "-", cwd=worktree, input=data).splitlines() if line]
    git("apply", "--whitespace=nowarn", "-", cwd=worktree, input=data)
    return files


def tracked_files(worktree: Path) -> list[str]:
    return [line for line in git("ls-files", cwd=worktree).splitlines() if line]
