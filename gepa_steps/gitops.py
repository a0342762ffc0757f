"""Git operations of GEPA steps through the ``git`` CLI: argument lists, never a shell.

Callers pass ids already checked by gepa_steps/programs.py. Git never asks for credentials on a
terminal, never runs hooks from the client's repository and never reads the user's config."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

GIT_TIMEOUT_S = 120.0
# Commits of GEPA steps are made by Genesis, not by whoever runs the worker.
AUTHOR = {
    "GIT_AUTHOR_NAME": "Genesis GEPA",
    "GIT_AUTHOR_EMAIL": "gepa@genesis.invalid",
    "GIT_COMMITTER_NAME": "Genesis GEPA",
    "GIT_COMMITTER_EMAIL": "gepa@genesis.invalid",
}


# Environment variables that would send git's HTTP through a proxy, which resolves the host again.
PROXY_VARIABLES = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}
CLONE_FAILED = (
    "the repository could not be cloned (it does not exist, needs credentials, is not a git "
    "server, or did not answer in time)"
)


class GitError(RuntimeError):
    """A git command failed; the message carries git's own explanation."""


class MergeConflict(GitError):
    """Both parents of a crossover changed the same lines of these files differently."""

    def __init__(self, files: list[str]):
        super().__init__(f"both parents changed the same lines of {', '.join(files)}")
        self.files = files


class CloneFailed(GitError):
    """A clone failed. Its message is the same whatever the cause: git's own words would tell an
    open port from a closed one. ``detail`` (git's words, credentials redacted) is for the log."""

    def __init__(self, detail: str):
        super().__init__(CLONE_FAILED)
        self.detail = detail


@dataclass(frozen=True)
class CloneLimits:
    """Time limits of a clone over the network (Settings gepa_clone_*)."""

    connect_timeout_s: float = 10.0  # until the repository has listed its HEAD (git ls-remote)
    stall_s: int = 20  # under LOW_SPEED_BYTES per second for this long aborts the transfer
    timeout_s: float = 600.0  # the whole clone


LOW_SPEED_BYTES = 1000


def _env(network: bool = False) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("GIT_") and not (network and key.lower() in PROXY_VARIABLES)
    }
    if network:
        env["GIT_ALLOW_PROTOCOL"] = "http:https"  # no transport a server's answer could switch to
    env.update(AUTHOR)
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",  # fail instead of waiting for a password
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ASKPASS": "true",
        }
    )
    return env


def git(
    *args: str,
    cwd: Path | None = None,
    config: dict[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = GIT_TIMEOUT_S,
    redact: str | None = None,
    network: bool = False,
) -> str:
    """Run ``git args`` and return stdout. ``config`` entries travel in the environment
    (GIT_CONFIG_COUNT/KEY/VALUE: a credential header must land neither in .git/config nor on a
    command line other users can see); ``redact`` is removed from error messages. ``network``:
    only the http(s) transports, no proxy."""
    argv = ["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.file.allow=always", *args]
    env = _env(network)
    for index, (key, value) in enumerate((config or {}).items()):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    if config:
        env["GIT_CONFIG_COUNT"] = str(len(config))
    # Its own process group: on a timeout, git's helpers (git-remote-https holds the connection)
    # go with it instead of lingering on a host that never answers.
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise GitError(f"git {args[0]} did not finish within {timeout:g}s") from None
    if process.returncode != 0:
        message = (stderr or stdout).decode(errors="replace").strip()
        if redact:
            message = message.replace(redact, "***")
        raise GitError(f"git {args[0]} failed: {message[-2000:]}")
    return stdout.decode(errors="replace")


def clone(
    url: str,
    dest: Path,
    config: dict[str, str] | None = None,
    redact: str | None = None,
    pin: str | None = None,
    limits: CloneLimits = CloneLimits(),
) -> None:
    """Clone ``url`` into ``dest``; raise CloneFailed. An http(s) URL's host is looked up only in
    ``pin`` (a libcurl resolve entry ``host:port:address``, made from the addresses the caller
    checked), redirects are not followed, and the clone starts only once the repository has
    listed its HEAD within ``limits.connect_timeout_s`` (a TLS handshake that never ends is
    not covered by git's own low-speed limit)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    network = urlsplit(url).scheme in ("http", "https")
    config = dict(config or {})
    if network:
        config.update(
            {
                "http.followRedirects": "false",
                "http.lowSpeedLimit": str(LOW_SPEED_BYTES),
                "http.lowSpeedTime": str(limits.stall_s),
            }
        )
        if pin:
            config["http.curloptResolve"] = pin
    try:
        if network:
            git(
                "ls-remote",
                "--",
                url,
                "HEAD",
                config=config,
                redact=redact,
                timeout=limits.connect_timeout_s,
                network=True,
            )
        git(
            "clone",
            "--quiet",
            "--no-recurse-submodules",
            "--",
            url,
            str(dest),
            config=config,
            redact=redact,
            timeout=limits.timeout_s,
            network=network,
        )
    except GitError as exc:
        raise CloneFailed(str(exc)) from None


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
    files = [
        line.split("\t")[-1] for line in git("apply", "--numstat", "-", cwd=worktree, input=data).splitlines() if line
    ]
    git("apply", "--whitespace=nowarn", "-", cwd=worktree, input=data)
    return files


def merge_base(worktree: Path, first: str, second: str) -> str | None:
    """The best common ancestor of two refs, or None when they share no history."""
    try:
        return git("merge-base", first, second, cwd=worktree).strip() or None
    except GitError:
        return None


def file_at(worktree: Path, ref: str, path: str) -> str | None:
    """A file's text at ``ref``, or None when the file does not exist there."""
    try:
        return git("show", f"{ref}:{path}", cwd=worktree)
    except GitError:
        return None


def start_merge(worktree: Path, other: str, resolved_by_caller: str) -> None:
    """Merge ``other`` into the worktree's branch without committing (git's three-way merge). A
    conflict in ``resolved_by_caller`` is left for the caller to write (``commit_all`` then makes
    the merge commit); a conflict anywhere else aborts the merge and raises MergeConflict."""
    try:
        git("merge", "--no-commit", "--no-ff", "--quiet", other, cwd=worktree)
    except GitError:
        conflicted = [f for f in git("diff", "--name-only", "--diff-filter=U", cwd=worktree).splitlines() if f]
        if not conflicted:
            raise
        elsewhere = sorted(f for f in conflicted if f != resolved_by_caller)
        if elsewhere:
            git("merge", "--abort", cwd=worktree)
            raise MergeConflict(elsewhere) from None
