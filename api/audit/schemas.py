"""Response bodies of the audit of the world's journal (its events, an agent's timeline) and of
signed receipts and the public keys that verify them, with the receipts' documented examples."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from api.paging import NextCursor
from genesis import signing
from journal.audit import EVENT_KINDS


class AuditEventModel(BaseModel):
    seq: int = Field(description="The journal record's sequence number")
    index: int = Field(description="The event's place among its record's events")
    epoch: int
    tick: int = Field(description="The world's tick after the record")
    kind: str = Field(description=f"One of {', '.join(EVENT_KINDS)}")
    agent_id: str | None
    mutation_id: str | None
    trait_name: str | None
    cause: str | None = Field(description="Why: a rollback's reason, why a trait left, what the host failed at, ...")
    summary: dict[str, Any]


class AuditEventList(BaseModel):
    events: list[AuditEventModel]
    next_cursor: NextCursor = None
    projected_seq: int = Field(description="The last journal record the projection has read (-1: none yet)")


# A real receipt, signed by the current key of EXAMPLE_KEYS (tests/unit/test_receipt_verify.py verifies it).
EXAMPLE_RECEIPT: JsonDict = {
    "v": 1,
    "id": "rcpt_306a324d2146c1b3bf736c11",
    "kind": "mutation.sandbox_verdict",
    "domain": "genesis/receipt/mutation.sandbox_verdict/v1",
    "key_id": "k_5a02454e05e7f91a",
    "prev": "9c1d0e5b7a3f4e2d8c6b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d",
    "issued_at": "2026-11-27T01:37:10.123456Z",
    "subject": {
        "mutation_id": "mut_3fa2c1d4e5",
        "agent_id": "claude-external-1",
        "trait_name": "energy_hoarder",
        "code_hash": "5b2e0c9d8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d",
    },
    "body": {"verdict": "passed"},
    "sig": "Bf8FoWeFIYDNYe76n4a5yDK/CNVpFfM0a9AdbFXBpQHOtjcgWd5kBMWp5WgihO0HJK29gtQSQTy+yi7ehGTFBg==",
    "hash": "93015fd77d99e86dde5ffc5ba617bdba4947b9a244d04869a5c1de650b2f87ac",
    "seq": 42,
    "journal_seq": 1207,
    "cbor": (
        "qmF2AWJpZHgdcmNwdF8zMDZhMzI0ZDIxNDZjMWIzYmY3MzZjMTFjc2lnWEAF/wWhZ4UhgM1h7vqfhrnIMr8I1WkV8zRr0B1sVcGlAc62NyBZ"
        "3mQExanlaCKE7Qckrb2C1BJBPL7KLt6EZMUGZGJvZHmhZ3ZlcmRpY3RmcGFzc2VkZGtpbmR4GG11dGF0aW9uLnNhbmRib3hfdmVyZGljdGRw"
        "cmV2eEA5YzFkMGU1YjdhM2Y0ZTJkOGM2YjFhMGY5ZThkN2M2YjVhNGYzZTJkMWMwYjlhOGY3ZTZkNWM0YjNhMmYxZTBkZmRvbWFpbngrZ2Vu"
        "ZXNpcy9yZWNlaXB0L211dGF0aW9uLnNhbmRib3hfdmVyZGljdC92MWZrZXlfaWRya181YTAyNDU0ZTA1ZTdmOTFhZ3N1YmplY3SkaGFnZW50"
        "X2lkcWNsYXVkZS1leHRlcm5hbC0xaWNvZGVfaGFzaHhANWIyZTBjOWQ4YTdmNmU1ZDRjM2IyYTFmMGU5ZDhjN2I2YTVmNGUzZDJjMWIwYTlm"
        "OGU3ZDZjNWI0YTNmMmUxZGp0cmFpdF9uYW1lbmVuZXJneV9ob2FyZGVya211dGF0aW9uX2lkbm11dF8zZmEyYzFkNGU1aWlzc3VlZF9hdHgb"
        "MjAyNi0xMS0yN1QwMTozNzoxMC4xMjM0NTZa"
    ),
}
EXAMPLE_KEYS: JsonDict = {
    "keys": [
        {
            "key_id": "k_a8c3db14887a8928",
            "algorithm": "Ed25519",
            "public_key": "SpXXZ4hct0rvW5Ibb9n4XOt3HiSE47D7UL3/tLfElZs=",
            "created_at": "2026-11-20T08:00:00+00:00",
            "retired_at": "2026-11-27T01:00:00+00:00",
            "current": False,
        },
        {
            "key_id": "k_5a02454e05e7f91a",
            "algorithm": "Ed25519",
            "public_key": "A/0fs8zpjS0DVAn4l+u0orWuvwbhdtUXs895ogqnbMA=",
            "created_at": "2026-11-27T01:00:00+00:00",
            "retired_at": None,
            "current": True,
        },
    ]
}


class ReceiptModel(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_RECEIPT]})

    v: int = Field(description="The receipt format's version (1)")
    id: str = Field(description="'rcpt_' + 24 hex digits")
    kind: str = Field(description=f"One of {', '.join(signing.KINDS)}")
    domain: str = Field(description="genesis/receipt/<kind>/v1: the domain tag the signature covers")
    key_id: str = Field(description="The key that signed it: 'k_' + 16 hex digits of the sha256 of the public key")
    prev: str | None = Field(description="sha256 (hex) of the previous receipt in the chain; null for the first")
    issued_at: str = Field(description="When it was signed (UTC)")
    subject: dict[str, Any] = Field(description="What it is about: mutation, agent, trait, journal record")
    body: dict[str, Any] = Field(description="What happened: verdict, failure code, fitness, reason")
    sig: str = Field(description="The Ed25519 signature, base64")
    hash: str = Field(description="sha256 (hex) of the receipt's canonical CBOR")
    seq: int = Field(description="Its place in the chain")
    journal_seq: int | None = Field(description="The world journal's record that carries it (null: not yet)")
    cbor: str = Field(description="The receipt's exact canonical CBOR, base64: what was signed (with sig) and hashed")


class ChainHeadModel(BaseModel):
    v: int
    id: str
    kind: str = Field(description=f"{signing.HEAD_KIND!r}")
    domain: str = Field(description=f"{signing.domain(signing.HEAD_KIND)}")
    key_id: str
    prev: str = Field(description="sha256 (hex) of the chain's newest receipt when it was signed")
    issued_at: str = Field(description="When it was signed: with every receipt, and once a minute on a quiet chain")
    subject: dict[str, Any] = Field(description="Empty")
    body: dict[str, Any] = Field(description="count: how many receipts the chain held")
    sig: str = Field(description="The Ed25519 signature, base64")
    hash: str
    cbor: str = Field(description="Its exact canonical CBOR, base64")


class ReceiptList(BaseModel):
    receipts: list[ReceiptModel]
    head: ChainHeadModel | None = Field(
        description="The chain's signed head, read after the receipts: a listing that should reach the chain's end "
        "and stops before this head's receipt was cut (`genesis verify --chain`). Null before the first receipt"
    )
    next_cursor: NextCursor = None


class PublicKeyModel(BaseModel):
    key_id: str = Field(description="'k_' + the first 16 hex digits of the sha256 of the raw public key")
    algorithm: str = signing.ALGORITHM
    public_key: str = Field(description="The raw 32-byte Ed25519 public key, base64")
    created_at: str
    retired_at: str | None = Field(description="When another key became the signing key (it still verifies)")
    current: bool = Field(description="A key that signs now (not retired)")


class KeyList(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_KEYS]})

    keys: list[PublicKeyModel]
