"""A client repository for GEPA tests, made with git: a small DSPy program (``qa.QA``, one
predictor ``answer``) and its ``program.json`` as DSPy's ``save()`` writes it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

QA_SOURCE = '''import dspy


class QA(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        return self.answer(question=question)
'''

RAISING_SOURCE = '''import dspy


class Broken(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("question -> answer")

    def forward(self, question):
        raise ValueError("this program always fails: " + question)
'''


def program_json(instructions: str = "Answer the question.") -> dict:
    """What ``qa.QA().save('program.json')`` writes (DSPy 3.4), with these instructions."""
    return {
        "answer": {
            "traces": [], "train": [], "demos": [],
            "signature": {"instructions": instructions,
                          "fields": [{"prefix": "Question:", "description": "${question}"},
                                     {"prefix": "Answer:", "description": "${answer}"}]},
            "lm": None,
        },
        "metadata": {"dependency_versions": {"python": "3.11", "dspy": "3.4.1", "cloudpickle": "3.1"}},
    }


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "qa.py").write_text(QA_SOURCE)
    (path / "broken.py").write_text(RAISING_SOURCE)
    (path / "program.json").write_text(json.dumps(program_json(), indent=2))
    (path / "requirements.txt").write_text("# DSPy is provided by Genesis\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin"}
    for argv in (["git", "init", "-q", "-b", "main"], ["git", "add", "."], ["git", "commit", "-q", "-m", "a DSPy QA program"]):
        subprocess.run(argv, cwd=path, env=env, check=True)
    return path
