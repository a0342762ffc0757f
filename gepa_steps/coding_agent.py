"""The coding agent of GEPA code mutations: runs in a sandbox container (stdlib only), with the
program's worktree mounted read-only at /workspace. It shows the coding model the repository's
files and the change request and prints the unified diff it answers, as one JSON line:

    {"ok": true, "patch": "diff --git ..."}   or   {"ok": false, "error": "..."}

The worker applies the patch with ``git apply`` (nothing here can write the worktree). The model
is reached through the egress gateway (GENESIS_CODER_URL), which holds its key."""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request

WORKSPACE = "/workspace"
MAX_FILE_BYTES = 64 * 1024
MAX_CONTEXT_BYTES = 400 * 1024
SOURCE_SUFFIXES = (".py", ".json", ".txt", ".md", ".toml", ".cfg", ".yaml", ".yml")
SYSTEM = (
    "GENESIS-CODER. You are a coding agent improving a DSPy program. Make the requested change "
    "with the smallest edit. Reply with a single unified diff (git format, paths a/<file> and "
    "b/<file> relative to the repository root) in a ```diff fenced block, and nothing else."
)


def repository_files() -> list[tuple[str, str]]:
    files: list[tuple[str, str]] = []
    total = 0
    for root, dirs, names in os.walk(WORKSPACE):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(names):
            path = os.path.join(root, name)
            if not name.endswith(SOURCE_SUFFIXES) or os.path.islink(path) or os.path.getsize(path) > MAX_FILE_BYTES:
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            total += len(text)
            if total > MAX_CONTEXT_BYTES:
                return files
            files.append((os.path.relpath(path, WORKSPACE), text))
    return files


def prompt(change_request: str, change_location: str | None) -> str:
    parts = [f"Change request: {change_request}"]
    if change_location:
        parts.append(f"Where: {change_location}")
    for name, text in repository_files():
        parts.append(f"--- file {name} ---\n{text}")
    return "\n\n".join(parts)


def extract_diff(text: str) -> str:
    fenced = re.search(r"```(?:diff|patch)?\n(.*?)```", text, re.S)
    diff = fenced.group(1) if fenced else text
    return diff if diff.endswith("\n") else diff + "\n"


def main() -> None:
    task = json.loads(sys.stdin.readline())
    body = json.dumps(
        {
            "model": os.environ.get("GENESIS_CODER_MODEL", "coder"),
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": prompt(task["change_request"], task.get("change_location"))},
            ],
        }
    )
    request = urllib.request.Request(
        os.environ["GENESIS_CODER_URL"].rstrip("/") + "/chat/completions",
        data=body.encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=float(task.get("timeout_s", 300))) as response:
            answer = json.loads(response.read())["choices"][0]["message"]["content"]
    except Exception as exc:  # noqa: BLE001 - reported to the worker
        print(json.dumps({"ok": False, "error": f"the coding model could not be reached: {type(exc).__name__}: {exc}"}))
        return
    patch = extract_diff(answer or "")
    if "+++ " not in patch and "diff --git" not in patch:
        print(json.dumps({"ok": False, "error": "the coding model's answer contains no unified diff"}))
        return
    print(json.dumps({"ok": True, "patch": patch}))


if __name__ == "__main__":
    main()
