"""The laws of manifest patches (governance/patches.py), as property tests: a diff applied to its
source gives its target; disjoint patches merge in any order to one hash; overlapping ones report
the conflict that they are."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from governance import manifest, patches
from governance.manifest import manifest_hash

pytestmark = pytest.mark.unit

KEYS = st.text(alphabet="abcxyz~/_0", min_size=1, max_size=4)
SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-3, 3, allow_nan=False) | st.text(max_size=3)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)
DOCS = st.dictionaries(KEYS, VALUES, max_size=6)


@settings(max_examples=300, deadline=None)
@given(DOCS, DOCS)
def test_a_diff_applied_to_its_source_gives_its_target(a, b):
    ops = patches.diff(a, b)
    assert manifest_hash(patches.apply(a, ops)) == manifest_hash(b) if ops else a == b


@st.composite
def disjoint_changes(draw):
    """A base document and two changed copies that touch disjoint top-level members."""
    base = draw(st.dictionaries(st.sampled_from(["k0", "k1", "k2", "k3", "k4", "k5"]), VALUES, max_size=6))
    mine = set(draw(st.sets(st.sampled_from(sorted(base) or ["k0"]))))
    firsts, seconds = dict(base), dict(base)
    for key, target in ((k, firsts if k in mine else seconds) for k in base):
        change = draw(st.sampled_from(["keep", "replace", "remove"]))
        if change == "replace":
            target[key] = draw(VALUES)
        elif change == "remove":
            del target[key]
    firsts.update(draw(st.dictionaries(st.sampled_from(["a0", "a1"]), VALUES, max_size=2)))
    seconds.update(draw(st.dictionaries(st.sampled_from(["b0", "b1"]), VALUES, max_size=2)))
    return base, firsts, seconds, mine


@settings(max_examples=300, deadline=None)
@given(disjoint_changes())
def test_disjoint_patches_merge_in_any_order_to_one_hash(case):
    base, firsts, seconds, mine = case
    h = manifest_hash(base)
    made = [{"base_hash": h, "ops": ops} for ops in (patches.diff(base, firsts), patches.diff(base, seconds)) if ops]
    hashes = set()
    for order in itertools.permutations(made):
        result = patches.merge(base, list(order))
        assert result.conflicts == [], result.conflicts
        hashes.add(result.hash)
    if made:
        assert len(hashes) == 1

        def firsts_own(key):
            return key in mine or key.startswith("a")

        both = {k: v for k, v in firsts.items() if firsts_own(k)}
        both.update({k: v for k, v in seconds.items() if not firsts_own(k)})
        assert hashes == {manifest_hash(both)}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, VALUES, min_size=1, max_size=5), st.data())
def test_two_writes_of_one_path_are_a_same_path_conflict(base, data):
    key = data.draw(st.sampled_from(sorted(base)))
    h = manifest_hash(base)
    one = {"base_hash": h, "ops": [{"op": "replace", "path": f"/{_escape(key)}", "value": 1}]}
    two = {"base_hash": h, "ops": [{"op": "remove", "path": f"/{_escape(key)}"}]}
    result = patches.merge(base, [one, two])
    assert [(c.kind, c.path, c.patches) for c in result.conflicts] == [("same_path", f"/{_escape(key)}", [0, 1])]
    assert result.hash is None


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def test_a_write_inside_a_replaced_member_is_a_prefix_overlap():
    base = manifest.default_document(params={"max_resources": 120.0})
    h = manifest_hash(base)
    whole = {"base_hash": h, "ops": [{"op": "replace", "path": "/approvals", "value": {"first_traits": 1}}]}
    inner = {"base_hash": h, "ops": [{"op": "replace", "path": "/approvals/ttl_sec", "value": 600}]}
    result = patches.merge(base, [whole, inner])
    assert [(c.kind, c.path, c.ops) for c in result.conflicts] == [("prefix_overlap", "/approvals", [0, 0])]


def test_inserting_into_an_array_overlaps_every_change_of_that_array():
    base = manifest.default_document()
    h = manifest_hash(base)
    insert = {"base_hash": h, "ops": [{"op": "add", "path": "/policy/rules/0", "value": {"id": "x"}}]}
    edit = {"base_hash": h, "ops": [{"op": "replace", "path": "/policy/rules/1/decision", "value": "deny"}]}
    result = patches.merge(base, [insert, edit])
    assert [(c.kind, c.path) for c in result.conflicts] == [("prefix_overlap", "/policy/rules")]


def test_a_failed_test_op_is_a_failed_precondition_and_is_strict_about_types():
    base = {"approvals": {"first_traits": 1}}
    h = manifest_hash(base)
    # 1 == True in Python; a precondition is not fooled by it
    strict = {"base_hash": h, "ops": [{"op": "test", "path": "/approvals/first_traits", "value": True}]}
    result = patches.merge(base, [strict])
    assert [(c.kind, c.path, c.patches, c.ops) for c in result.conflicts] == [
        ("failed_precondition", "/approvals/first_traits", [0], [0])
    ]
    assert "precondition failed" in result.conflicts[0].detail
    ok = {"base_hash": h, "ops": [{"op": "test", "path": "/approvals/first_traits", "value": 1}]}
    assert patches.merge(base, [ok]).conflicts == []


def test_a_patch_of_another_base_is_a_base_mismatch():
    base = {"a": 1}
    result = patches.merge(base, [{"base_hash": "0" * 64, "ops": [{"op": "replace", "path": "/a", "value": 2}]}])
    assert [c.kind for c in result.conflicts] == ["base_mismatch"]


def test_a_test_op_and_a_write_of_its_path_conflict():
    base = {"a": 1, "b": 2}
    h = manifest_hash(base)
    guard = {
        "base_hash": h,
        "ops": [{"op": "test", "path": "/a", "value": 1}, {"op": "replace", "path": "/b", "value": 3}],
    }
    change = {"base_hash": h, "ops": [{"op": "replace", "path": "/a", "value": 5}]}
    assert [(c.kind, c.path, c.ops) for c in patches.merge(base, [guard, change]).conflicts] == [
        ("same_path", "/a", [0, 0])
    ]


@pytest.mark.parametrize(
    "ops, message",
    [
        ([], "non-empty list"),
        ([{"op": "frobnicate", "path": "/a"}], "'op' must be one of"),
        ([{"op": "add", "path": "a", "value": 1}], "JSON pointer"),
        ([{"op": "add", "path": "/a"}], "needs a 'value'"),
        ([{"op": "remove", "path": "/a", "value": 1}], "unexpected member"),
        ([{"op": "move", "path": "/a"}], "'from' must be a JSON pointer"),
        ([{"op": "add", "path": "/a", "value": float("nan")}], "not a finite float"),
        ([{"op": "remove", "path": "/missing"}], "op 0 (remove /missing)"),
    ],
)
def test_a_bad_patch_is_refused_naming_the_op(ops, message):
    with pytest.raises(patches.PatchError, match=message.replace("(", r"\(").replace(")", r"\)")):
        patches.apply({"a": 1}, ops)


def test_the_default_manifest_validates_and_a_bad_one_names_the_field():
    doc = manifest.default_document(keep_last=3, params={"max_resources": 120, "base_metabolism": 0.05})
    assert manifest.normalized(doc) == doc
    assert doc["retention"]["keep_last"] == 3
    assert [r["id"] for r in doc["policy"]["rules"]] == ["agents-act", "operators-govern"]
    bad = patches.apply(doc, [{"op": "replace", "path": "/params/max_resources", "value": 5}])
    with pytest.raises(manifest.ManifestError, match=r"/params: .*max_resources: 5 is outside"):
        manifest.validate(bad)
    bad = patches.apply(
        doc,
        [{"op": "add", "path": "/policy/rules/-", "value": {"id": "agents-act", "decision": "deny", "actions": ["*"]}}],
    )
    with pytest.raises(manifest.ManifestError, match="used twice"):
        manifest.validate(bad)
    bad = patches.apply(doc, [{"op": "add", "path": "/surprise", "value": 1}])
    with pytest.raises(manifest.ManifestError, match="/surprise: Extra inputs"):
        manifest.validate(bad)


def test_a_patch_that_doubles_the_document_is_refused_within_its_budget():
    base = manifest.default_document()
    ops = [{"op": "add", "path": "/policy/x", "value": {}}]
    ops += [{"op": "copy", "from": "/policy", "path": f"/policy/x/c{i}"} for i in range(199)]
    with pytest.raises(patches.PatchError, match="would pass 65,536 bytes") as refused:
        patches.apply(base, ops)
    assert refused.value.op_index is not None and refused.value.op_index < 12  # log2(64 KiB / 0.4 KB) ops
    small = patches.apply(base, ops[:4], max_bytes=patches.MAX_DOCUMENT_BYTES)  # within the budget: applied
    assert set(small["policy"]["x"]) == {"c0", "c1", "c2"}


def test_a_patch_that_adds_past_the_budget_is_refused_before_applying_it():
    ops = [{"op": "add", "path": f"/params/p{i}", "value": "x" * 1000} for i in range(100)]
    with pytest.raises(patches.PatchError, match=r"op 6[0-9] .*would pass") as refused:
        patches.apply(manifest.default_document(), ops)
    assert refused.value.path is not None and refused.value.path.startswith("/params/p")
