"""The built-in evolution operator: new trait source without a language model.

Genetic-programming-style variation on source the gatekeeper already understands. Each variant
starts from a parent — a live trait's source, or a seed trait for the anomaly at hand — and
applies a few operators to the syntax tree of its ``execute`` body:

- ``perturb``: scale numeric constants (thresholds, rates, turns) by a factor in 0.6..1.4;
- ``insert``: add one guarded Entity API statement from a small library;
- ``recombine``: append the ``execute`` body of a second parent.

The result is rendered with ``ast.unparse`` under the new trait's class name, with the
``BaseTrait`` stub every trait defines. A variant is a pure function of its inputs and its seed
(``random.Random(seed)``), so a recorded seed gives the same code again; it carries its lineage:
the parents' names and the operators applied, in order.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
from dataclasses import dataclass, field

from genesis.dto import CycleContext, EvolutionPlan

PROVIDER = "builtin"  # GENESIS_LLM_PROVIDER value that selects this operator
# A live trait may be a parent when its verdict was one of these and its carriers did at least
# as well as the other Molbots, with enough of them to tell (the mutation's observed effects).
# An ``inconclusive`` verdict (too few carriers during the window to judge the trait) is never
# fit: such a verdict says nothing about the trait. A conclusive verdict already needed
# GENESIS_OBSERVATION_MIN_CARRIERS carriers during the window; a parent also needs some left at
# its end, to compare their energy with the others'.
FIT_VERDICTS = ("positive", "neutral")
MIN_PARENT_CARRIERS = 3


def fit_parent(verdict: str | None, effects: dict | None, by_experiment: bool = False) -> bool:
    """Whether a live trait with this verdict and these observed effects may be a parent. A
    verdict of an experiment (carriers against a counterfactual, with an interval) says enough by
    itself; a window's verdict needs the carriers' energy at its end to be at least the others'."""
    if by_experiment:
        return verdict in FIT_VERDICTS
    effects = effects or {}
    carriers = effects.get("carriers_after") or 0
    mine, others = effects.get("carrier_avg_energy"), effects.get("non_carrier_avg_energy")
    if verdict not in FIT_VERDICTS or carriers < MIN_PARENT_CARRIERS or mine is None:
        return False
    return others is None or mine >= others


# Seed traits by anomaly type (evolution/world_metrics.py names them). Plain, stateless bodies
# that use only the Entity API, so any two of them recombine.
SEEDS: dict[str, str] = {
    "starvation": """
if entity.energy < 90.0:
    food = entity.nearest_resource()
    if food is not None:
        entity.move(food[0], food[1])
        entity.eat()
""",
    "energy_crisis": """
if entity.energy < 40.0:
    entity.energy_consumption_rate = 0.7
    entity.speed = min(entity.speed, 1.5)
else:
    entity.energy_consumption_rate = 1.0
""",
    "overcrowding": """
if entity.neighbors > 4:
    entity.direction = entity.direction + 0.6
    entity.speed = min(entity.speed + 0.5, 3.0)
""",
    "overpopulation": """
if entity.neighbors > 6 and entity.energy > 70.0:
    entity.energy_consumption_rate = 1.2
""",
    "environmental": """
if entity.age > entity.max_age * 0.7:
    entity.energy_consumption_rate = 0.6
    entity.speed = min(entity.speed, 1.0)
""",
    "low_diversity": """
if entity.age % 40 == 0:
    entity.direction = entity.direction + 1.2
    entity.state = "roaming"
""",
    "stagnation": """
if entity.age % 25 == 0:
    entity.direction = entity.direction - 0.8
entity.speed = min(entity.speed + 0.2, 2.5)
""",
}
DEFAULT_SEED = "starvation"

# Statements ``insert`` may add, each guarded so that it acts only in some situations.
INSERTIONS: tuple[str, ...] = (
    "if entity.energy < 30.0:\n    entity.energy_consumption_rate = 0.6",
    "if entity.energy > 80.0:\n    entity.speed = min(entity.speed + 0.3, 3.0)",
    "if entity.neighbors > 5:\n    entity.direction = entity.direction + 0.4",
    "if entity.energy < 50.0:\n    entity.eat()",
    "if entity.age % 30 == 0:\n    entity.direction = entity.direction - 0.5",
)

PERTURB_RANGE = (0.6, 1.4)
OPERATORS = ("perturb", "insert", "recombine")
SEED_PARENT = "seed:"  # a lineage entry naming a seed trait of the library, e.g. "seed:starvation"


class NotATrait(ValueError):
    """A parent whose source has no class with an ``async def execute(self, entity)``."""


@dataclass(frozen=True)
class Variant:
    trait_name: str
    class_name: str
    code: str
    parents: list[str] = field(default_factory=list)
    operators: list[str] = field(default_factory=list)
    seed: int = 0

    @property
    def trait_parents(self) -> list[str]:
        """The names of the live traits it was made from (a seed trait of the library is none)."""
        return [name for name in self.parents if not name.startswith(SEED_PARENT)]

    @property
    def seed_trait(self) -> str | None:
        """The library's seed trait it started from, if it did not start from a live trait."""
        first = self.parents[0] if self.parents else ""
        return first.removeprefix(SEED_PARENT) if first.startswith(SEED_PARENT) else None

    @property
    def operator_names(self) -> list[str]:
        """The operators applied, in order, without their details (``perturb:3`` -> ``perturb``);
        ``seed`` first when it started from a seed trait."""
        applied = [step.split(":", 1)[0] for step in self.operators]
        return ["seed", *applied] if self.seed_trait is not None else applied


def class_name_for(trait_name: str) -> str:
    """``food_seeker`` -> ``FoodSeekerTrait`` (``calm_trait`` -> ``CalmTrait``)."""
    name = "".join(part.capitalize() for part in trait_name.split("_") if part)
    return name if name.endswith("Trait") else name + "Trait"


def execute_body(tree: ast.Module) -> list[ast.stmt]:
    """The statements of the first ``async def execute`` of a class in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AsyncFunctionDef) and item.name == "execute":
                    return list(item.body)
    raise NotATrait("no class with an `async def execute(self, entity)`")


def module_imports(tree: ast.Module) -> list[ast.stmt]:
    """The module-level imports of ``tree``: a body taken from it needs them."""
    return [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]


def _statements(text: str) -> list[ast.stmt]:
    return ast.parse(text.strip("\n")).body


def _self_free(body: list[ast.stmt]) -> bool:
    """Whether a body stands alone: it reads nothing of its class's instance."""
    return not any(isinstance(node, ast.Name) and node.id == "self" for stmt in body for node in ast.walk(stmt))


def _perturb(body: list[ast.stmt], rng: random.Random) -> int:
    """Scale numeric constants in place; returns how many changed. Comparisons with 0 and
    modulo divisors keep their meaning: 0 stays 0, an integer stays an integer of at least 2.
    Indices (``food[1]``) are positions, not quantities: they stay as they are."""
    indices = {id(node.slice) for stmt in body for node in ast.walk(stmt) if isinstance(node, ast.Subscript)}
    changed = 0
    for stmt in body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Constant) or isinstance(node.value, bool) or id(node) in indices:
                continue
            if not isinstance(node.value, int | float) or node.value == 0:
                continue
            factor = rng.uniform(*PERTURB_RANGE)
            if isinstance(node.value, int):
                node.value = max(2, round(node.value * factor))
            else:
                node.value = round(node.value * factor, 3)
            changed += 1
    return changed


def _trait_source(class_name: str, body: list[ast.stmt], imports: list[ast.stmt]) -> str:
    module = ast.parse(
        "class BaseTrait:\n    pass\n\n\n"
        f"class {class_name}(BaseTrait):\n    async def execute(self, entity) -> None:\n        pass\n"
    )
    trait = module.body[1]
    assert isinstance(trait, ast.ClassDef)
    execute = trait.body[0]
    assert isinstance(execute, ast.AsyncFunctionDef)
    execute.body = body or [ast.Pass()]
    unique = list({ast.unparse(node): node for node in imports}.values())  # each import once
    # ``from __future__`` must come first; the parents' other imports follow it.
    unique.sort(key=lambda node: not (isinstance(node, ast.ImportFrom) and node.module == "__future__"))
    module.body[:0] = unique
    return ast.unparse(ast.fix_missing_locations(module)) + "\n"


def vary(
    trait_name: str,
    seed: int,
    *,
    anomaly: str | None = None,
    parents: dict[str, str] | None = None,
    operators: int = 2,
) -> Variant:
    """A new trait named ``trait_name``: ``operators`` variations (at least one) of a parent
    picked from ``parents`` (name -> source of live traits with good fitness), or of the seed
    trait for ``anomaly`` when there are none. The same arguments give the same variant."""
    rng = random.Random(seed)
    trees = {name: ast.parse(source) for name, source in sorted((parents or {}).items())}
    usable = {name: body for name, tree in trees.items() if _self_free(body := execute_body(tree))}
    if usable:
        first = rng.choice(sorted(usable))
        body, lineage = [*usable[first]], [first]
    else:
        kind = anomaly if anomaly in SEEDS else DEFAULT_SEED
        body, lineage = _statements(SEEDS[kind]), [f"{SEED_PARENT}{kind}"]
    applied: list[str] = []
    for _ in range(max(1, operators)):
        choice = rng.choice(OPERATORS)
        if choice == "recombine":
            others = sorted(set(usable) - set(lineage))
            if not others:
                choice = "insert"
            else:
                other = rng.choice(others)
                body += usable[other]
                lineage.append(other)
                applied.append(f"recombine:{other}")
                continue
        if choice == "insert":
            snippet = rng.randrange(len(INSERTIONS))
            body.insert(rng.randint(0, len(body)), _statements(INSERTIONS[snippet])[0])
            applied.append(f"insert:{snippet}")
            continue
        applied.append(f"perturb:{_perturb(body, rng)}")
    class_name = class_name_for(trait_name)
    imports = [node for name in lineage if name in trees for node in module_imports(trees[name])]
    return Variant(trait_name, class_name, _trait_source(class_name, body, imports), lineage, applied, seed)


def seed_of(trigger_id: str, attempt: int) -> int:
    """The variant's seed: fixed by the cycle and the attempt, so a replayed step is the same."""
    return int.from_bytes(hashlib.sha256(f"{trigger_id}/{attempt}".encode()).digest()[:8], "big")


def takes_cycle(trigger_id: str, share: float) -> bool:
    """Whether the operator, mixed in beside an LLM at ``share``, plans and codes this cycle: a
    fixed draw per trigger, so every step of a cycle (and its replay) agrees."""
    return share > 0 and seed_of(trigger_id, 0) / 2**64 < share


def trigger_tag(trigger_id: str) -> str:
    """12 characters naming the cycle in its trait's name: a Watcher trigger's hex id, else a
    digest (a schedule's runs share their schedule id and differ only in their time)."""
    if re.fullmatch(r"trg_[0-9a-f]{12}", trigger_id):
        return trigger_id.removeprefix("trg_")
    return hashlib.sha256(trigger_id.encode()).hexdigest()[:12]


def plan(context: CycleContext) -> EvolutionPlan:
    """The Architect's step without a model: a new trait for the anomaly, named after it and the
    cycle (the anomaly type goes to the Coder's step as ``target_behavior``)."""
    kind = re.sub(r"[^a-z0-9_]", "_", context.problem_type.lower()).strip("_") or DEFAULT_SEED
    name = f"{kind[:40]}_{trigger_tag(context.trigger_id)}"
    if not name[0].isalpha():
        name = f"t_{name}"
    parents = "a live trait that did well" if context.active_traits else f"the seed trait for {kind}"
    return EvolutionPlan(
        action_type="new_trait",
        trait_name=name,
        description=f"Built-in operator: a variation of {parents}, for {context.problem_type}",
        target_behavior=kind,
    )
