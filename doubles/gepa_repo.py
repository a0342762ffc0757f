"""A client repository for GEPA tests, made with git: a small DSPy program (``qa.QA``, one
predictor ``answer``) and its ``program.json`` as DSPy's ``save()`` writes it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

QA_SOURCE = """import dspy


class QA(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        return self.answer(question=question)
"""

RAISING_SOURCE = """import dspy


class Broken(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        raise ValueError("this program always fails: " + question)
"""

# Reports what a program inside the sandbox can reach and see (the egress and isolation tests).
PROBE_SOURCE = """import json
import os
import socket
import urllib.error
import urllib.request

import dspy


class Probe(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        targets = json.loads(question)
        seen = {}
        for name, (host, port) in targets["direct"].items():
            sock = socket.socket()
            sock.settimeout(1)
            try:
                sock.connect((host, port))
                seen[name] = "open"
            except OSError as exc:
                seen[name] = "blocked: " + type(exc).__name__
            finally:
                sock.close()
        for name, url in targets["proxied"].items():
            try:
                seen[name] = urllib.request.urlopen(url, timeout=10).read().decode()
            except urllib.error.HTTPError as exc:
                seen[name] = "HTTP %d" % exc.code
            except OSError as exc:
                seen[name] = "error: %s" % exc
        seen["worktrees"] = sorted(os.listdir("/worktrees"))
        seen["paths"] = {path: os.path.exists(path) for path in targets["paths"]}
        seen["secrets"] = sorted(k for k in os.environ if "KEY" in k or "TOKEN" in k or "SECRET" in k)
        return dspy.Prediction(answer=json.dumps(seen))
"""

SLOW_SOURCE = '''import time

import dspy


class Slow(dspy.Module):
    """The QA program, after a pause: long enough to kill a worker in the middle of its run."""

    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        time.sleep(6)
        return self.answer(question=question)
'''


def program_json(instructions: str = "Answer the question.") -> dict:
    """What ``qa.QA().save('program.json')`` writes (DSPy 3.4), with these instructions."""
    return {
        "answer": {
            "traces": [],
            "train": [],
            "demos": [],
            "signature": {
                "instructions": instructions,
                "fields": [
                    {"prefix": "Question:", "description": "${question}"},
                    {"prefix": "Answer:", "description": "${answer}"},
                ],
            },
            "lm": None,
        },
        "metadata": {"dependency_versions": {"python": "3.11", "dspy": "3.4.1", "cloudpickle": "3.1"}},
    }


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "qa.py").write_text(QA_SOURCE)
    (path / "broken.py").write_text(RAISING_SOURCE)
    (path / "probe.py").write_text(PROBE_SOURCE)
    (path / "slow.py").write_text(SLOW_SOURCE)
    (path / "program.json").write_text(json.dumps(program_json(), indent=2))
    (path / "requirements.txt").write_text("# DSPy is provided by Genesis\n")
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
    }
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "."],
        ["git", "commit", "-q", "-m", "a DSPy QA program"],
    ):
        subprocess.run(argv, cwd=path, env=env, check=True)
    return path
