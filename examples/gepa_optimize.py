"""Optimise a DSPy program's prompts with GEPA, evaluating every candidate on a running Genesis.

    python examples/gepa_optimize.py --api http://127.0.0.1:8000 --repo https://github.com/you/qa-program \\
        --program-json program.json --entry-point qa.QA --data examples.jsonl --label answer \\
        --reflection-base-url https://api.openai.com/v1 --reflection-model gpt-4o-mini

``--data`` is a JSON-lines file of examples (inputs and the label field). The metric is exact
match of the program's ``--label`` output with the example's (case and surrounding space
ignored); write your own for real work. The reflection LM's key is read from
$REFLECTION_API_KEY, Genesis' X-API-Key (POST /v1/agents/register) from $GENESIS_API_KEY.
Genesis itself needs GENESIS_GEPA_LM_* set for the program's own LM.
Pass --client-id to reuse a connected repository instead of --repo.

Offline, on `GENESIS_GEPA_DEMO=true make run`: `python examples/gepa_optimize.py --demo` takes
the demo's program, examples and scripted LM from its demo.json, and registers an agent when
$GENESIS_API_KEY is unset.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

import gepa
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
from gepa_steps.adapter import CodeEvolverAdapter

DEFAULT_API = "http://127.0.0.1:8000"
DEMO_FILE = Path(__file__).resolve().parent.parent / ".state" / "gepa-demo" / "demo.json"
REQUIRED = ("entry_point", "data", "reflection_base_url", "reflection_model")


def connect(api: str, repo: str, installation_id: int | None, headers: dict) -> str:
    body = {"repo_url": repo, **({"installation_id": installation_id} if installation_id else {})}
    response = httpx.post(f"{api}/connect-git", json=body, timeout=900, headers=headers)
    if response.status_code != 201:
        sys.exit(f"connect-git failed: HTTP {response.status_code} {response.text}")
    return response.json()["client_id"]


def demo_settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Fill what the command line left unset from the demo's file."""
    try:
        demo = json.loads(args.demo.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {args.demo} ({exc}): start Genesis with GENESIS_GEPA_DEMO=true make run first")
    if args.api == DEFAULT_API:
        args.api = demo["api"]
    if args.repo is None and args.client_id is None:
        args.repo = demo["repo"]
    for name in ("entry_point", "program_json", "label", "reflection_base_url", "reflection_model"):
        if getattr(args, name) in (None, parser.get_default(name)):
            setattr(args, name, demo[name])
    if args.data is None:
        args.data = Path(demo["data"])


def register(api: str) -> str:
    """A new agent's key, for the demo when none is given."""
    response = httpx.post(f"{api}/v1/agents/register", json={"name": "gepa-demo"}, timeout=30)
    if response.status_code != 201:
        sys.exit(f"registering an agent failed: HTTP {response.status_code} {response.text}")
    body = response.json()
    print(f"registered agent {body['agent_id']} (export GENESIS_API_KEY={body['api_key']} to reuse it)")
    return body["api_key"]


def chat_lm(base_url: str, model: str, api_key: str):
    """A reflection LM for gepa: prompt in, text out, over any OpenAI-compatible endpoint."""

    def complete(prompt: str) -> str:
        response = httpx.post(
            f"{base_url.rstrip('/')}/chat/completions",
            timeout=300,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            json={"model": model, "messages": [{"role": "user", "content": prompt}]},
        )
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]

    return complete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", default=DEFAULT_API)
    parser.add_argument("--repo", help="repository to connect (https URL, or a local path the server allows)")
    parser.add_argument("--installation-id", type=int, help="GitHub App installation id (private repositories)")
    parser.add_argument("--client-id", help="an already connected client")
    parser.add_argument("--program-json", default="program.json")
    parser.add_argument("--entry-point", help="module.ClassName of the DSPy module")
    parser.add_argument("--data", type=Path, help="JSON-lines examples")
    parser.add_argument("--label", default="answer", help="the output field the metric compares")
    parser.add_argument("--reflection-base-url")
    parser.add_argument("--reflection-model")
    parser.add_argument("--max-metric-calls", type=int, default=60)
    parser.add_argument("--workers", type=int, default=8, help="parallel execute_step calls")
    parser.add_argument(
        "--demo",
        nargs="?",
        const=DEMO_FILE,
        type=Path,
        help=f"the offline quickstart's settings (default {DEMO_FILE}, written by GENESIS_GEPA_DEMO=true make run)",
    )
    args = parser.parse_args()
    if args.demo:
        demo_settings(args, parser)
    missing = [f"--{name.replace('_', '-')}" for name in REQUIRED if getattr(args, name) is None]
    if missing:
        parser.error(f"missing {', '.join(missing)} (or --demo)")

    examples = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    if len(examples) < 2:
        sys.exit("--data needs at least two examples (a train and a validation half)")
    random.Random(0).shuffle(examples)
    half = len(examples) // 2
    api_key = os.environ.get("GENESIS_API_KEY") or (register(args.api) if args.demo else None)
    headers = {"X-API-Key": api_key} if api_key else {}
    client_id = args.client_id or connect(
        args.api, args.repo or sys.exit("--repo or --client-id is required"), args.installation_id, headers
    )

    def metric(example: dict, output: dict | None) -> tuple[float, str]:
        got = str((output or {}).get(args.label, "")).strip().lower()
        want = str(example.get(args.label, "")).strip().lower()
        return float(got == want), f"expected {args.label}={example.get(args.label)!r}, got {got!r}"

    adapter = CodeEvolverAdapter(
        args.api, client_id, args.program_json, args.entry_point, metric, max_workers=args.workers, api_key=api_key
    )
    seed_step = adapter.evaluate(examples[:1], {}, capture_traces=False)  # the program as committed
    seed_program = adapter.program_for({})
    seed = {
        name: spec["signature"]["instructions"]
        for name, spec in httpx.get(f"{args.api}/program/{seed_program}", headers=headers)
        .json()["program_json"]
        .items()
        if isinstance(spec, dict) and "signature" in spec
    }
    print(f"client {client_id}; seed program {seed_program} scores {seed_step.scores}; components {sorted(seed)}")
    result = gepa.optimize(
        seed_candidate=seed,
        trainset=examples[:half],
        valset=examples[half:],
        adapter=adapter,
        reflection_lm=chat_lm(
            args.reflection_base_url, args.reflection_model, os.environ.get("REFLECTION_API_KEY", "")
        ),
        max_metric_calls=args.max_metric_calls,
        display_progress_bar=True,
    )
    best = result.best_candidate
    program_id = adapter.program_for(best)
    print(
        json.dumps(
            {
                "best_score": result.val_aggregate_scores[result.best_idx],
                "best_candidate": best,
                "program_id": program_id,
                "branch": f"program_{program_id}",
                "execute_step_calls": adapter.steps,
                "candidates": len(result.candidates),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
