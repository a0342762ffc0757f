"""Crossover of two GEPA programs: the merge rule for their saved ``program.json``.

A program's components are its predictors (top-level entries of ``program.json``). The child
takes each component from the parent that changed it since their common ancestor (the git merge
base), as a three-way merge does for lines, at the grain GEPA itself merges candidates:

- both parents hold the same value: that value;
- one parent left the ancestor's value: the other parent's (its change is kept, a deletion too);
- both changed it, differently: a conflict, resolved to the first parent's value and reported.

The first parent wins conflicts because the caller orders the parents: GEPA proposes a merge
from a frontier pair, and the caller puts the one it trusts more first. Code files are merged by
git (gepa_steps/gitops.py), where a conflicting change is refused, not guessed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_ABSENT = object()


@dataclass
class MergeReport:
    """Where each changed component of the child came from."""

    from_first: list[str] = field(default_factory=list)
    from_second: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # changed by both; the first parent's kept

    def to_data(self) -> dict[str, list[str]]:
        return {"from_first": self.from_first, "from_second": self.from_second, "conflicts": self.conflicts}


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (key order does not matter; a value's type does)."""
    if a is _ABSENT or b is _ABSENT:
        return a is b
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def merge_program_json(base: dict, first: dict, second: dict) -> tuple[dict, MergeReport]:
    """The child's ``program.json`` from its parents' and their ancestor's (``base``: ``{}`` when
    the ancestor had none), and where each changed component came from."""
    merged: dict = {}
    report = MergeReport()
    names = list(first) + [name for name in second if name not in first]
    names += [name for name in base if name not in first and name not in second]
    for name in names:
        ancestor, ours, theirs = base.get(name, _ABSENT), first.get(name, _ABSENT), second.get(name, _ABSENT)
        if _same(ours, theirs):
            chosen = ours
        elif _same(ours, ancestor):
            chosen = theirs
            report.from_second.append(name)
        elif _same(theirs, ancestor):
            chosen = ours
            report.from_first.append(name)
        else:
            chosen = ours
            report.conflicts.append(name)
        if chosen is not _ABSENT:
            merged[name] = chosen
    return merged, report
