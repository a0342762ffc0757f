"""RFC 6902 patches of the manifest: check, apply, diff and merge, with conflicts reported rather
than resolved.

A patch is ``{base_hash, ops}``: its ops apply to the manifest whose hash is ``base_hash`` and to
no other. ``test`` ops are preconditions, compared strictly (``1`` is not ``true`` nor ``1.0``,
unlike a plain ``==``). The ops themselves are applied by ``jsonpatch``.

Merging several patches of one base reports, instead of guessing:

- ``base_mismatch``: a patch was written against another manifest;
- ``failed_precondition``: a patch does not apply to the base on its own (a ``test`` op fails, a
  path is missing);
- ``same_path``: two patches touch the same path (one of them writes it);
- ``prefix_overlap``: one patch touches a path inside another's (``/policy`` and
  ``/policy/rules/0``).

An op that adds or removes an element of an array shifts the elements after it, so its footprint
is the whole array. Patches without conflicts touch disjoint parts of the document, so they apply
in any order to the same result: the merged patch is their ops in the order given.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonpatch
import jsonpointer

from genesis import canonical

from .manifest import manifest_hash

OPS = ("add", "remove", "replace", "move", "copy", "test")
MAX_OPS = 200
MAX_PATH = 500
# A patched document may grow to this many bytes of compact JSON (the default manifest is under
# 1 KB): checked before each op is applied, so a patch whose ``copy`` ops double the document
# is refused after a few of them, having done no more work than the budget allows.
MAX_DOCUMENT_BYTES = 64 * 1024
MAX_APPLY_S = 0.5  # and a patch is refused once applying it took this long

ConflictKind = Literal["base_mismatch", "failed_precondition", "same_path", "prefix_overlap"]


class PatchError(ValueError):
    """A patch that is malformed or does not apply; the message names the op and why."""

    def __init__(self, message: str, op_index: int | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.op_index = op_index
        self.path = path


@dataclass(frozen=True)
class PatchConflict:
    path: str
    kind: ConflictKind
    patches: list[int]  # indices of the patches involved
    ops: list[int]  # the index of the op within each of those patches (-1: the whole patch)
    detail: str = ""

    def to_data(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "patches": self.patches, "ops": self.ops, "detail": self.detail}


@dataclass
class MergeResult:
    ops: list[dict[str, Any]]
    conflicts: list[PatchConflict] = field(default_factory=list)
    document: dict[str, Any] | None = None  # the base with the merged ops applied (no conflicts)
    hash: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {"ops": self.ops, "conflicts": [c.to_data() for c in self.conflicts], "hash": self.hash}


def check_ops(ops: Any) -> list[dict[str, Any]]:
    """The ops if they are well-formed RFC 6902 operations (PatchError names the first that is not)."""
    if not isinstance(ops, list) or not ops:
        raise PatchError("a patch is a non-empty list of operations")
    if len(ops) > MAX_OPS:
        raise PatchError(f"a patch has at most {MAX_OPS} operations, this one has {len(ops)}")
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError(f"op {i}: an operation is an object", i)
        name = op.get("op")
        if name not in OPS:
            raise PatchError(f"op {i}: 'op' must be one of {', '.join(OPS)}", i)
        allowed = {"op", "path"} | ({"value"} if name in ("add", "replace", "test") else set())
        allowed |= {"from"} if name in ("move", "copy") else set()
        extra = set(op) - allowed
        if extra:
            raise PatchError(f"op {i}: unexpected member(s) {sorted(extra)} for {name}", i)
        for key in ("path", "from") if name in ("move", "copy") else ("path",):
            pointer = op.get(key)
            if not isinstance(pointer, str) or len(pointer) > MAX_PATH or (pointer and not pointer.startswith("/")):
                raise PatchError(f"op {i}: '{key}' must be a JSON pointer ('' or starting with /)", i)
            try:
                jsonpointer.JsonPointer(pointer)
            except jsonpointer.JsonPointerException as exc:
                raise PatchError(f"op {i}: '{key}': {exc}", i) from None
        if name in ("add", "replace", "test"):
            if "value" not in op:
                raise PatchError(f"op {i}: {name} needs a 'value'", i)
            try:
                canonical.encode(op["value"])
            except canonical.NonCanonical as exc:
                raise PatchError(f"op {i}: value: {exc}", i) from None
    return ops


def _same(a: Any, b: Any) -> bool:
    """Strict JSON equality: types matter (canonical bytes)."""
    try:
        return canonical.encode(a) == canonical.encode(b)
    except canonical.NonCanonical:
        return False


def _json_size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def apply(
    document: dict[str, Any],
    ops: list[dict[str, Any]],
    max_bytes: int = MAX_DOCUMENT_BYTES,
    max_seconds: float = MAX_APPLY_S,
) -> dict[str, Any]:
    """A new document: ``ops`` applied in order to a copy of ``document``, within a budget: the
    document's size (compact JSON, counted as an upper bound: what an op adds or copies is added,
    nothing removed is taken off) may not pass ``max_bytes`` and applying may not take longer
    than ``max_seconds`` (PatchError, before the op that would pass either)."""
    check_ops(ops)
    started = time.monotonic()
    doc: Any = copy.deepcopy(document)
    size = _json_size(doc)
    for i, op in enumerate(ops):
        path = op["path"]
        if time.monotonic() - started > max_seconds:
            raise PatchError(f"op {i}: applying the patch took longer than {max_seconds:g} s; it is refused", i, path)
        size += _added_size(doc, op, i)
        if size > max_bytes:
            raise PatchError(
                f"op {i} ({op['op']} {path}): the patched manifest would pass {max_bytes:,} bytes of JSON, "
                "the most a manifest may hold",
                i,
                path,
            )
        if op["op"] == "test":
            try:
                current = jsonpointer.resolve_pointer(doc, path)
            except jsonpointer.JsonPointerException:
                raise PatchError(f"op {i}: precondition failed: {path} does not exist", i, path) from None
            if not _same(current, op["value"]):
                raise PatchError(f"op {i}: precondition failed: {path} is not the value the test expects", i, path)
            continue
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError) as exc:
            raise PatchError(f"op {i} ({op['op']} {path}): {exc}", i, path) from None
    if not isinstance(doc, dict):
        raise PatchError("the patched manifest is no longer an object")
    return doc


def _added_size(doc: Any, op: dict[str, Any], index: int) -> int:
    """The bytes ``op`` may add to ``doc`` (a bound: a replace's old value is not taken off)."""
    if op["op"] in ("add", "replace"):
        return _json_size(op["value"])
    if op["op"] == "copy":
        try:
            return _json_size(jsonpointer.resolve_pointer(doc, op["from"]))
        except jsonpointer.JsonPointerException:
            where = op["path"]
            raise PatchError(f"op {index} (copy {where}): {op['from']} does not exist", index, where) from None
    return 0


def diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Ops that turn ``a`` into ``b`` (apply(a, diff(a, b)) == b)."""
    return [dict(op) for op in jsonpatch.make_patch(a, b).patch]


# -- merging -------------------------------------------------------------------------------


def _tokens(pointer: str) -> tuple[str, ...]:
    return tuple(jsonpointer.JsonPointer(pointer).parts)


def _shifts_array(doc: Any, tokens: tuple[str, ...]) -> bool:
    """Whether adding or removing at ``tokens`` inserts into or removes from an array."""
    if not tokens:
        return False
    try:
        parent = jsonpointer.JsonPointer.from_parts(list(tokens[:-1])).resolve(doc)
    except jsonpointer.JsonPointerException:
        return tokens[-1] == "-" or tokens[-1].isdigit()
    return isinstance(parent, list)


def _footprint(doc: Any, op: dict[str, Any]) -> list[tuple[tuple[str, ...], bool]]:
    """(path, writes) pairs an op touches in ``doc``."""
    name, path = op["op"], _tokens(op["path"])
    if name == "test":
        return [(path, False)]
    touched = []
    if name in ("move", "copy"):
        source = _tokens(op["from"])
        moved = name == "move"
        touched.append((source[:-1] if moved and _shifts_array(doc, source) else source, moved))
    shifting = name in ("add", "move", "copy", "remove") and _shifts_array(doc, path)
    touched.append((path[:-1] if shifting else path, True))
    return touched


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> ConflictKind | None:
    if a == b:
        return "same_path"
    shorter, longer = (a, b) if len(a) < len(b) else (b, a)
    return "prefix_overlap" if longer[: len(shorter)] == shorter else None


def _pointer(tokens: tuple[str, ...]) -> str:
    return jsonpointer.JsonPointer.from_parts(list(tokens)).path


def merge(base: dict[str, Any], patches: list[dict[str, Any]]) -> MergeResult:
    """Merge patches ``[{base_hash, ops}, ...]`` of ``base``: their ops and result, or the conflicts."""
    base_hash = manifest_hash(base)
    conflicts: list[PatchConflict] = []
    footprints: list[list[tuple[int, tuple[str, ...], bool]]] = []
    for p, patch in enumerate(patches):
        ops = check_ops(patch.get("ops"))
        if patch.get("base_hash") != base_hash:
            conflicts.append(PatchConflict("", "base_mismatch", [p], [-1], "written against another manifest"))
        try:
            apply(base, ops)
        except PatchError as exc:
            conflicts.append(
                PatchConflict(
                    exc.path if exc.path is not None else "",
                    "failed_precondition",
                    [p],
                    [exc.op_index if exc.op_index is not None else -1],
                    str(exc),
                )
            )
        footprints.append([(i, path, writes) for i, op in enumerate(ops) for path, writes in _footprint(base, op)])
    seen: set[tuple[int, int, tuple[str, ...]]] = set()
    for p in range(len(patches)):
        for q in range(p + 1, len(patches)):
            for i, a, a_writes in footprints[p]:
                for j, b, b_writes in footprints[q]:
                    if not (a_writes or b_writes):
                        continue
                    kind = _overlap(a, b)
                    where = min(a, b, key=len)
                    if kind is None or (p, q, where) in seen:
                        continue
                    seen.add((p, q, where))
                    conflicts.append(PatchConflict(_pointer(where), kind, [p, q], [i, j]))
    merged = [op for patch in patches for op in patch["ops"]]
    if conflicts:
        return MergeResult(merged, conflicts)
    document = apply(base, merged) if merged else copy.deepcopy(base)
    return MergeResult(merged, [], document, manifest_hash(document))
