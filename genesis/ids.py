"""Identifiers: ``mut_`` + hex for mutations, ``chk_`` + hex for checks; workflow ids derived from them."""

from __future__ import annotations

import hashlib
import re
import secrets

MUTATION_ID_PATTERN = re.compile(r"^mut_[0-9a-f]{6,32}$")


def new_mutation_id() -> str:
    return f"mut_{secrets.token_hex(6)}"


def mutation_id_for_idempotency_key(agent_id: str, key: str) -> str:
    """The same (agent, Idempotency-Key) always names the same mutation, so a retried POST
    lands on the existing workflow instead of creating a second one."""
    digest = hashlib.sha256(f"{agent_id}\0{key}".encode()).hexdigest()
    return f"mut_{digest[:12]}"


def mutation_workflow_id(mutation_id: str) -> str:
    return f"mutation-{mutation_id}"


def new_check_id() -> str:
    """A check records nothing: its id only names its workflow and its sandbox container."""
    return f"chk_{secrets.token_hex(8)}"
