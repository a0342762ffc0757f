"""Signed receipts: Ed25519 signatures over canonical CBOR, one domain tag per kind, each receipt
naming the previous one's hash (docs/receipts.md).

A receipt is a map: ``v`` (1), ``id``, ``kind``, ``domain`` (``genesis/receipt/<kind>/v1``),
``key_id``, ``prev`` (hex sha256 of the previous receipt, or None for the first), ``issued_at``
(UTC, ISO 8601), ``subject`` (what it is about: mutation, agent, trait, journal position, ...),
``body`` (what happened) and ``sig``: the Ed25519 signature of
``domain + b"\\0" + canonical(receipt without sig)``. Its hash is sha256 of the canonical encoding
of the whole receipt. Only the holder of the private key can sign; anyone with the public keys
(``GET /v1/keys``) verifies, offline. The domain tag binds a signature to its kind: a receipt of one
kind cannot be passed off as another.

Keys live in ``<dir>/<key id>.pem`` (PKCS8, mode 0600, dir 0700) with ``<dir>/current`` naming the
signing key; ``make run`` creates the first once (``ensure_keyring``), ``rotate`` adds a new current
one, and old keys stay to verify what they signed. Keys are random: never derived from the world's
seed or anything else guessable.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import itertools
import logging
import os
import re
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from genesis import canonical

ALGORITHM = "Ed25519"
VERSION = 1
KINDS = (
    "mutation.validated",
    "mutation.rejected",
    "mutation.sandbox_verdict",
    "mutation.activated",
    "mutation.observed",
    "mutation.kept",
    "mutation.rolled_back",
    "mutation.failed",
    "mutation.extinct",
    "mutation.revived",
    "trait_set.changed",
    "world.rollback",
    "audit.export",
    "round.settled",
    "journal.archived",
    "journal.deleted",
    "governance.proposed",
    "governance.shadowed",
    "governance.approved",
    "governance.rejected",
    "governance.expired",
    "governance.applied",
    "governance.failed",
)
# The chain's signed head: not in the chain, but a statement of it (its newest receipt, in ``prev``,
# and how many receipts it holds), re-signed as the chain grows and once a minute (``sign_head``).
HEAD_KIND = "chain.head"
FIELDS = ("v", "id", "kind", "domain", "key_id", "prev", "issued_at", "subject", "body", "sig")
CURRENT = "current"
RECEIPT_ID_PATTERN = re.compile(r"^rcpt_[0-9a-f]{24}$")
KEY_ID_PATTERN = re.compile(r"^k_[0-9a-f]{16}$")
HASH_PATTERN = re.compile(r"^[0-9a-f]{64}$")
ISSUED_AT_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
log = logging.getLogger("genesis.signing")


class ReceiptInvalid(Exception):
    """A receipt that does not verify; the message says why."""


def domain(kind: str) -> str:
    return f"genesis/receipt/{kind}/v1"


def key_id_of(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "k_" + hashlib.sha256(raw).hexdigest()[:16]


def public_raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass
class Keyring:
    directory: Path
    current: str
    private: dict[str, Ed25519PrivateKey]

    def public_keys(self) -> dict[str, bytes]:
        return {kid: public_raw(key.public_key()) for kid, key in self.private.items()}


def _write_key(directory: Path, key: Ed25519PrivateKey) -> str:
    kid = key_id_of(key.public_key())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(directory / f"{kid}.pem", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
        f.flush()
        os.fsync(f.fileno())
    return kid


def _set_current(directory: Path, kid: str) -> None:
    tmp = directory / f".{CURRENT}.tmp"
    tmp.write_text(kid + "\n")
    os.chmod(tmp, 0o600)
    tmp.replace(directory / CURRENT)


class _Locked:
    """The key directory, exclusively (two processes starting at once create one key)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        self._file = open(directory / ".lock", "a+")  # noqa: SIM115

    def __enter__(self) -> None:
        fcntl.flock(self._file, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._file, fcntl.LOCK_UN)
        self._file.close()


def ensure_keyring(directory: Path) -> Keyring:
    """The keyring in ``directory``, with a first signing key created if it has none."""
    directory = Path(directory)
    with _Locked(directory):
        if not (directory / CURRENT).exists():
            _set_current(directory, _write_key(directory, Ed25519PrivateKey.generate()))
    return load_keyring(directory)


def rotate(directory: Path) -> str:
    """A new signing key; the old ones stay (they verify what they signed). Its key id."""
    directory = Path(directory)
    with _Locked(directory):
        kid = _write_key(directory, Ed25519PrivateKey.generate())
        _set_current(directory, kid)
    return kid


def load_keyring(directory: Path) -> Keyring:
    directory = Path(directory)
    try:
        current = (directory / CURRENT).read_text().strip()
    except FileNotFoundError:
        raise FileNotFoundError(f"no receipt keys in {directory} (`genesis keys init` creates them)") from None
    _refuse_if_others_may_write(directory)
    private: dict[str, Ed25519PrivateKey] = {}
    for path in sorted(directory.glob("k_*.pem")):
        _refuse_if_others_may_write(path)
        if path.stat().st_mode & 0o077:
            log.warning("%s can be read by other users than its owner: chmod 600 it", path)
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path} is not an Ed25519 key")
        private[key_id_of(key.public_key())] = key
    if current not in private:
        raise ValueError(f"{directory}/{CURRENT} names {current!r}, which is not a key there")
    return Keyring(directory, current, private)


def _refuse_if_others_may_write(path: Path) -> None:
    """Whoever may write the key directory may plant a key and name it current, then forge
    receipts that verify: such a keyring is refused, not used."""
    mode = path.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(
            f"{path} can be written by other users than its owner (mode {stat.S_IMODE(mode):o}): "
            f"chmod {'700' if stat.S_ISDIR(mode) else '600'} it before signing with its keys"
        )


# -- signing and verifying -----------------------------------------------------------------------


def _message(receipt: Mapping[str, Any]) -> bytes:
    unsigned = {k: v for k, v in receipt.items() if k != "sig"}
    return domain(str(receipt["kind"])).encode() + b"\0" + canonical.encode(unsigned)


def sign(
    keyring: Keyring,
    kind: str,
    subject: Mapping[str, Any],
    body: Mapping[str, Any],
    prev: str | None,
    issued_at: datetime | None = None,
) -> dict[str, Any]:
    if kind not in KINDS and kind != HEAD_KIND:
        raise ValueError(f"unknown receipt kind {kind!r}")
    moment = (issued_at or datetime.now(UTC)).astimezone(UTC)
    receipt: dict[str, Any] = {
        "v": VERSION,
        "id": f"rcpt_{secrets.token_hex(12)}",
        "kind": kind,
        "domain": domain(kind),
        "key_id": keyring.current,
        "prev": prev,
        "issued_at": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "subject": dict(subject),
        "body": dict(body),
    }
    receipt["sig"] = keyring.private[keyring.current].sign(_message(receipt))
    return receipt


def sign_head(keyring: Keyring, newest: str, count: int, issued_at: datetime | None = None) -> dict[str, Any]:
    """The chain's head, signed: ``newest`` is the hash of its newest receipt, ``count`` how many
    receipts the chain holds. A listing that ends before it was cut (``head_findings``)."""
    return sign(keyring, HEAD_KIND, {}, {"count": count}, newest, issued_at)


def head_findings(receipts: Sequence[Mapping[str, Any]], head: Mapping[str, Any]) -> list[str]:
    """What a verified head says of a run of the chain (``receipts``, in chain order, already
    linked): empty when the run ends at the head, and, when it starts at the chain's first
    receipt, holds as many receipts as the head counts; otherwise what was left out."""
    if head.get("kind") != HEAD_KIND:
        raise ReceiptInvalid(f"the head is a {head.get('kind')!r} receipt, not a {HEAD_KIND!r}")
    count = head["body"].get("count")
    if type(count) is not int or count < 0:
        raise ReceiptInvalid("the head's body has no count")
    if not receipts:
        return [] if count == 0 else [f"no receipt, but the chain's signed head counts {count}"]
    findings = []
    newest = receipt_hash(receipts[-1])
    if newest != head["prev"]:
        findings.append(
            f"the run ends at {receipts[-1].get('id')}, which is not the chain's newest receipt as of its signed "
            f"head ({head['issued_at']}): receipts after it are left out"
        )
    elif receipts[0].get("prev") is None and len(receipts) != count:
        findings.append(f"the chain holds {count} receipt(s) by its signed head; this whole run holds {len(receipts)}")
    return findings


def receipt_hash(receipt: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical.encode(dict(receipt))).hexdigest()


def verify(receipt: Any, public_keys: Mapping[str, bytes]) -> None:
    """Nothing if ``receipt`` is a well-formed receipt signed by one of ``public_keys`` under its
    kind's domain tag; ReceiptInvalid with the reason otherwise."""
    _check_form(receipt)
    raw = public_keys.get(receipt["key_id"])
    if raw is None:
        raise ReceiptInvalid(f"signed with key {receipt['key_id']}, which is not among the keys given")
    public = _public_key(receipt["key_id"], raw)
    try:
        message = _message(receipt)
    except canonical.NonCanonical as exc:
        raise ReceiptInvalid(f"has no canonical encoding: {exc}") from None
    try:
        public.verify(receipt["sig"], message)
    except InvalidSignature:
        raise ReceiptInvalid(f"the signature does not verify with key {receipt['key_id']}") from None


def _check_form(receipt: Any) -> None:
    """Every field present, of its type and form; the domain tag the one of the kind."""
    if not isinstance(receipt, dict) or set(receipt) != set(FIELDS):
        missing = sorted(set(FIELDS) - set(receipt)) if isinstance(receipt, dict) else list(FIELDS)
        extra = sorted(map(str, set(receipt) - set(FIELDS))) if isinstance(receipt, dict) else []
        raise ReceiptInvalid(f"not a receipt: missing {missing}, unexpected {extra}")
    if type(receipt["v"]) is not int or receipt["v"] != VERSION:
        raise ReceiptInvalid(f"receipt version {receipt['v']!r} is not {VERSION}")
    for name, pattern, form in (
        ("id", RECEIPT_ID_PATTERN, "'rcpt_' followed by 24 hex digits"),
        ("key_id", KEY_ID_PATTERN, "'k_' followed by 16 hex digits"),
        ("issued_at", ISSUED_AT_PATTERN, "a UTC time like 2026-01-31T12:00:00.000000Z"),
    ):
        if type(receipt[name]) is not str or not pattern.match(receipt[name]):
            raise ReceiptInvalid(f"{name} must be {form}")
    kind = receipt["kind"]
    if kind not in KINDS and kind != HEAD_KIND:
        raise ReceiptInvalid(f"unknown kind {kind!r}")
    if receipt["domain"] != domain(kind):
        raise ReceiptInvalid(f"domain tag {receipt['domain']!r} is not the one of kind {kind!r}")
    if type(receipt["sig"]) is not bytes or len(receipt["sig"]) != 64:
        raise ReceiptInvalid("sig must be 64 bytes")
    for name in ("subject", "body"):
        if type(receipt[name]) is not dict:
            raise ReceiptInvalid(f"{name} must be a map")
    prev = receipt["prev"]
    if prev is not None and (type(prev) is not str or not HASH_PATTERN.match(prev)):
        raise ReceiptInvalid("prev must be a sha256 hex digest or null")


def _public_key(key_id: str, raw: Any) -> Ed25519PublicKey:
    """The Ed25519 key of ``raw``, which must be the key ``key_id`` names (an id is its key's hash)."""
    try:
        public = Ed25519PublicKey.from_public_bytes(raw)
    except (ValueError, TypeError):
        raise ReceiptInvalid(f"the key given for {key_id} is not a raw 32-byte Ed25519 public key") from None
    if key_id_of(public) != key_id:
        raise ReceiptInvalid(f"the key given for {key_id} is another key (its id is {key_id_of(public)})")
    return public


def verify_bytes(data: bytes, public_keys: Mapping[str, bytes]) -> dict[str, Any]:
    """The receipt in its canonical bytes, verified (strict: other encodings of it are refused)."""
    try:
        receipt = canonical.decode(data)
    except canonical.NonCanonical as exc:
        raise ReceiptInvalid(f"not a receipt's canonical bytes: {exc}") from None
    verify(receipt, public_keys)
    return receipt


def keys_of_listing(answer: Any) -> dict[str, bytes]:
    """The public keys of a ``GET /v1/keys`` answer, by key id. ValueError when it is not one, or a
    key is not the key its id names (an id is the hash of its key: a listing cannot swap keys)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("keys"), list):
        raise ValueError('not a GET /v1/keys answer: expected {"keys": [...]}')
    keys: dict[str, bytes] = {}
    for i, entry in enumerate(answer["keys"]):
        try:
            key_id, raw = entry["key_id"], base64.b64decode(entry["public_key"], validate=True)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"key {i} of the listing is malformed: {exc}") from None
        if not isinstance(key_id, str):
            raise ValueError(f"key {i} of the listing has no key id")
        try:
            _public_key(key_id, raw)
        except ReceiptInvalid as exc:
            raise ValueError(str(exc)) from None
        keys[key_id] = raw
    return keys


def chain_breaks(receipts: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where consecutive receipts do not link (each must name the previous one's hash): empty for
    an unbroken run of the chain, whatever receipts were left out before its first."""
    breaks = []
    for before, after in itertools.pairwise(receipts):
        if after.get("prev") != receipt_hash(before):
            breaks.append(f"{after.get('id')} does not name the hash of {before.get('id')}, the receipt before it")
    return breaks
