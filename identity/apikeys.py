"""API keys of external agents and of operators: issue, store hashed, verify.

An agent's key is ``gen_<prefix>_<secret>``, an operator's ``genop_<prefix>_<secret>`` (the
different head keeps one from being taken for the other): ``prefix`` is 8 random hex digits
stored in clear (indexed, used only to find the row), ``secret`` is 32 random bytes (urlsafe
base64). The database keeps
``HMAC-SHA256(pepper, key)``, where the pepper is a server secret that never enters the
database, and verification compares digests with ``hmac.compare_digest``.

Why HMAC-SHA256 and not a slow KDF (argon2, bcrypt, scrypt): those exist to make guessing
*low-entropy passwords* from a leaked hash expensive. These keys carry 256 random bits, so a
guess costs nothing to reject either way, and a stolen table without the pepper cannot even be
used to test guesses. A slow KDF would add tens of milliseconds of CPU to every write request
for no added safety; HMAC costs about a microsecond.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

KEY_SCHEME = "hmac-sha256"
AGENT_KEY_HEAD = "gen"
OPERATOR_KEY_HEAD = "genop"
_KEY_PATTERNS = {
    head: re.compile(rf"^{head}_([0-9a-f]{{8}})_([A-Za-z0-9_-]{{43}})$") for head in (AGENT_KEY_HEAD, OPERATOR_KEY_HEAD)
}
PEPPER_FILE = "api-key-pepper"
AGENT_ID_PREFIX = "agt_"


@dataclass(frozen=True)
class IssuedKey:
    key: str  # shown to the agent once
    prefix: str  # stored in clear, for lookup
    digest: str  # stored: hex HMAC-SHA256(pepper, key)


def new_agent_id() -> str:
    return f"{AGENT_ID_PREFIX}{secrets.token_hex(6)}"


def issue(pepper: bytes, head: str = AGENT_KEY_HEAD) -> IssuedKey:
    prefix = secrets.token_hex(4)
    key = f"{head}_{prefix}_{secrets.token_urlsafe(32)}"
    return IssuedKey(key=key, prefix=prefix, digest=digest(pepper, key))


def digest(pepper: bytes, key: str) -> str:
    return hmac.new(pepper, key.encode("utf-8"), hashlib.sha256).hexdigest()


def prefix_of(key: str, head: str = AGENT_KEY_HEAD) -> str | None:
    """The lookup prefix of a well-formed key of this kind, or None for anything that cannot be one."""
    match = _KEY_PATTERNS[head].match(key)
    return match.group(1) if match else None


def matches(pepper: bytes, key: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(pepper, key), stored_digest)


_NO_DIGEST = "0" * 64


def matches_row(pepper: bytes, key: str, stored_digest: str | None) -> bool:
    """``matches`` against the digest of the row the key's prefix found, or None when none was
    found: the comparison is made either way, so a miss takes as long as a mismatch."""
    return matches(pepper, key, stored_digest or _NO_DIGEST) and stored_digest is not None


def load_pepper(configured: str, state_dir: Path, file_name: str = PEPPER_FILE) -> bytes:
    """The configured pepper, or the installation's own one from ``state_dir`` (created on
    first use, mode 0600, atomically so concurrent API processes agree on one value).
    Other server secrets (the webhook secret) are kept the same way under another file name."""
    if configured:
        return configured.encode("utf-8")
    path = state_dir / file_name
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = state_dir / f".{file_name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_hex(32).encode())
    try:
        os.link(tmp, path)  # fails if another process won the race: then theirs is the pepper
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes().strip()
