"""The Claude Agent SDK backend of GEPA code mutations (GENESIS_GEPA_CODER_BACKEND=claude_agent_sdk).

Runs in a sandbox container, never in the worker: the program's worktree is mounted read-only at
/workspace and copied to a writable tmpfs (/tmp/work) where Claude Code edits it with Read, Edit,
Write, Glob and Grep only (no shell, no web), within a turn limit and a timeout. The SDK (and the
Claude Code binary its wheel bundles) comes from the read-only coder environment on PYTHONPATH.
The model is reached through the egress gateway (ANTHROPIC_BASE_URL), which adds the key: the
container holds a placeholder. It prints one JSON line, like gepa_steps/coding_agent.py:

    {"ok": true, "patch": "diff --git ..."}   or   {"ok": false, "error": "..."}

The patch is the difference between /workspace and the edited copy, in git's format, for the
worker to ``git apply`` and commit."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys

WORKSPACE = "/workspace"
WORKING_COPY = "/tmp/work"
TOOLS = ["Read", "Edit", "Write", "Glob", "Grep"]
SKIPPED = shutil.ignore_patterns(".git", "__pycache__", "*.pyc")
SYSTEM_APPEND = (
    "You are improving a DSPy program in the current directory. Make the requested change with the "
    "smallest edit, using the file tools only, then reply with one sentence saying what you changed."
)


def read_lines(path: str) -> list[str] | None:
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        data = handle.read()
    if b"\0" in data:
        raise ValueError(f"{os.path.relpath(path, WORKING_COPY)}: binary files are not supported")
    return data.decode("utf-8", errors="surrogateescape").splitlines(keepends=True)


def hunk_lines(lines: list[str]) -> list[str]:
    """difflib's lines, with git's marker after a last line that has no newline."""
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return out


def relative_files(root: str) -> set[str]:
    found: set[str] = set()
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__")]
        found.update(
            os.path.relpath(os.path.join(folder, n), root) for n in names if n != ".git" and not n.endswith(".pyc")
        )  # a worktree's .git is a file
    return found


def git_diff(before_root: str, after_root: str) -> str:
    """A git-format unified diff from one tree to the other (new, changed and deleted text files)."""
    parts = []
    for name in sorted(relative_files(before_root) | relative_files(after_root)):
        before, after = read_lines(os.path.join(before_root, name)), read_lines(os.path.join(after_root, name))
        if before == after:
            continue
        header = [f"diff --git a/{name} b/{name}\n"]
        if before is None:
            header.append("new file mode 100644\n")
        elif after is None:
            header.append("deleted file mode 100644\n")
        body = list(
            difflib.unified_diff(
                before or [],
                after or [],
                "/dev/null" if before is None else f"a/{name}",
                "/dev/null" if after is None else f"b/{name}",
                n=3,
            )
        )
        if body:
            parts.append("".join(header) + "".join(body[:2]) + "".join(hunk_lines(body[2:])))
    return "".join(parts)


def prompt(change_request: str, change_location: str | None) -> str:
    where = f"\nWhere: {change_location}" if change_location else ""
    return f"Change request: {change_request}{where}"


async def run_agent(task: dict) -> str:
    import anyio
    from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, ResultMessage, TextBlock, query

    options = ClaudeAgentOptions(
        tools=TOOLS,
        allowed_tools=TOOLS,
        permission_mode="acceptEdits",
        cwd=WORKING_COPY,
        max_turns=int(task.get("max_turns", 30)),
        model=task.get("model") or None,
        setting_sources=[],
        system_prompt={"type": "preset", "preset": "claude_code", "append": SYSTEM_APPEND},
    )
    summary, error = "", None
    with anyio.fail_after(float(task.get("timeout_s", 300))):
        async for message in query(prompt=prompt(task["change_request"], task.get("change_location")), options=options):
            if isinstance(message, AssistantMessage):
                summary = "".join(b.text for b in message.content if isinstance(b, TextBlock)) or summary
            elif isinstance(message, ResultMessage) and message.is_error:
                error = f"the agent stopped: {message.subtype} {getattr(message, 'result', '') or ''}".strip()
    if error:
        raise RuntimeError(error)
    return summary


def main() -> None:
    task = json.loads(sys.stdin.readline())
    try:
        import anyio
        import claude_agent_sdk  # noqa: F401
    except ImportError as exc:
        print(
            json.dumps(
                {
                    "ok": False,
                    "error": f"the Claude Agent SDK is not installed in the coder environment ({exc}); "
                    "GENESIS_GEPA_CLAUDE_SDK_REQUIREMENT names the package to install",
                }
            )
        )
        return
    shutil.copytree(WORKSPACE, WORKING_COPY, ignore=SKIPPED, symlinks=True)
    try:
        summary = anyio.run(run_agent, task)
        patch = git_diff(WORKSPACE, WORKING_COPY)
    except TimeoutError:
        print(json.dumps({"ok": False, "error": f"the Claude agent did not finish within {task.get('timeout_s')} s"}))
        return
    except Exception as exc:  # noqa: BLE001 - reported to the worker
        print(json.dumps({"ok": False, "error": f"the Claude agent failed: {type(exc).__name__}: {str(exc)[-1500:]}"}))
        return
    if not patch:
        print(json.dumps({"ok": False, "error": f"the Claude agent changed no file (it said: {summary[:500]!r})"}))
        return
    print(json.dumps({"ok": True, "patch": patch, "summary": summary[:2000]}))


if __name__ == "__main__":
    main()
