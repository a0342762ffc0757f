"""GEPA optimisation steps: identifiers, branch names and where a client's files live.

Every id that reaches a git command line or a path is checked here first, strictly: a git
branch or a directory name made from request data must never be able to name anything else."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit, urlunsplit

from genesis import netpolicy

CLIENT_ID_PATTERN = r"^client_[0-9a-f]{16}$"
# Program ids come from the optimiser (GEPA): letters, digits, '_' and '-', at most 64.
PROGRAM_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
# ``module.ClassName`` of the DSPy module to run (dotted Python identifiers).
ENTRY_POINT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
BRANCH_PREFIX = "program_"

_CLIENT_ID = re.compile(CLIENT_ID_PATTERN)
_PROGRAM_ID = re.compile(PROGRAM_ID_PATTERN)


class InvalidId(ValueError):
    pass


def new_client_id() -> str:
    return f"client_{secrets.token_hex(8)}"


def check_client_id(client_id: str) -> str:
    if not isinstance(client_id, str) or not _CLIENT_ID.match(client_id):
        raise InvalidId(f"client_id {client_id!r} is not of the form client_<16 hex digits>")
    return client_id


def check_program_id(program_id: str) -> str:
    if not isinstance(program_id, str) or not _PROGRAM_ID.match(program_id):
        raise InvalidId(
            f"program_id {program_id!r} must be 1-64 letters, digits, '_' or '-' (not starting with '_' or '-')"
        )
    return program_id


def branch_name(program_id: str) -> str:
    """The git branch of a program version (codeevolver-gepa.md: ``program_{program_id}``)."""
    return BRANCH_PREFIX + check_program_id(program_id)


def workflow_id(program_id: str) -> str:
    return f"gepa-{check_program_id(program_id)}"


def connect_workflow_id(client_id: str) -> str:
    return f"gepa-connect-{check_client_id(client_id)}"


def check_relative_path(path: str, field: str = "program_json_path") -> str:
    """A path inside the repository: relative, no '..', no hidden git internals."""
    if not isinstance(path, str) or not path or len(path) > 512 or "\\" in path or "\x00" in path:
        raise InvalidId(f"{field} must be a non-empty relative path of at most 512 characters")
    pure = PurePosixPath(path)
    if pure.is_absolute() or any(part in ("..", ".git") for part in pure.parts):
        raise InvalidId(f"{field} {path!r} must be relative to the repository root, without '..' or .git")
    return pure.as_posix()


class ClientDirs:
    """Where one client's files live under the GEPA workspace: ``clients/<client_id>/repo`` (the
    one clone) and ``clients/<client_id>/worktrees/<program_id>`` (one worktree per step). Only
    the worktrees folder of a client is ever mounted into that client's containers."""

    def __init__(self, workspace: Path, client_id: str):
        self.root = Path(workspace) / "clients" / check_client_id(client_id)
        self.repo = self.root / "repo"
        self.worktrees = self.root / "worktrees"
        self.egress_file = self.root / "egress-allow.json"  # the client's own allow-list (connect-git)

    def worktree(self, program_id: str) -> Path:
        return self.worktrees / check_program_id(program_id)


class CandidateRejected(ValueError):
    pass


def predictor_names(program_json: dict) -> list[str]:
    """The components of a saved DSPy program: entries with a signature (``metadata`` is not one)."""
    return sorted(k for k, v in program_json.items() if isinstance(v, dict) and isinstance(v.get("signature"), dict))


def apply_candidate(program_json: dict, candidate: dict[str, str]) -> dict:
    """GEPA's candidate (component name -> new instruction text) applied to ``program.json``: each
    named predictor's ``signature.instructions`` is replaced. An unknown component is an error
    naming the known ones, so a typo never silently evaluates the unchanged program."""
    known = predictor_names(program_json)
    unknown = sorted(set(candidate) - set(known))
    if unknown:
        raise CandidateRejected(f"candidate names unknown component(s) {unknown}; program.json has {known}")
    updated = json.loads(json.dumps(program_json))  # a deep copy
    for name, instructions in candidate.items():
        updated[name]["signature"]["instructions"] = instructions
    return updated


def check_repo_url(url: str, local_roots: str, allow_http: bool = False) -> str:
    """What /connect-git may clone: an ``https://`` URL without credentials, or a local path /
    ``file://`` URL under one of ``local_roots`` (comma separated; GENESIS_GEPA_LOCAL_REPO_ROOTS).
    Other transports (ssh, git://, ext::, ...) are refused. Returns what to hand to git."""
    if not isinstance(url, str) or not url.strip() or len(url) > 2048 or any(c in url for c in "\x00\n\r"):
        raise InvalidId("repo_url must be a non-empty URL or path of at most 2048 characters")
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme == "https" or (allow_http and parts.scheme == "http"):
        if not parts.hostname or parts.username or parts.password or parts.query or parts.fragment:
            raise InvalidId(
                "repo_url must be https://host/owner/repo without credentials, query or fragment "
                "(private repositories: pass installation_id)"
            )
        try:
            host, port = netpolicy.canonical_host(parts.hostname), parts.port
        except (netpolicy.Refused, ValueError) as exc:
            raise InvalidId(f"repo_url host: {exc}") from None
        # git gets the host in its one spelling: the address it is pinned to is looked up by it
        shown = f"[{host}]" if ":" in host else host
        return urlunsplit((parts.scheme, f"{shown}:{port}" if port else shown, parts.path, "", ""))
    if parts.scheme == "file" or (not parts.scheme and url.startswith("/")):
        path = Path(unquote(parts.path) if parts.scheme == "file" else url).resolve()
        roots = [Path(root.strip()).resolve() for root in local_roots.split(",") if root.strip()]
        if not any(path == root or root in path.parents for root in roots):
            raise InvalidId(
                f"local repository {str(path)!r} is not under an allowed directory (GENESIS_GEPA_LOCAL_REPO_ROOTS)"
                if roots
                else "local repositories are not enabled on this server (GENESIS_GEPA_LOCAL_REPO_ROOTS is empty)"
            )
        return str(path)
    raise InvalidId(
        f"repo_url scheme {parts.scheme or url.split(':', 1)[0]!r} is not supported: use https:// "
        "(or a local path / file:// URL where the server allows it)"
    )


MAX_EGRESS_ENTRIES = 32


def check_egress_allow(entries: list[str]) -> list[str]:
    """A client's own egress allow-list: ``host:port`` entries (a DNS name, an IPv4 address or a
    bracketed IPv6 address, and a port) in canonical form (genesis/netpolicy.py), so ``0x7f.1:80``
    is ``127.0.0.1:80``. Whether the server may reach them is the caller's check (it resolves)."""
    if len(entries) > MAX_EGRESS_ENTRIES:
        raise InvalidId(f"egress_allow has {len(entries)} entries; at most {MAX_EGRESS_ENTRIES}")
    checked = []
    for entry in entries:
        try:
            host, port = netpolicy.split_host_port(str(entry))
        except ValueError as exc:
            raise InvalidId(
                f"egress_allow entry {entry!r} must be host:port (a DNS name, an IPv4 address or "
                f"[IPv6 address], and a port 1-65535): {exc}"
            ) from None
        checked.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return sorted(set(checked))
