"""genesis/signing.py: Ed25519 receipts. Any changed byte of a receipt or its signature, another
key or another domain tag fails verification; receipts of a rotated key still verify."""

from __future__ import annotations

import random
import stat

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
    # the other key under this key's id: the signature does not verify
    with pytest.raises(signing.ReceiptInvalid, match="does not verify"):
        signing.verify(receipt, {keyring.current: other.public_keys()[other.current]})
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
    ):
        with pytest.raises(signing.ReceiptInvalid, match=words):
            signing.verify(broken, keyring.public_keys())
