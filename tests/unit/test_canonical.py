"""genesis/canonical.py: golden vectors of the canonical CBOR that digests and signatures rely on."""

import cbor2
import pytest

from genesis import canonical

GOLDEN = [
    (None, "f6"),
    (True, "f5"),
    (0, "00"),
    (23, "17"),
    (24, "1818"),
    (-1, "20"),
    (2**64, "c249010000000000000000"),
    (1.5, "f93e00"),
    (0.1, "fb3fb999999999999a"),
    (-0.0, "f98000"),
    (100000.0, "fa47c35000"),
    ("", "60"),
    ("é", "62c3a9"),
    (b"\x00\xff", "4200ff"),
    ([1, [2, 3]], "8201820203"),
    ((1, 2), "820102"),
    ({"b": 1, "a": 2, "aa": 3}, "a3616102616201626161" + "03"),
    ({10: "x", 1: "y", -1: "z"}, "a30161790a617820617a"),
]


@pytest.mark.parametrize(("value", "hex_bytes"), GOLDEN)
def test_golden_vectors(value, hex_bytes):
    assert canonical.encode(value).hex() == hex_bytes
    decoded = canonical.decode(bytes.fromhex(hex_bytes))
    assert canonical.encode(decoded) == bytes.fromhex(hex_bytes)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), [1, {"x": float("nan")}]])
def test_non_finite_floats_are_refused(bad):
    with pytest.raises(canonical.NonCanonical, match="not a finite float"):
        canonical.encode(bad)


@pytest.mark.parametrize("bad", [{1.5: 1}, {(1,): 1}, {1, 2}, object(), bytearray(b"x")])
def test_types_without_a_canonical_form_are_refused(bad):
    with pytest.raises(canonical.NonCanonical):
        canonical.encode(bad)


@pytest.mark.parametrize(
    "data",
    [
        cbor2.dumps({"b": 1, "a": 2}),  # keys out of order
        bytes.fromhex("fb3ff8000000000000"),  # 1.5 in a wider float than needed
        bytes.fromhex("1801"),  # 1 with a longer head than needed
        bytes.fromhex("f97e00"),  # NaN
        bytes.fromhex("f97c00"),  # +inf
        bytes.fromhex("0101"),  # trailing bytes
        bytes.fromhex("c1182a"),  # a tag (epoch time)
        bytes.fromhex("ff"),  # not CBOR
    ],
)
def test_decode_accepts_only_the_canonical_bytes(data):
    with pytest.raises(canonical.NonCanonical):
        canonical.decode(data)


def test_digest_is_sha256_of_the_encoding():
    import hashlib

    value = {"tick": 7, "inputs": [b"\x01", 2.5]}
    assert canonical.digest(value) == hashlib.sha256(canonical.encode(value)).digest()
    assert canonical.digest({"a": 1, "b": 2}) == canonical.digest({"b": 2, "a": 1})
