"""gepa.optimize against a running Genesis through CodeEvolverAdapter: every evaluation is a real
execute_step (branch, sandboxed DSPy run against the scripted LM); the reflection LM is the same
scripted server over HTTP. The toy metric rewards upper case (0.5) and an 'ANSWER:' prefix (0.5),
which the scripted reflection adds one per iteration."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import gepa

from genesis.config import PROJECT_ROOT
from gepa_steps.adapter import CodeEvolverAdapter

QUESTIONS = ["alpha beta", "gamma", "delta epsilon", "zeta"]


def metric(example: dict, output: dict | None) -> float:
    answer = (output or {}).get("answer", "")
    return 0.5 * (example["question"].upper() in answer) + 0.5 * answer.startswith("ANSWER:")


async def test_gepa_optimize_improves_the_toy_metric_over_http(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    examples = [{"question": q, "answer": f"ANSWER: {q.upper()}"} for q in QUESTIONS]
    adapter = CodeEvolverAdapter(
        gepa_stack.url, client_id, "program.json", "qa.QA", metric, max_workers=4, api_key=gepa_stack.agent.api_key
    )
    reflections: list[str] = []

    def reflection_lm(prompt: str) -> str:
        reflections.append(prompt)
        return gepa_stack.lm.chat(prompt)

    seed = {"answer": "Answer the question."}
    result = await asyncio.to_thread(
        gepa.optimize,
        seed_candidate=seed,
        trainset=examples[:2],
        valset=examples[2:],
        adapter=adapter,
        reflection_lm=reflection_lm,
        max_metric_calls=24,
        reflection_minibatch_size=2,
        skip_perfect_score=False,
        seed=0,
        display_progress_bar=False,
    )
    assert len(reflections) >= 3, f"only {len(reflections)} GEPA iterations ran"
    assert result.val_aggregate_scores[0] == 0.0
    assert max(result.val_aggregate_scores) == 1.0, result.val_aggregate_scores
    best = result.best_candidate
    assert "UPPERCASE" in best["answer"] and "PREFIX=ANSWER:" in best["answer"]
    # The best candidate is a program version in the client's repository, on its own branch.
    program_id = adapter.program_for(best)
    program = (await gepa_http.get(f"/program/{program_id}")).json()
    assert program["status"] == "completed"
    assert program["program_json"]["answer"]["signature"]["instructions"] == best["answer"]
    clone = gepa_stack.clone_of(client_id)
    assert (
        subprocess.run(
            ["git", "rev-parse", "--verify", f"program_{program_id}"], cwd=clone, capture_output=True
        ).returncode
        == 0
    )
    assert adapter.steps >= 6
    adapter.close()


async def test_a_failed_step_scores_zero_with_the_error_as_feedback(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    adapter = CodeEvolverAdapter(
        gepa_stack.url, client_id, "program.json", "broken.Broken", metric, api_key=gepa_stack.agent.api_key
    )
    batch = [{"question": "x", "answer": "X"}]
    evaluation = await asyncio.to_thread(adapter.evaluate, batch, {"answer": "anything"}, True)
    assert evaluation.scores == [0.0]
    assert "ValueError: this program always fails" in evaluation.trajectories[0]["feedback"]
    dataset = adapter.make_reflective_dataset({"answer": "anything"}, evaluation, ["answer"])
    assert "this program always fails" in dataset["answer"][0]["Feedback"]
    adapter.close()


async def test_the_example_script_runs_against_genesis(gepa_stack, gepa_http, gepa_client_id, tmp_path):
    client_id = gepa_client_id
    data = tmp_path / "examples.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": q}) + "\n" for q in QUESTIONS))
    done = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            str(PROJECT_ROOT / "examples" / "gepa_optimize.py"),
            "--api",
            gepa_stack.url,
            "--client-id",
            client_id,
            "--entry-point",
            "qa.QA",
            "--data",
            str(data),
            "--reflection-base-url",
            gepa_stack.lm.base_url,
            "--reflection-model",
            "scripted",
            "--max-metric-calls",
            "8",
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "GENESIS_API_KEY": gepa_stack.agent.api_key},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout[done.stdout.index("{") :])
    assert summary["best_score"] == 1.0 and summary["branch"] == f"program_{summary['program_id']}"
    assert (await gepa_http.get(f"/program/{summary['program_id']}")).json()["status"] == "completed"
