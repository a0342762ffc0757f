"""Crossover of two GEPA programs: the component-wise three-way merge of ``program.json``
(gepa_steps/crossover.py) and git's merge of the parents' code (gepa_steps/gitops.py), on a
real repository in a temporary directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gepa_steps import gitops
from gepa_steps.crossover import merge_program_json


def predictor(instructions: str, demos: list | None = None) -> dict:
    return {"demos": demos or [], "signature": {"instructions": instructions, "fields": []}}


BASE = {"answer": predictor("Answer."), "judge": predictor("Judge."), "metadata": {"dspy": "3.4.1"}}


def test_each_parent_contributes_the_components_it_changed():
    first = {**BASE, "answer": predictor("Answer in one word.")}
    second = {**BASE, "judge": predictor("Judge strictly.")}
    merged, report = merge_program_json(BASE, first, second)
    assert merged == {"answer": first["answer"], "judge": second["judge"], "metadata": BASE["metadata"]}
    assert list(merged) == ["answer", "judge", "metadata"]  # the first parent's order
    assert report.to_data() == {"from_first": ["answer"], "from_second": ["judge"], "conflicts": []}


def test_a_component_both_changed_differently_is_the_first_parents_and_reported():
    first = {**BASE, "answer": predictor("Answer in one word.")}
    second = {**BASE, "answer": predictor("Answer at length."), "judge": predictor("Judge strictly.")}
    merged, report = merge_program_json(BASE, first, second)
    assert merged["answer"] == first["answer"] and merged["judge"] == second["judge"]
    assert report.conflicts == ["answer"] and report.from_second == ["judge"] and report.from_first == []


def test_the_same_change_in_both_parents_is_no_conflict_and_key_order_does_not_count():
    changed = predictor("Answer briefly.")
    reordered = {"signature": changed["signature"], "demos": []}
    merged, report = merge_program_json(BASE, {**BASE, "answer": changed}, {**BASE, "answer": reordered})
    assert merged["answer"] == changed and report.to_data() == {"from_first": [], "from_second": [], "conflicts": []}


def test_additions_and_deletions_follow_the_parent_that_made_them():
    first = {k: v for k, v in BASE.items() if k != "judge"}  # the first parent deleted "judge"
    second = {**BASE, "critic": predictor("Criticise.")}  # the second added "critic"
    merged, report = merge_program_json(BASE, first, second)
    assert "judge" not in merged and merged["critic"] == second["critic"]
    assert report.from_first == ["judge"] and report.from_second == ["critic"]
    # A deletion against a change of the same component is a conflict: the first parent's (deleted) stands.
    merged, report = merge_program_json(BASE, first, {**BASE, "judge": predictor("Judge kindly.")})
    assert "judge" not in merged and report.conflicts == ["judge"]


def test_without_an_ancestors_program_every_difference_is_a_change():
    merged, report = merge_program_json({}, {"a": predictor("x")}, {"a": predictor("y"), "b": predictor("z")})
    assert merged == {"a": predictor("x"), "b": predictor("z")}
    assert report.conflicts == ["a"] and report.from_second == ["b"]


# --- git ------------------------------------------------------------------------------------------


def run(repo: Path, *args: str) -> str:
    return gitops.git(*args, cwd=repo)


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    (path / "qa.py").write_text("def answer(q):\n    return q\n\n\ndef judge(a):\n    return True\n")
    (path / "program.json").write_text(json.dumps(BASE, indent=2))
    run(path, "init", "-q", "-b", "main")
    gitops.commit_all(path, "the ancestor")
    return path


def branch_with(repo: Path, branch: str, files: dict[str, str]) -> None:
    run(repo, "checkout", "-q", "-b", branch, "main")
    for name, text in files.items():
        (repo / name).write_text(text)
    gitops.commit_all(repo, branch)
    run(repo, "checkout", "-q", "main")


def test_parents_changing_different_lines_merge_and_the_commit_has_both(repo, tmp_path):
    source = (repo / "qa.py").read_text()
    branch_with(repo, "first", {"qa.py": source.replace("return q", "return q.strip()")})
    branch_with(repo, "second", {"qa.py": source.replace("return True", "return bool(a)")})
    base = gitops.merge_base(repo, "first", "second")
    assert base == gitops.head_commit(repo, "main")
    worktree = tmp_path / "child"
    gitops.add_worktree(repo, worktree, "child", "first")
    gitops.start_merge(worktree, "second", "program.json")
    commit = gitops.commit_all(worktree, "crossover")
    merged = (worktree / "qa.py").read_text()
    assert "return q.strip()" in merged and "return bool(a)" in merged
    parents = run(worktree, "rev-list", "--parents", "-n", "1", commit).split()[1:]
    assert parents == [gitops.head_commit(repo, "first"), gitops.head_commit(repo, "second")]


def test_a_code_conflict_is_refused_and_leaves_no_merge_behind(repo, tmp_path):
    source = (repo / "qa.py").read_text()
    branch_with(repo, "first", {"qa.py": source.replace("return q", "return q.strip()")})
    branch_with(repo, "second", {"qa.py": source.replace("return q", "return q.lower()")})
    worktree = tmp_path / "child"
    gitops.add_worktree(repo, worktree, "child", "first")
    with pytest.raises(gitops.MergeConflict) as caught:
        gitops.start_merge(worktree, "second", "program.json")
    assert caught.value.files == ["qa.py"] and "qa.py" in str(caught.value)
    assert run(worktree, "status", "--porcelain") == ""  # aborted: the worktree is the first parent's
    with pytest.raises(gitops.GitError):
        gitops.head_commit(worktree, "MERGE_HEAD")


def test_a_conflict_in_program_json_is_left_for_the_component_merge(repo, tmp_path):
    first = {**BASE, "answer": predictor("Answer in one word.")}
    second = {**BASE, "answer": predictor("Answer at length."), "judge": predictor("Judge strictly.")}
    branch_with(repo, "first", {"program.json": json.dumps(first, indent=2)})
    branch_with(repo, "second", {"program.json": json.dumps(second, indent=2)})
    worktree = tmp_path / "child"
    gitops.add_worktree(repo, worktree, "child", "first")
    gitops.start_merge(worktree, "second", "program.json")  # git's conflict: the caller resolves it
    ancestor = json.loads(gitops.file_at(worktree, gitops.merge_base(worktree, "first", "second"), "program.json"))
    merged, report = merge_program_json(ancestor, first, second)
    (worktree / "program.json").write_text(json.dumps(merged, indent=2))
    commit = gitops.commit_all(worktree, "crossover")
    assert json.loads(gitops.file_at(worktree, commit, "program.json")) == merged
    assert report.conflicts == ["answer"] and report.from_second == ["judge"]
    assert gitops.file_at(worktree, commit, "absent.json") is None
