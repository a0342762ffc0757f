"""A ``gepa`` adapter that evaluates candidates on a running Genesis (codeevolver-gepa.md
"CodeEvolverAdapter"): every evaluation is one ``POST /execute_step``, a prompt mutation on its
own git branch whose program runs in Genesis' sandbox; scores are computed here, client side,
by the researcher's metric.

    from gepa_steps.adapter import CodeEvolverAdapter
    adapter = CodeEvolverAdapter("http://127.0.0.1:8000", client_id, "program.json", "qa.QA", metric, api_key=key)
    result = gepa.optimize(seed_candidate=..., trainset=..., valset=..., adapter=adapter,
                           reflection_lm=..., max_metric_calls=...)
    adapter.program_for(result.best_candidate)  # the program_id (and branch) of the best one

``metric(example, output)`` returns a score (higher is better) or ``(score, feedback)``; the
feedback text goes into the reflective dataset GEPA's reflection LM reads.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from gepa import EvaluationBatch, GEPAAdapter

Metric = Callable[[dict, Any], "float | tuple[float, str]"]


class GenesisUnavailable(RuntimeError):
    """Genesis refused the request itself (unknown client, invalid fields, server down): not a
    verdict on one candidate, so GEPA should stop rather than score it 0."""


class CodeEvolverAdapter(GEPAAdapter[dict, dict, Any]):
    propose_new_texts = None  # GEPA's default reflective proposer writes the new instructions

    def __init__(
        self,
        api_url: str,
        client_id: str,
        program_json_path: str,
        entry_point: str,
        metric: Metric,
        *,
        parent_program_id: str | None = None,
        max_workers: int = 8,
        timeout_s: float = 600.0,
        program_id_prefix: str = "gepa",
        failure_score: float = 0.0,
        api_key: str | None = None,
    ):
        self.api_url, self.client_id = api_url.rstrip("/"), client_id
        self.program_json_path, self.entry_point, self.metric = program_json_path, entry_point, metric
        self.parent_program_id = parent_program_id  # the program every candidate is applied to (None: default branch)
        self.max_workers, self.failure_score, self.program_id_prefix = max_workers, failure_score, program_id_prefix
        # api_key: the X-API-Key of the agent that connected the repository (GENESIS_AUTH=required)
        self._http = httpx.Client(
            base_url=self.api_url, timeout=timeout_s, headers={"X-API-Key": api_key} if api_key else {}
        )
        self._programs: dict[str, str] = {}  # candidate (as JSON) -> the program_id of its latest evaluation
        self._lock = threading.Lock()
        self.steps = 0  # execute_step calls made

    # --- GEPAAdapter ---------------------------------------------------------------------------

    def evaluate(self, batch: list[dict], candidate: dict[str, str], capture_traces: bool = False) -> EvaluationBatch:
        program_id = f"{self.program_id_prefix}-{uuid.uuid4().hex[:16]}"
        response = self._http.post(
            "/execute_step",
            json={
                "client_id": self.client_id,
                "program_id": program_id,
                "parent_program_id": self.parent_program_id,
                "mutation_type": "prompt",
                "program_json_path": self.program_json_path,
                "entry_point": self.entry_point,
                "candidate": dict(candidate),
                "test_examples": [dict(example) for example in batch],
                "capture_traces": capture_traces,
            },
        )
        with self._lock:
            self.steps += 1
        if response.status_code != 200:
            raise GenesisUnavailable(f"execute_step answered HTTP {response.status_code}: {response.text[:500]}")
        result = response.json()
        with self._lock:
            self._programs[_key(candidate)] = program_id
        by_example = {entry.get("example_id"): entry for entry in result.get("pipeline_outputs") or []}
        traces = {trace.get("example_id"): trace.get("steps", []) for trace in result.get("traces") or []}
        outputs, scores, trajectories = [], [], []
        for index, example in enumerate(batch):
            entry = by_example.get(index, {})
            output = entry.get("output")
            error = entry.get("error") or (result.get("error") if result.get("status") != "success" else None)
            if error:
                score, feedback = self.failure_score, f"The program failed: {error}"
            else:
                score, feedback = self._score(example, output)
            outputs.append(output)
            scores.append(score)
            trajectories.append(
                {
                    "example": dict(example),
                    "output": output,
                    "error": error,
                    "score": score,
                    "feedback": feedback,
                    "steps": traces.get(index, []),
                    "program_id": program_id,
                }
            )
        return EvaluationBatch(outputs=outputs, scores=scores, trajectories=trajectories if capture_traces else None)

    def batch_evaluate(self, items: list[tuple[dict[str, str], list]]) -> list[EvaluationBatch]:
        """Several (candidate, batch) pairs at once: parallel execute_step calls, each on its own branch."""
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(items)))) as pool:
            return list(pool.map(lambda item: self.evaluate(item[1], item[0], capture_traces=True), items))

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: EvaluationBatch, components_to_update: list[str]
    ) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        """Per component: what its predictor was given and produced on each example, and the
        metric's feedback (the whole example when the program failed before that predictor ran)."""
        dataset: dict[str, list[dict[str, Any]]] = {}
        for component in components_to_update:
            records = []
            for trajectory in eval_batch.trajectories or []:
                calls = [s for s in trajectory["steps"] if s.get("predictor") == component] or [
                    {"inputs": trajectory["example"], "outputs": trajectory["output"] or {"error": trajectory["error"]}}
                ]
                for call in calls:
                    records.append(
                        {
                            "Inputs": call.get("inputs"),
                            "Generated Outputs": call.get("outputs"),
                            "Feedback": trajectory["feedback"],
                        }
                    )
            dataset[component] = records
        return dataset

    # --- helpers -------------------------------------------------------------------------------

    def program_for(self, candidate: dict[str, str]) -> str | None:
        """The program_id (branch ``program_<id>`` in the client's repository) of the latest
        evaluation of ``candidate``."""
        with self._lock:
            return self._programs.get(_key(candidate))

    def _score(self, example: dict, output: Any) -> tuple[float, str]:
        scored = self.metric(example, output)
        if isinstance(scored, tuple):
            return float(scored[0]), str(scored[1])
        inputs_hint = {k: v for k, v in example.items() if not (isinstance(output, dict) and k in output)}
        expected = {k: v for k, v in example.items() if isinstance(output, dict) and k in output}
        return float(scored), (
            f"Score {float(scored):.2f} for inputs {inputs_hint}. Expected {expected}, got {output}."
            if expected
            else f"Score {float(scored):.2f}."
        )

    def close(self) -> None:
        self._http.close()


def _key(candidate: dict[str, str]) -> str:
    return json.dumps(candidate, sort_keys=True)
