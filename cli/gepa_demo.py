"""The offline GEPA quickstart that ``make run`` serves under ``GENESIS_GEPA_DEMO=true``
(docs/gepa.md, "Try it offline").

It makes, once, a small DSPy program in a git repository of its own and a file of examples under
``<state_dir>/gepa-demo``, and serves the scripted OpenAI-compatible LM the tests use
(``doubles/scripted_lm.py``) in this process: a real HTTP server that stands in for an LLM
provider, so the whole loop runs with no network. The worker, API and program containers are
pointed at it through the settings below, and ``demo.json`` tells ``examples/gepa_optimize.py
--demo`` where everything is.

The task is a toy whose answer is known: the scripted LM answers with the question as the
predictor's instructions direct (``PREFIX=<word>``, ``UPPERCASE``), and every example's label
is its question after ``ANSWER:``; GEPA's reflection has to find the directive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from doubles.gepa_repo import make_repo
from doubles.scripted_lm import ScriptedLM
from genesis.config import Settings

QUESTIONS = (
    "the capital of France",
    "two plus two",
    "the colour of the sky",
    "the largest planet",
    "the boiling point of water",
    "the author of Hamlet",
    "the speed of light",
    "the first element",
)
LABEL_PREFIX = "ANSWER:"


@dataclass
class Demo:
    directory: Path
    lm: ScriptedLM
    environment: dict[str, str]  # the settings the started processes need, as variables

    @property
    def command(self) -> str:
        return ".venv/bin/python examples/gepa_optimize.py --demo"

    def close(self) -> None:
        self.lm.close()


def reachable(host: str) -> str:
    """The address a client on this machine uses for a server bound to ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def start(settings: Settings) -> Demo:
    """Make the demo's repository and examples (once), serve the LM, and write ``demo.json``."""
    directory = settings.state_dir / "gepa-demo"
    sources = directory / "sources"
    repo = sources / "qa-program"
    if not (repo / ".git").is_dir():
        make_repo(repo)
    data = directory / "examples.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": f"{LABEL_PREFIX} {q}"}) + "\n" for q in QUESTIONS))
    lm = ScriptedLM("127.0.0.1")
    lm_host = f"127.0.0.1:{lm.port}"
    roots = [r for r in settings.gepa.local_repo_roots.split(",") if r] + [str(sources)]
    private = [p for p in settings.outbound_private_allow.split(",") if p] + [lm_host]
    environment = {
        "GENESIS_GEPA_LM_MODEL": "openai/scripted",
        "GENESIS_GEPA_LM_BASE_URL": lm.base_url,
        "GENESIS_GEPA_LM_API_KEY": "sk-scripted-demo",
        "GENESIS_GEPA_LOCAL_REPO_ROOTS": ",".join(roots),
        # The LM listens on this host's loopback: a private address the gateway reaches only when
        # the operator's allow-list names it.
        "GENESIS_OUTBOUND_PRIVATE_ALLOW": ",".join(private),
    }
    (directory / "demo.json").write_text(
        json.dumps(
            {
                "api": f"http://{reachable(settings.api.host)}:{settings.api.port}",
                "repo": str(repo),
                "entry_point": "qa.QA",
                "program_json": "program.json",
                "data": str(data),
                "label": "answer",
                "reflection_base_url": lm.base_url,
                "reflection_model": "scripted",
            },
            indent=2,
        )
        + "\n"
    )
    return Demo(directory, lm, environment)
