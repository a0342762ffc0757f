"""The Architect and the Coder of an evolution cycle (logic-flow.md 3.3-3.4): their prompts, and
tolerant reading of what an LLM answers (a JSON plan somewhere in prose or a code fence; a Python
code block). Pure functions: the activities in activities/evolution.py call the LLM around them."""

from __future__ import annotations

import json
import re
from typing import Any

from genesis import entity_api, rules, world_params
from genesis.dto import CycleContext, EvolutionPlan

ACTION_TYPES = ("new_trait", "modify_trait", "adjust_params")
_TRAIT_NAME = re.compile(rules.TRAIT_NAME_PATTERN)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n(.*?)```", re.DOTALL)


class PlanError(ValueError):
    """The Architect's answer holds no usable plan (the message says what is missing)."""


ARCHITECT_SYSTEM = """You are the Architect of AI-Genesis, a self-evolving digital world.
Your role: analyze world problems and design solutions.
You do NOT write code. You describe WHAT to build and WHY.

Rules:
- A solution is one of: a new Trait (Python class with async execute), a modification of a live
  Trait, or a small change of world parameters.
- action_type: "new_trait" | "modify_trait" | "adjust_params"
- trait_name in snake_case; for modify_trait, the name of a live trait.
- For adjust_params, "params": {name: new value} using only the adjustable parameters listed.
- Respond ONLY in JSON format."""

CODER_SYSTEM = f"""You are a Python developer in the AI-Genesis system.
Write one trait class. Define the stub "class BaseTrait: pass" inline and inherit from it.
The class MUST have: async def execute(self, entity) -> None

Available on entity (Entity API v{entity_api.API_VERSION}): {", ".join(sorted(entity_api.allowed_entity_names()))}.
Writable: {", ".join(f"{n} ({lo}..{hi})" for n, (_, lo, hi) in sorted(entity_api.WRITABLE_ATTRS.items()))}.
Entity methods are synchronous: never await them.

Allowed imports: {", ".join(rules.ALLOWED_IMPORTS)}.
FORBIDDEN: any other import, eval, exec, open, print, getattr, names or attributes starting with
'_', decorators, module-level code. Python {"%d.%d" % rules.trait_language()} syntax only.
Output ONLY the Python code in one ```python block. No explanations.

Example:
```python
{rules.TRAIT_EXAMPLE}
```"""


def architect_prompt(context: CycleContext) -> str:
    report = context.report
    params = "\n".join(
        f"  - {name} = {context.world_params.get(name)} (allowed {b.low}..{b.high}: {b.description})"
        for name, b in world_params.ALLOWED.items()
    )
    problem = (
        f"{context.problem_type} (severity: {context.severity})"
        if context.kind == "anomaly"
        else "none detected: this is a periodic improvement, make the world thrive better"
    )
    return f"""WORLD STATE (tick {report.get("tick")}):
- Population: {report.get("entity_count")}
- Avg energy: {report.get("avg_energy")}
- Deaths last period: {report.get("deaths_last_period")}
- Death causes: {json.dumps(report.get("death_breakdown") or {})}
- Resource density: {report.get("resource_density")}
- Trends: {json.dumps(report.get("deltas") or {})}
- Active traits: {", ".join(context.active_traits) or "none"}
- Adjustable world parameters (change each by at most {world_params.MAX_RELATIVE_STEP:.0%}):
{params}

PROBLEM: {problem}

Design a solution. JSON format:
{{
  "action_type": "new_trait",
  "trait_name": "snake_case_name",
  "description": "What this trait does and why it solves the problem",
  "target_behavior": "Detailed behavior description for the Coder",
  "params": {{}}
}}"""


def coder_prompt(plan: EvolutionPlan, current_code: str | None) -> str:
    base = f"""Task: {plan.description}
Trait name: {plan.trait_name}
Behavior: {plan.target_behavior}
"""
    if current_code:
        base += f"""
This modifies the live trait '{plan.trait_name}'. Its current source:
```python
{current_code}
```
Write the complete new version of the class (same trait, improved behavior).
"""
    return base + "\nWrite the complete Python class."


def retry_prompt(plan: EvolutionPlan, current_code: str | None, rejected_code: str, error: str) -> str:
    """The Coder's second and last chance: the validator's verdict as feedback (seed 3.4 step I)."""
    return (
        coder_prompt(plan, current_code)
        + f"\n\nYour previous code was rejected by the validator:\n{error}\n\nRejected code:\n```python\n"
        + rejected_code
        + "\n```\nFix the issue and regenerate the complete class. Rules remain the same."
    )


def extract_json(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text``: the whole answer, a fenced block, or the first
    ``{...}`` that parses (LLMs wrap plans in prose)."""
    candidates = [text.strip()] + [body for _, body in _FENCE.findall(text)]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def extract_code(text: str) -> str:
    """The Python source in an answer: the first ```python block (else the first fenced block
    defining a class), else the answer itself."""
    blocks = _FENCE.findall(text)
    for lang, body in blocks:
        if lang.lower() in ("python", "py", "python3"):
            return body.strip() + "\n"
    for _, body in blocks:
        if "class " in body:
            return body.strip() + "\n"
    return text.strip() + "\n"


def parse_plan(text: str, context: CycleContext) -> EvolutionPlan:
    """The Architect's plan, checked: PlanError says what is wrong with it."""
    data = extract_json(text)
    if data is None:
        raise PlanError(f"no JSON object in the Architect's answer: {text[:200]!r}")
    action = str(data.get("action_type") or "").strip()
    if action not in ACTION_TYPES:
        raise PlanError(f"action_type {action!r} is not one of {', '.join(ACTION_TYPES)}")
    description = str(data.get("description") or "").strip()
    if not description:
        raise PlanError("the plan has no description")
    if action == "adjust_params":
        try:
            params = world_params.check_change(data.get("params"), context.world_params)
        except world_params.ParamsError as exc:
            raise PlanError(f"adjust_params: {exc}") from exc
        return EvolutionPlan(
            action_type=action,
            description=description[:2000],
            params=params,
            target_behavior=str(data.get("target_behavior") or "")[:4000],
        )
    name = str(data.get("trait_name") or "").strip()
    if not _TRAIT_NAME.match(name):
        raise PlanError(f"trait_name {name!r} is not snake_case ({rules.TRAIT_NAME_PATTERN})")
    if action == "modify_trait" and name not in context.active_traits:
        raise PlanError(
            f"modify_trait names {name!r}, which is not a live trait "
            f"(live: {', '.join(context.active_traits) or 'none'})"
        )
    if action == "new_trait" and name in context.active_traits:
        action = "modify_trait"  # a new version of a live trait is a modification (``replaces``)
    return EvolutionPlan(
        action_type=action,
        trait_name=name,
        description=description[:2000],
        target_behavior=str(data.get("target_behavior") or description)[:4000],
    )
