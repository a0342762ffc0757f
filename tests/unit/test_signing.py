"""genesis/signing.py: Ed25519 receipts. Any changed byte of a receipt or its signature, another
key or another domain tag fails verification; receipts of a rotated key still verify."""

from __future__ import annotations

import base64
import multiprocessing
import os
import random
import stat
from pathlib import Path

import pytest

from genesis import canonical, signing


@pytest.fixture
def keyring(tmp_path):
    return signing.ensure_keyring(tmp_path / "keys")


def a_receipt(keyring, kind: str = "mutation.kept", prev: str | None = None) -> dict:
    return signing.sign(
        keyring,
        kind,
        {"mutation_id": "mut_abc123", "agent_id": "agt_1", "trait_name": "forager"},
        {"status": "kept", "fitness_delta": 0.125},
        prev,
    )


def test_a_receipt_verifies_and_names_its_kind_key_and_previous(keyring):
    first = a_receipt(keyring)
    second = a_receipt(keyring, "mutation.rolled_back", prev=signing.receipt_hash(first))
    for r in (first, second):
        signing.verify(r, keyring.public_keys())
        assert r["domain"] == f"genesis/receipt/{r['kind']}/v1" and r["key_id"] == keyring.current
    assert second["prev"] == signing.receipt_hash(first) and first["prev"] is None
    assert signing.verify_bytes(canonical.encode(second), keyring.public_keys()) == second


def test_any_changed_byte_of_a_receipt_or_its_signature_fails(keyring):
    receipt = a_receipt(keyring)
    data = canonical.encode(receipt)
    rng = random.Random(5)
    positions = range(len(data)) if len(data) <= 600 else rng.sample(range(len(data)), 600)
    for pos in positions:
        changed = bytearray(data)
        changed[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(signing.ReceiptInvalid):
            signing.verify_bytes(bytes(changed), keyring.public_keys())
    for i in range(64):  # every byte of the signature itself
        forged = dict(receipt, sig=receipt["sig"][:i] + bytes([receipt["sig"][i] ^ 0x01]) + receipt["sig"][i + 1 :])
        with pytest.raises(signing.ReceiptInvalid, match="does not verify"):
            signing.verify(forged, keyring.public_keys())


def test_another_key_or_another_domain_tag_fails(keyring, tmp_path):
    receipt = a_receipt(keyring)
    other = signing.ensure_keyring(tmp_path / "other")
    with pytest.raises(signing.ReceiptInvalid, match="not among the keys"):
        signing.verify(receipt, other.public_keys())
    # the other key under this key's id: an id is its key's hash, so the swap itself shows
    with pytest.raises(signing.ReceiptInvalid, match=f"the key given for {keyring.current} is another key"):
        signing.verify(receipt, {keyring.current: other.public_keys()[other.current]})
    with pytest.raises(signing.ReceiptInvalid, match="not a raw 32-byte Ed25519 public key"):
        signing.verify(receipt, {keyring.current: b"\x01" * 31})
    # the same signature moved to another kind (with that kind's tag): the tag is in what was signed
    moved = dict(receipt, kind="mutation.rolled_back", domain=signing.domain("mutation.rolled_back"))
    with pytest.raises(signing.ReceiptInvalid, match="does not verify"):
        signing.verify(moved, keyring.public_keys())
    with pytest.raises(signing.ReceiptInvalid, match="domain tag"):
        signing.verify(dict(receipt, domain="genesis/receipt/mutation.activated/v1"), keyring.public_keys())


def test_receipts_of_a_rotated_key_still_verify(keyring):
    old = a_receipt(keyring)
    new_id = signing.rotate(keyring.directory)
    rotated = signing.load_keyring(keyring.directory)
    assert rotated.current == new_id != keyring.current and set(rotated.public_keys()) == {keyring.current, new_id}
    new = a_receipt(rotated)
    assert new["key_id"] == new_id
    for r in (old, new):
        signing.verify(r, rotated.public_keys())


def test_the_same_body_under_every_other_kind_fails(keyring):
    """Re-signing is the only way to another kind: the signature of one kind's receipt, under each
    other kind with that kind's own domain tag, verifies for none of them."""
    receipt = a_receipt(keyring, "mutation.validated")
    for kind in signing.KINDS:
        if kind == receipt["kind"]:
            continue
        with pytest.raises(signing.ReceiptInvalid, match="does not verify"):
            signing.verify(dict(receipt, kind=kind, domain=signing.domain(kind)), keyring.public_keys())
        # the same unsigned content signed for real under that kind verifies, with another signature
        resigned = signing.sign(keyring, kind, receipt["subject"], receipt["body"], receipt["prev"])
        signing.verify(resigned, keyring.public_keys())
        assert resigned["sig"] != receipt["sig"]


def _ensure_in_a_process(directory: str, start, found) -> None:
    start.wait()
    found.put(signing.ensure_keyring(Path(directory)).current)


def test_processes_starting_at_once_make_one_key(tmp_path):
    """The worker and the engine start together, each creating the key if there is none: one key."""
    context = multiprocessing.get_context("spawn")
    start, found = context.Event(), context.Queue()
    processes = [
        context.Process(target=_ensure_in_a_process, args=(str(tmp_path / "keys"), start, found)) for _ in range(4)
    ]
    for process in processes:
        process.start()
    start.set()
    ids = {found.get(timeout=60) for _ in processes}
    for process in processes:
        process.join(30)
    assert len(ids) == 1 and [p.name for p in (tmp_path / "keys").glob("*.pem")] == [f"{ids.pop()}.pem"]


def test_a_key_directory_others_may_write_is_refused(tmp_path, caplog):
    keyring = signing.ensure_keyring(tmp_path / "keys")
    pem = tmp_path / "keys" / f"{keyring.current}.pem"
    os.chmod(tmp_path / "keys", 0o770)
    with pytest.raises(PermissionError, match=r"can be written by other users than its owner \(mode 770\): chmod 700"):
        signing.load_keyring(tmp_path / "keys")
    os.chmod(tmp_path / "keys", 0o700)
    os.chmod(pem, 0o666)
    with pytest.raises(PermissionError, match="chmod 600"):
        signing.ensure_keyring(tmp_path / "keys")
    os.chmod(pem, 0o640)  # readable by others: still signs, with a warning
    assert signing.load_keyring(tmp_path / "keys").current == keyring.current
    assert "can be read by other users" in caplog.text


def test_a_key_listing_checks_each_key_against_its_id(keyring, tmp_path):
    other = signing.ensure_keyring(tmp_path / "other")
    mine, theirs = keyring.public_keys()[keyring.current], other.public_keys()[other.current]

    def listing(*pairs):
        return {"keys": [{"key_id": kid, "public_key": base64.b64encode(raw).decode()} for kid, raw in pairs]}

    assert signing.keys_of_listing(listing((keyring.current, mine))) == {keyring.current: mine}
    with pytest.raises(ValueError, match=f"the key given for {keyring.current} is another key"):
        signing.keys_of_listing(listing((keyring.current, theirs)))
    for broken in ({"keys": [{"key_id": "k_1"}]}, {"keys": [{"key_id": "k_1", "public_key": "!!"}]}, [], {}):
        with pytest.raises(ValueError, match=r"malformed|not a GET /v1/keys answer"):
            signing.keys_of_listing(broken)


def test_chain_breaks_name_the_receipt_that_does_not_link(keyring):
    first = a_receipt(keyring)
    second = a_receipt(keyring, prev=signing.receipt_hash(first))
    third = a_receipt(keyring, prev=signing.receipt_hash(second))
    assert signing.chain_breaks([first, second, third]) == [] and signing.chain_breaks([second, third]) == []
    assert signing.chain_breaks([first, third]) == [
        f"{third['id']} does not name the hash of {first['id']}, the receipt before it"
    ]
    assert len(signing.chain_breaks([second, first, third])) == 2


def test_the_key_is_created_once_and_kept_private(tmp_path):
    first = signing.ensure_keyring(tmp_path / "keys")
    again = signing.ensure_keyring(tmp_path / "keys")
    assert first.current == again.current and len(again.private) == 1
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "keys" / f"{first.current}.pem").stat().st_mode) == 0o600
    assert signing.ensure_keyring(tmp_path / "elsewhere").current != first.current  # random, not derived


def test_malformed_receipts_say_what_is_wrong(keyring):
    receipt = a_receipt(keyring)
    for broken, words in (
        ({**receipt, "extra": 1}, "unexpected"),
        ({k: v for k, v in receipt.items() if k != "prev"}, "missing"),
        ({**receipt, "kind": "nope"}, "unknown kind"),
        ({**receipt, "sig": b"short"}, "64 bytes"),
        ({**receipt, "v": 2}, "version"),
        ({**receipt, "v": True}, "version"),
        ({**receipt, "id": "rcpt_../../x"}, "id must be 'rcpt_' followed by 24 hex digits"),
        ({**receipt, "key_id": 7}, "key_id must be"),
        ({**receipt, "issued_at": "yesterday"}, "issued_at must be a UTC time"),
        ({**receipt, "prev": "ab" * 31}, "prev must be a sha256"),
        ({**receipt, "body": [1]}, "body must be a map"),
        ({**receipt, "domain": "genesis/receipt/mutation.kept/v2"}, "domain tag"),
        ([receipt], "not a receipt"),
    ):
        with pytest.raises(signing.ReceiptInvalid, match=words):
            signing.verify(broken, keyring.public_keys())
