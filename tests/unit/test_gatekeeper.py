"""Unit tests of the AST gatekeeper (steps 2-10) and the sandbox rules document. Pure: no services."""

from __future__ import annotations

import textwrap
import time

import pytest

from gatekeeper import GateResult, schema_problems, validate
from genesis import entity_api, rules
from tests.traits import SEED_EXAMPLE

STUB = "class BaseTrait:\n    pass\n\n\n"

OK_LOG_STEPS = [
    "Schema: OK",
    "AST parse: OK",
    "Import whitelist: OK",
    "Banned calls/attrs: OK",
    "Trait contract: OK — {name}",
    "Entity attribute whitelist: OK",
    "Init signature: OK",
    "Unbound variables: OK",
    "Await-on-sync: OK",
]


def make_trait(execute_body: str, *, prelude: str = "", members: str = "", postlude: str = "") -> str:
    """A trait module: optional prelude (imports, constants), the BaseTrait stub, ProbeTrait with
    optional extra members and the given execute body, then an optional postlude."""
    prelude = textwrap.dedent(prelude).strip("\n")
    members = textwrap.indent(textwrap.dedent(members).strip("\n"), "    ")
    body = textwrap.indent(textwrap.dedent(execute_body).strip("\n"), "        ")
    parts = [prelude + "\n\n" if prelude else "", STUB, "class ProbeTrait(BaseTrait):\n"]
    if members:
        parts.append(members + "\n\n")
    parts.append("    async def execute(self, entity) -> None:\n" + body + "\n")
    if postlude:
        parts.append("\n\n" + textwrap.dedent(postlude).strip("\n") + "\n")
    return "".join(parts)


def assert_rejected(result: GateResult, code: str, step: str, *fragments: str) -> None:
    last = result.validation_log[-1]
    assert not result.ok, result.validation_log
    assert result.failure_code == code, result.validation_log
    assert last.startswith(f"{step}: FAILED — "), last
    for fragment in fragments:
        assert fragment in last, last


def assert_accepted(result: GateResult, class_name: str = "ProbeTrait") -> None:
    assert result.ok, result.validation_log
    assert result.failure_code is None
    assert result.class_name == class_name
    assert result.validation_log == [line.format(name=class_name) for line in OK_LOG_STEPS]
    assert result.code_hash is not None and len(result.code_hash) == 64


# --------------------------------------------------------------------------------------------
# Passing examples
# --------------------------------------------------------------------------------------------

FORAGER = '''\
"""Forager: seeks food when hungry, wanders otherwise."""
from __future__ import annotations

import math
import random
from typing import Optional

SEEK_RADIUS = 40.0
HEADINGS = (0.0, 1.57, 3.14, -1.57)


class BaseTrait:
    """Base trait protocol stub."""
    pass


class ForagerTrait(BaseTrait):
    """Eats when close to food, walks towards it when hungry, wanders otherwise."""

    LABEL = "forager"

    def __init__(self, threshold=25, jitter: float = 0.3) -> None:
        self.threshold = threshold
        self.jitter = jitter
        self.ticks = 0

    def wander_step(self, heading: float) -> tuple[float, float]:
        angle = heading + (random.random() - 0.5) * self.jitter
        return math.cos(angle), math.sin(angle)

    async def execute(self, entity) -> None:
        self.ticks += 1
        target: Optional[tuple] = entity.nearest_resource()
        if entity.state == "frozen":
            while True:
                pass
        if entity.age < 0:
            raise ValueError("boom")
        if target is None:
            best = None
            for index in range(len(HEADINGS)):
                dx, dy = self.wander_step(entity.direction + HEADINGS[index])
                score = math.hypot(dx, dy) * random.random()
                if best is None or score > best[0]:
                    best = (score, dx, dy)
            if best is not None:
                entity.move(best[1], best[2])
            entity.state = "wandering"
            return
        dx, dy, distance = target
        if distance < 1.5:
            entity.eat()
            entity.state = "eating"
        elif entity.energy < self.threshold or distance < SEEK_RADIUS:
            entity.speed = min(4.0, entity.speed + 0.5)
            entity.move_towards(entity.x + dx, entity.y + dy)
            entity.state = "seeking"
        else:
            entity.move(dx, dy)
'''


def test_seed_example_passes() -> None:
    assert_accepted(validate("energy_hoarder", SEED_EXAMPLE), "EnergyHoarderTrait")


def test_sandbox_api_example_passes() -> None:
    assert_accepted(validate("my_trait", rules.TRAIT_EXAMPLE), "MyTrait")


def test_realistic_forager_passes() -> None:
    assert_accepted(validate("forager", FORAGER), "ForagerTrait")


# Code that must not be rejected: each body is valid flow and uses only allowed things.
ACCEPTED_BODIES = {
    "if_else_both_assign": """
        if entity.energy > 10:
            step = 1.0
        else:
            step = 0.5
        entity.speed = step
    """,
    "elif_chain_all_assign": """
        if entity.energy > 50:
            label = "full"
        elif entity.energy > 10:
            label = "ok"
        else:
            label = "hungry"
        entity.state = label
    """,
    "branch_returns": """
        if entity.energy > 50:
            return
        else:
            hungry = True
        entity.state = "hungry" if hungry else "ok"
    """,
    "try_except_both_assign": """
        try:
            ratio = entity.energy / entity.max_energy
        except ZeroDivisionError:
            ratio = 0.0
        finally:
            entity.state = "checked"
        entity.energy_consumption_rate = max(0.5, ratio)
    """,
    "try_else": """
        try:
            value = entity.energy / entity.max_energy
        except (ZeroDivisionError, ValueError) as error:
            entity.state = str(error)[:30]
            return
        else:
            doubled = value * 2
        entity.speed = doubled
    """,
    "for_else_break": """
        for attempt in range(3):
            if attempt == entity.age:
                found = attempt
                break
        else:
            found = -1
        entity.state = str(found)
    """,
    "while_true_break": """
        count = 0
        while True:
            count += 1
            if count > 3:
                chosen = count
                break
        entity.state = str(chosen)
    """,
    "walrus_in_test": """
        if (target := entity.nearest_resource()) is not None:
            entity.move(target[0], target[1])
        entity.state = str(target)
    """,
    "comprehension_scopes": """
        values = [n * 2 for n in range(5) if n % 2]
        pairs = {k: v for k, v in zip("ab", values)}
        total = sum(x for x in values)
        entity.state = str(len(pairs) + total)
    """,
    "closure_and_lambda": """
        scale = 2.0
        def helper(value, factor=1.5):
            return value * scale * factor
        key = lambda item, bias=0: item[1] + bias
        ranked = sorted([(1, 2.0), (2, 1.0)], key=key)
        entity.speed = helper(ranked[0][1])
    """,
    "tuple_unpacking_and_aug": """
        dx, dy = 1.0, 2.0
        (a, b), *rest = (dx, dy), 3, 4
        a += b
        entity.move(a, len(rest))
    """,
    "nested_loops_continue": """
        best = 0
        for i in range(3):
            if i == 1:
                continue
            for j in range(2):
                best = max(best, i * j)
        entity.state = str(best)
    """,
    "is_none_and_isinstance": """
        target = entity.nearest_resource()
        if target is None or not isinstance(target, tuple):
            return
        entity.move_towards(target[0], target[1])
    """,
    "writes_to_writable_attrs": """
        entity.speed = 1.0
        entity.direction = 0.5
        entity.state = "x"
        entity.energy_consumption_rate *= 0.9
    """,
    "with_collections_and_itertools": """
        counts = collections.Counter(entity.traits)
        window = collections.deque(maxlen=3)
        for pair in itertools.pairwise([1, 2, 3]):
            window.append(pair)
        entity.state = str(counts.most_common(1))
    """,
    "underscore_throwaway": """
        for _ in range(2):
            entity.speed = 1.0
    """,
    "from_imports": """
        entity.speed = floor(2.7) + reduce(lambda a, b: a + b, [1, 2])
    """,
    "random_instance_with_seed": """
        generator = random.Random(entity.id)
        generator.seed(7)
        entity.direction = generator.uniform(-1.0, 1.0)
    """,
    "exception_subclass_and_raise": """
        try:
            raise RuntimeError("x")
        except RuntimeError as problem:
            entity.state = str(problem)
    """,
}


@pytest.mark.parametrize("name", sorted(ACCEPTED_BODIES))
def test_valid_code_is_accepted(name: str) -> None:
    prelude = """
        import collections
        import itertools
        import random
        from functools import reduce
        from math import floor
    """
    assert_accepted(validate("probe", make_trait(ACCEPTED_BODIES[name], prelude=prelude)))


def test_helper_class_enum_and_typing_protocol_base_pass() -> None:
    code = """
import enum
import typing

class Mode(enum.Enum):
    IDLE = 1
    SEEK = 2

class BaseTrait(typing.Protocol):
    pass

class Helper:
    def __init__(self, scale=1.0):
        self.scale = scale

    def apply(self, value: float) -> float:
        return value * self.scale

class ModalTrait(BaseTrait):
    async def execute(self, entity) -> None:
        mode = Mode.SEEK if entity.energy < 20 else Mode.IDLE
        entity.state = mode.name.lower()
        entity.speed = Helper(0.5).apply(entity.speed)
"""
    assert_accepted(validate("modal", code), "ModalTrait")


def test_trait_base_name_trait_and_first_qualifying_class_is_picked() -> None:
    code = STUB + (
        "class Trait:\n    pass\n\n"
        "class NotATrait(BaseTrait):\n    def execute(self, entity):\n        pass\n\n"
        "class First(Trait):\n    async def execute(self, entity):\n        pass\n\n"
        "class Second(BaseTrait):\n    async def execute(self, entity):\n        pass\n"
    )
    assert_accepted(validate("probe", code), "First")


# --------------------------------------------------------------------------------------------
# One test per failure code
# --------------------------------------------------------------------------------------------


def test_schema_invalid() -> None:
    result = validate("Energy-Hoarder", SEED_EXAMPLE)
    assert_rejected(result, "SCHEMA_INVALID", "Schema", "'Energy-Hoarder' must be snake_case")
    assert result.validation_log == [result.validation_log[-1]]
    assert result.code_hash is None and result.class_name is None


@pytest.mark.parametrize(
    ("code", "fragments"),
    [
        ("class BaseTrait:\n    pass\n\nclass T(BaseTrait)\n    pass\n", ("line 4", "col", "expected ':'")),
        ("def f(:\n    pass\n", ("line 1",)),
        ("x = (1,\n", ("line 1", "never closed")),
        # compile-time errors that ast.parse alone does not report
        (make_trait("break"), ("'break' outside loop (line 7)",)),
        (make_trait("def helper():\n    await entity.eat()"), ("'await' outside async function",)),
        (make_trait("pass", members="def helper(self, a, a):\n    pass"), ("duplicate argument 'a'",)),
        ("import math\nfrom __future__ import annotations\n", ("from __future__ imports must occur",)),
    ],
)
def test_syntax_error(code: str, fragments: tuple[str, ...]) -> None:
    assert_rejected(validate("probe", code), "SYNTAX_ERROR", "AST parse", *fragments)


@pytest.mark.parametrize(
    ("prelude", "fragment"),
    [
        ("import os", "Forbidden import: os (line 1)"),
        ("import sys, math", "Forbidden import: sys (line 1)"),
        ("import subprocess as sp", "Forbidden import: subprocess (line 1)"),
        ("from backend.core.traits import Trait", "Forbidden import: backend.core.traits (line 1)"),
        ("import os.path", "Forbidden import: os.path (line 1)"),
        ("import collections.abc", "Forbidden import: collections.abc (line 1)"),
        ("from collections.abc import Mapping", "Forbidden import: collections.abc (line 1)"),
        ("from . import helpers", "relative import"),
        ("from math import *", "from math import *"),
        ("from typing import sys", "'typing.sys' is a module"),
        ("from enum import bltns", "'enum.bltns' is a module"),
        ("from dataclasses import inspect", "'dataclasses.inspect' is a module"),
        ("from random import _os", "'random._os' is private"),
        ("from collections import _sys", "'collections._sys' is private"),
        ("from typing import get_type_hints", "evaluates annotation strings as code"),
        ("from math import no_such_function", "has no public name 'no_such_function'"),
        ("from __future__ import braces", "not a __future__ feature"),
        ("import __future__", "Forbidden import: __future__"),
    ],
)
def test_import_forbidden(prelude: str, fragment: str) -> None:
    result = validate("probe", make_trait("pass", prelude=prelude))
    assert_rejected(result, "AST_IMPORT_FORBIDDEN", "Import whitelist", fragment)


def test_import_inside_method_is_checked_too() -> None:
    result = validate("probe", make_trait("import socket\nentity.state = 'x'"))
    assert_rejected(result, "AST_IMPORT_FORBIDDEN", "Import whitelist", "Forbidden import: socket (line 7)")


def test_banned_call() -> None:
    result = validate("probe", make_trait("entity.state = eval('1')"))
    assert_rejected(result, "AST_BANNED_CALL", "Banned calls/attrs", "Call to eval() is not allowed (line 7)")


def test_banned_attr() -> None:
    result = validate("probe", make_trait("entity.state = str(self.execute.__globals__)"))
    assert_rejected(result, "AST_BANNED_ATTR", "Banned calls/attrs", "Access to .__globals__ is not allowed (line 7)")


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("import math\n", "No trait class found"),
        (STUB + "class T:\n    async def execute(self, entity):\n        pass\n", "No trait class found"),
        (STUB + "class T(BaseTrait):\n    def execute(self, entity):\n        pass\n", "execute must be 'async def'"),
        (STUB + "class T(BaseTrait):\n    async def execute(self):\n        pass\n", "exactly (self, entity)"),
        (
            STUB + "class T(BaseTrait):\n    async def execute(self, entity, extra):\n        pass\n",
            "exactly (self, entity)",
        ),
        (
            STUB + "class T(BaseTrait):\n    async def execute(self, entity, *, k):\n        pass\n",
            "exactly (self, entity)",
        ),
        (STUB + "class T(BaseTrait):\n    async def run(self, entity):\n        pass\n", "has no 'async def execute"),
    ],
)
def test_no_trait_class(code: str, fragment: str) -> None:
    result = validate("probe", code)
    assert_rejected(result, "AST_NO_TRAIT_CLASS", "Trait contract", fragment)
    assert result.class_name is None


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ("entity.state = str(entity.health)", ("entity.health is not part of the entity API (line 7)",)),
        ("entity.state = str(entity.enrgy)", ("did you mean entity.energy?",)),
        (
            "entity.energy += 5",
            (
                "entity.energy cannot be assigned (line 7)",
                "gained only by eating",
                "writable attributes: direction, energy_consumption_rate, speed, state",
            ),
        ),
        ("entity.x = 3.0", ("entity.x cannot be assigned", "read-only")),
        ("entity.eat = None", ("entity.eat cannot be assigned", "is a method")),
        ("entity.teleport = True", ("entity.teleport cannot be assigned", "not part of the entity API")),
        ("del entity.speed", ("entity.speed cannot be deleted",)),
        ("entity.move(entity.x, entity.y)\nentity.world.reset()", ("entity.world is not part of the entity API",)),
    ],
)
def test_entity_attr_forbidden(body: str, fragments: tuple[str, ...]) -> None:
    result = validate("probe", make_trait(body))
    assert_rejected(result, "AST_ENTITY_ATTR_FORBIDDEN", "Entity attribute whitelist", *fragments)
    assert result.class_name == "ProbeTrait"


def test_entity_attr_checked_in_helper_methods_with_same_param_name() -> None:
    members = "def helper(self, entity):\n    return entity.secret"
    result = validate("probe", make_trait("self.helper(entity)", members=members))
    assert_rejected(result, "AST_ENTITY_ATTR_FORBIDDEN", "Entity attribute whitelist", "entity.secret", "line 7")


def test_entity_param_may_have_any_name() -> None:
    code = STUB + "class T(BaseTrait):\n    async def execute(self, creature) -> None:\n        creature.energy = 1\n"
    assert_rejected(
        validate("probe", code),
        "AST_ENTITY_ATTR_FORBIDDEN",
        "Entity attribute whitelist",
        "creature.energy cannot be assigned",
    )


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        (
            make_trait("pass", members="def __init__(self, threshold):\n    self.threshold = threshold"),
            "requires 'threshold'",
        ),
        (make_trait("pass", members="def __init__(self, *, k):\n    self.k = k"), "requires 'k'"),
        (make_trait("pass", members="def __init__(self, a=1, /, b=2, *, c):\n    pass"), "requires 'c'"),
        (
            "class BaseTrait:\n    def __init__(self, world):\n        self.world = world\n\n"
            "class T(BaseTrait):\n    async def execute(self, entity):\n        pass\n",
            "BaseTrait.__init__",
        ),
    ],
)
def test_init_required_args(code: str, fragment: str) -> None:
    result = validate("probe", code)
    assert_rejected(result, "AST_INIT_REQUIRED_ARGS", "Init signature", fragment, "give every parameter a default")


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            "if entity.energy > 5:\n    step = 1\nentity.speed = step",
            "'step' may be used before it is assigned (line 11",
        ),
        ("if entity.energy > 5:\n    step = 1\nelif entity.energy > 2:\n    step = 2\nentity.speed = step", "'step'"),
        ("for i in range(3):\n    pass\nentity.state = str(i)", "'i' may be used before it is assigned"),
        ("while entity.energy > 100:\n    level = 1\n    break\nentity.state = str(level)", "'level'"),
        (
            "try:\n    ratio = entity.energy / 2\nexcept ZeroDivisionError:\n    entity.state = str(ratio)",
            "'ratio' may be used before",
        ),
        ("try:\n    pass\nexcept ValueError as error:\n    pass\nentity.state = str(error)", "'error'"),
        ("total = total + 1", "'total' may be used before it is assigned"),
        ("value = 1\ndel value\nentity.speed = value", "'value' may be used before"),
        ("entity.speed = unknown_helper(1)", "undefined name 'unknown_helper'"),
        ("entity.speed = LIMIT", "undefined name 'LIMIT'"),
        ("values = [n for n in range(3)]\nentity.speed = n", "undefined name 'n'"),
        ("entity.speed = id(entity)", "undefined name 'id'"),
        ("if (x := entity.energy) or (y := 1):\n    pass\nentity.speed = y", "'y' may be used before"),
    ],
)
def test_unbound_variable(body: str, fragment: str) -> None:
    result = validate("probe", make_trait(body, members="LIMIT = 5"))
    assert_rejected(result, "AST_UNBOUND_VARIABLE", "Unbound variables", fragment)


def test_unbound_module_level_base_used_before_definition() -> None:
    code = "class T(BaseTrait):\n    async def execute(self, entity):\n        pass\n\n" + STUB
    assert_rejected(
        validate("probe", code),
        "AST_UNBOUND_VARIABLE",
        "Unbound variables",
        "'BaseTrait' is used in the base of class T before it is defined",
    )


def test_unbound_in_annotation_without_future_import() -> None:
    code = STUB + "class T(BaseTrait):\n    async def execute(self, entity: Entity) -> None:\n        pass\n"
    assert_rejected(validate("probe", code), "AST_UNBOUND_VARIABLE", "Unbound variables", "undefined name 'Entity'")
    # With postponed evaluation the annotation is never evaluated, so it is fine.
    assert_accepted(validate("probe", "from __future__ import annotations\n" + code), "T")


@pytest.mark.parametrize(
    "body",
    [
        "await entity.move(1, 2)",
        "target = await entity.nearest_resource()",
        "entity.state = str(await entity.energy)",
        "await entity.eat()",
    ],
)
def test_await_on_sync(body: str) -> None:
    result = validate("probe", make_trait(body))
    assert_rejected(result, "AST_AWAIT_ON_SYNC", "Await-on-sync", "synchronous", "line 7")
    assert result.class_name == "ProbeTrait"


def test_awaiting_own_async_helper_is_allowed() -> None:
    members = "async def helper(self, entity):\n    entity.speed = 1.0"
    assert_accepted(validate("probe", make_trait("await self.helper(entity)", members=members)))


def test_steps_run_in_order_and_stop_at_first_failure() -> None:
    # Has an import problem (step 4) and a banned call (step 5): only step 4 is reported.
    code = make_trait("eval('1')", prelude="import os")
    result = validate("probe", code)
    assert result.validation_log == [
        "Schema: OK",
        "AST parse: OK",
        "Import whitelist: FAILED — Forbidden import: os (line 1); allowed modules: "
        "__future__, collections, dataclasses, enum, functools, itertools, math, "
        "random, typing",
    ]
    assert result.code_hash is not None


# --------------------------------------------------------------------------------------------
# The entity under other names, stores outside self, classes as values
# --------------------------------------------------------------------------------------------

PRELUDE = "import dataclasses\nimport enum\nimport functools\nimport random\nimport typing"
ENTITY, BANNED, ENTITY_STEP = "AST_ENTITY_ATTR_FORBIDDEN", "Banned calls/attrs", "Entity attribute whitelist"


def line_of(code: str, text: str) -> int:
    """The 1-based line of the first line of ``code`` that contains ``text``."""
    return next(number for number, line in enumerate(code.splitlines(), 1) if text in line)


# name -> (execute body, extra members, postlude, the line the finding is on, message fragments)
ENTITY_ALIASES: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    "plain alias write": (
        "e = entity\ne.energy = 1e9",
        "",
        "",
        "e.energy = 1e9",
        ("e.energy cannot be assigned (e holds the entity)", "read-only"),
    ),
    "plain alias read": (
        "e = entity\nentity.state = str(e.secret)",
        "",
        "",
        "e.secret",
        ("e.secret is not part of the entity API (e holds the entity)",),
    ),
    "alias of alias": (
        "e = entity\nf = e\nf.teleport = True",
        "",
        "",
        "f.teleport",
        ("f.teleport cannot be assigned (f holds the entity)",),
    ),
    "tuple unpacking": ("a, (b, c) = 1, (entity, 2)\nb.x = 3.0", "", "", "b.x = 3.0", ("b.x cannot be assigned",)),
    "walrus": ("if (e := entity) is not None:\n    e.age = 0", "", "", "e.age = 0", ("e.age cannot be assigned",)),
    "conditional": (
        "e = entity if entity.energy > 0 else None\ne.energy = 1",
        "",
        "",
        "e.energy = 1",
        ("e.energy cannot be assigned",),
    ),
    "closure": (
        "e = entity\ndef boost():\n    e.energy = 1e9\nboost()",
        "",
        "",
        "e.energy = 1e9",
        ("e.energy cannot be assigned",),
    ),
    "lambda parameter": (
        "peek = lambda e: e.secret\nentity.state = str(peek(entity))",
        "",
        "",
        "peek = lambda",
        ("e.secret is not part of the entity API",),
    ),
    "lambda returning it": ("grab = lambda: entity\ngrab()", "", "", "grab = lambda", ("The entity is returned",)),
    "comprehension": (
        "values = [e.secret for e in (entity,)]",
        "",
        "",
        "values =",
        ("e.secret is not part of the entity API",),
    ),
    "for over a tuple": (
        "for e in (entity,):\n    e.energy = 3",
        "",
        "",
        "e.energy = 3",
        ("e.energy cannot be assigned",),
    ),
    "container": ("entity.state = str([entity][0].secret)", "", "", "[entity][0]", ("The entity is put into a list",)),
    "dict value": ("self.memory = {'me': entity}", "", "", "self.memory =", ("The entity is put into a dict",)),
    "attribute of self": (
        "self.held = entity\nself.held.energy = 1",
        "",
        "",
        "self.held.energy",
        ("self.held.energy cannot be assigned (self.held holds the entity)",),
    ),
    "attribute of self in another method": (
        "self.held = entity",
        "def later(self):\n    self.held.max_age = 10**9",
        "",
        "self.held.max_age",
        ("self.held.max_age cannot be assigned",),
    ),
    "method parameter": (
        "self.helper(entity)",
        "def helper(self, e):\n    e.energy = 1",
        "",
        "e.energy = 1",
        ("e.energy cannot be assigned (e holds the entity)",),
    ),
    "keyword argument": (
        "self.helper(target=entity)",
        "def helper(self, target=None):\n    target.energy = 1",
        "",
        "target.energy",
        ("target.energy cannot be assigned",),
    ),
    "module function": (
        "nudge(entity)",
        "",
        "def nudge(e):\n    e.energy = 1",
        "e.energy = 1",
        ("e.energy cannot be assigned",),
    ),
    "constructor": (
        "Holder(entity)",
        "",
        "class Holder:\n    def __init__(self, e=None):\n        e.energy = 1",
        "e.energy = 1",
        ("e.energy cannot be assigned",),
    ),
    "object keeping it": (
        "holder = Holder(entity)\nentity.state = str(holder.e.secret)",
        "",
        "class Holder:\n    def __init__(self, e=None):\n        self.e = e",
        "holder.e",
        ("holder.e may hold the entity", "self.e is assigned the entity (line"),
    ),
    "returned by a method": (
        "pass",
        "def helper(self, entity):\n    return entity",
        "",
        "return entity",
        ("The entity is returned",),
    ),
    "passed to an unknown function": (
        "entity.state = str(entity)",
        "",
        "",
        "str(entity)",
        ("The entity is passed to str(), which the gatekeeper cannot follow",),
    ),
    "into *args": (
        "self.helper(entity)",
        "def helper(self, *rest):\n    pass",
        "",
        "self.helper(entity)",
        ("The entity is passed to self.helper() where no named parameter receives it",),
    ),
    "called": ("entity()", "", "", "entity()", ("The entity is called",)),
    "iterated": ("for part in entity:\n    pass", "", "", "for part", ("The entity is iterated over",)),
}


@pytest.mark.parametrize("name", sorted(ENTITY_ALIASES))
def test_the_entity_under_another_name_is_checked_as_the_entity(name: str) -> None:
    body, members, postlude, marker, fragments = ENTITY_ALIASES[name]
    code = make_trait(body, prelude=PRELUDE, members=members, postlude=postlude)
    result = validate("probe", code)
    assert_rejected(result, ENTITY, ENTITY_STEP, f"(line {line_of(code, marker)})", *fragments)


def test_a_default_argument_cannot_capture_the_entity() -> None:
    result = validate("probe", make_trait("peek = lambda e=entity: e.secret"))
    assert_rejected(result, CALL, BANNED, "Default values must be constant literals (in lambda)")


# name -> (execute body, extra members, postlude, the line of the finding, message fragments)
STORES: dict[str, tuple[str, str, str, str, tuple[str, ...]]] = {
    "class of a module through a local name": (
        "r = random.Random\nr.some_method = len",
        "",
        "",
        "r.some_method",
        ("Cannot assign the attribute some_method of r", "only attributes of self"),
    ),
    "augmented": (
        "r = random.Random\nr.VERSION += 1",
        "",
        "",
        "r.VERSION",
        ("Cannot assign the attribute VERSION of r",),
    ),
    "deleted": (
        "r = random.Random\ndel r.random",
        "",
        "",
        "del r.random",
        ("Cannot delete the attribute random of r",),
    ),
    "module itself": (
        "random.random = len",
        "",
        "",
        "random.random =",
        ("Cannot assign or delete .random on 'random'",),
    ),
    "another object": (
        "helper = Helper()\nhelper.count = 1",
        "",
        "class Helper:\n    pass",
        "helper.count",
        ("Cannot assign the attribute count of helper",),
    ),
    "a function's attribute": (
        "def inner():\n    pass\ninner.flag = 1",
        "",
        "",
        "inner.flag",
        ("Cannot assign the attribute flag of inner",),
    ),
    "nested object of self": (
        "self.helper = Helper()\nself.helper.count = 1",
        "",
        "class Helper:\n    pass",
        "self.helper.count",
        ("Cannot assign the attribute count of self.helper",),
    ),
    "entity attribute's attribute": (
        "entity.traits.extra = 1",
        "",
        "",
        "entity.traits.extra",
        ("Cannot assign the attribute extra of entity.traits",),
    ),
    "parameter of a module function": (
        "pass",
        "",
        "def bump(obj):\n    obj.count = 1",
        "obj.count",
        ("Cannot assign the attribute count of obj",),
    ),
    "parameter named self outside a class": (
        "pass",
        "",
        "def bump(self):\n    self.count = 1",
        "self.count",
        ("Cannot assign the attribute count of self",),
    ),
    "nested function's own self": (
        "def inner(self):\n    self.seed = len\ninner(random.Random)",
        "",
        "",
        "self.seed",
        ("Cannot assign the attribute seed of self",),
    ),
    "self rebound": (
        "self = random.Random\nself.seed = len",
        "",
        "",
        "self = random.Random",
        ("The instance parameter 'self' cannot be rebound",),
    ),
    "self rebound by a loop": (
        "for self in [random.Random]:\n    self.seed = len",
        "",
        "",
        "for self in",
        ("The instance parameter 'self' cannot be rebound",),
    ),
    "method read through the class": (
        "ProbeTrait.helper(random.Random, len)",
        "def helper(self, f=None):\n    self.seed = f",
        "",
        "ProbeTrait.helper(",
        ("Access to ProbeTrait.helper is not allowed", "call it on an instance"),
    ),
    "class aliased": (
        "k = ProbeTrait\nk.helper(random.Random, len)",
        "def helper(self, f=None):\n    self.seed = f",
        "",
        "k = ProbeTrait",
        ("Class ProbeTrait is assigned to k",),
    ),
    "class passed to own function": (
        "call_it(ProbeTrait)",
        "def helper(self, f=None):\n    self.seed = f",
        "def call_it(k):\n    k.helper(random.Random)",
        "call_it(ProbeTrait)",
        ("Class ProbeTrait is passed to call_it()",),
    ),
    "class returned": (
        "pass",
        "def kind(self):\n    return ProbeTrait",
        "",
        "return ProbeTrait",
        ("Class ProbeTrait is returned",),
    ),
    "class defined in a function": (
        "class Local:\n    def m(self):\n        self.seed = len\nLocal.m(random.Random)",
        "",
        "",
        "Local.m(",
        ("Access to Local.m is not allowed",),
    ),
}


@pytest.mark.parametrize("name", sorted(STORES))
def test_stores_outside_self_are_refused(name: str) -> None:
    body, members, postlude, marker, fragments = STORES[name]
    code = make_trait(body, prelude=PRELUDE, members=members, postlude=postlude)
    result = validate("probe", code)
    assert_rejected(result, ATTR, BANNED, f"(line {line_of(code, marker)})", *fragments)


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("dataclasses", "dataclass"),
        ("functools", "total_ordering"),
        ("typing", "final"),
        ("typing", "no_type_check"),
        ("typing", "runtime_checkable"),
        ("typing", "overload"),
        ("typing", "clear_overloads"),
        ("typing", "reveal_type"),
        ("random", "setstate"),
    ],
)
def test_module_functions_that_change_shared_state_are_refused(module: str, name: str) -> None:
    result = validate("probe", make_trait(f"{module}.{name}(random.Random)", prelude=PRELUDE))
    assert_rejected(result, ATTR, BANNED, f"Access to {module}.{name} is not allowed")
    result = validate("probe", make_trait("pass", prelude=f"from {module} import {name}"))
    assert_rejected(result, IMPORT, "Import whitelist", f"'{module}.{name}' is not allowed")


# Legal code around the same constructs: must stay accepted. name -> (execute body, members, postlude)
STEERING = """
class Steering:
    def __init__(self, target=None):
        self.target = target

    def apply(self):
        self.target.speed = 1.0
"""
LEGAL_ALIASES: dict[str, tuple[str, str, str]] = {
    "alias writes writable attributes": (
        "e = entity\ne.speed = 2.0\ne.state = 'x'\nentity.direction = e.direction",
        "",
        "",
    ),
    "unpacked alias": ("e, n = entity, 3\ne.speed = float(n)", "", ""),
    "walrus alias": ("if (e := entity) is not None and e.energy < 5:\n    e.eat()", "", ""),
    "alias in a loop over a tuple": ("for e in (entity,):\n    e.move(1.0, 0.0)", "", ""),
    "alias in a comprehension": ("entity.state = str([e.energy for e in [entity]])", "", ""),
    "closure reads": ("def hungry():\n    return entity.energy < 10\nif hungry():\n    entity.eat()", "", ""),
    "lambda parameter": ("speed_of = lambda e: e.speed\nentity.speed = speed_of(entity) * 0.5", "", ""),
    "comparisons and tests": ("if entity is not None and not (entity == self):\n    entity.speed = 1.0", "", ""),
    "attribute of self holding it": (
        "self.current = entity\nself.current.speed = 1.0\nself.steer()",
        "def steer(self):\n    self.current.direction = 0.5",
        "",
    ),
    "method with another parameter name": (
        "self.slow_down(entity, 0.5)",
        "def slow_down(self, target, factor):\n    target.speed = target.speed * factor",
        "",
    ),
    "module helper": ("entity.direction = turn(entity, 0.1)", "", "def turn(e, by):\n    return e.direction + by"),
    "helper object": ("Steering(entity).apply()", "", STEERING),
    "state on self": (
        "self.counter += 1\nself.memory = {}\nself.memory['k'] = entity.energy\ndel self.memory['k']\ndel self.counter",
        "",
        "",
    ),
    "class constants and enum members": (
        "mode = Mode.SEEK if entity.energy < Mode.SEEK.value else Mode.IDLE\n"
        "entity.state = str(len(list(Mode))) + str(isinstance(mode, Mode))\n"
        "for member in Mode:\n    entity.state = member.name\nentity.speed = Limits.TOP + self.TOP",
        "TOP = 1.0",
        "class Mode(enum.Enum):\n    IDLE = 1\n    SEEK = 2\n\n\nclass Limits:\n    TOP = 3.0",
    ),
    "own instances": (
        "helper = Helper(2.0)\nentity.speed = helper.scaled(entity.speed)",
        "",
        "class Helper:\n    def __init__(self, factor=1.0):\n        self.factor = factor\n\n"
        "    def scaled(self, value):\n        self.last = value\n        return value * self.factor",
    ),
    "random instance": (
        "generator = random.Random(entity.id)\ngenerator.seed(3)\nentity.direction = generator.random()",
        "",
        "",
    ),
}


@pytest.mark.parametrize("name", sorted(LEGAL_ALIASES))
def test_legal_uses_of_the_entity_self_and_classes_pass(name: str) -> None:
    body, members, postlude = LEGAL_ALIASES[name]
    assert_accepted(validate("probe", make_trait(body, prelude=PRELUDE, members=members, postlude=postlude)))


def test_a_long_chain_of_functions_is_followed_in_linear_time() -> None:
    """Functions defined in the reverse of call order: each walk adds one step of the chain."""
    count = 300
    functions = "\n".join(f"def f{n}(e):\n    f{n + 1}(e)\n" for n in reversed(range(count)))
    code = make_trait("f0(entity)", postlude=functions + f"\ndef f{count}(e):\n    e.energy = 1\n")
    started = time.perf_counter()
    result = validate("probe", code)
    assert time.perf_counter() - started < 2.0
    assert_rejected(result, ENTITY, ENTITY_STEP, "e.energy cannot be assigned (e holds the entity)")


# --------------------------------------------------------------------------------------------
# Bypass families (DESIGN.md / NOTES.md): each an exploit inside an otherwise valid trait
# --------------------------------------------------------------------------------------------

ATTR, CALL, IMPORT = "AST_BANNED_ATTR", "AST_BANNED_CALL", "AST_IMPORT_FORBIDDEN"

BYPASSES: dict[str, tuple[str, str, str]] = {
    # family: underscore-prefixed attributes and names
    "random._os": ("import random", "random._os.system('id')", ATTR),
    "collections._sys": ("import collections", "entity.state = str(collections._sys.modules)", ATTR),
    "private attr on self": ("", "self._cache = {}", ATTR),
    "dunder class walk": ("", "entity.state = str(().__class__.__base__.__subclasses__())", ATTR),
    "__builtins__ name": ("", "entity.state = str(__builtins__)", ATTR),
    "__import__ call": ("", "__import__('os').system('id')", CALL),
    "__import__ reference": ("", "loader = __import__", CALL),
    "__traceback__": ("", "try:\n    1 / 0\nexcept ZeroDivisionError as error:\n    tb = error.__traceback__", ATTR),
    # family: banned names used as references, not calls
    "eval reference": ("", "f = eval\nf('1')", CALL),
    "reduce(getattr)": ("import functools", "functools.reduce(getattr, ['x'], entity)", CALL),
    "print reference": ("", "sink = [print]", CALL),
    "type() three-arg": ("", "Klass = type('K', (), {})", CALL),
    "super()": ("", "super().execute(entity)", CALL),
    "vars()": ("", "entity.state = str(vars(self))", CALL),
    "banned name as variable": ("", "dir = 1\nentity.direction = dir", CALL),
    # family: frame walks
    "gi_frame": ("", "gen = (n for n in range(2))\nframe = gen.gi_frame", ATTR),
    "cr_frame": ("", "frame = self.execute(entity).cr_frame", ATTR),
    "f_back": ("", "back = frame.f_back", ATTR),
    "f_globals": ("", "scope = frame.f_globals", ATTR),
    "f_builtins": ("", "scope = frame.f_builtins", ATTR),
    "tb_frame": ("", "frame = tb.tb_frame", ATTR),
    "gi_code": ("", "code = (n for n in range(2)).gi_code", ATTR),
    "co_code": ("", "raw = code.co_code", ATTR),
    "ag_frame": ("", "frame = agen.ag_frame", ATTR),
    # family: str.format / format_map traversal and AttributeError.obj
    "format traversal": ("", "entity.state = '{0.__class__}'.format(entity)", ATTR),
    "format_map": ("", "entity.state = '{x}'.format_map({'x': 1})", ATTR),
    "f-string dunder": ("", "entity.state = f'{entity.__class__}'", ATTR),
    "AttributeError.obj": (
        "",
        "try:\n    entity.nope2 = 1\nexcept AttributeError as error:\n    leaked = error.obj",
        ATTR,
    ),
    "mro": ("", "classes = int.mro()", ATTR),
    # family: allowed modules re-exporting dangerous ones
    "typing.sys": ("import typing", "entity.state = str(typing.sys.modules)", ATTR),
    "enum.bltns": ("import enum", "enum.bltns.exec('1')", ATTR),
    "dataclasses.inspect": ("import dataclasses", "frame = dataclasses.inspect.currentframe()", ATTR),
    "typing.operator.attrgetter": ("import typing", "get = typing.operator.attrgetter('x')", ATTR),
    "collections.abc": ("import collections", "base = collections.abc.Mapping", ATTR),
    "typing.get_type_hints": ("import typing", "hints = typing.get_type_hints(self.execute)", ATTR),
    "functools.singledispatch": ("import functools", "dispatch = functools.singledispatch(len)", ATTR),
    "functools.update_wrapper": ("import functools", "functools.update_wrapper(self, len, ('x',))", ATTR),
    "random.seed": ("import random", "random.seed(1)", ATTR),
    # family: class-creation hooks defined through dictionaries instead of 'def'
    "enum functional dunder": ("import enum", "E = enum.Enum('E', {'__eq__': lambda a, b: True, 'A': 1})", ATTR),
    "ABCMeta class factory": ("import typing", "K = typing.ABCMeta('K', (), {'hook': len})", ATTR),
    "EnumType class factory": ("import enum", "K = enum.EnumType", ATTR),
    "make_dataclass namespace": ("import dataclasses", "K = dataclasses.make_dataclass('K', [], namespace={})", ATTR),
    "dunder string key": ("", "members = {'__del__': len}", ATTR),
    "update_wrapper dunder names": ("", "names = ('__globals__',)", ATTR),
    "module alias": ("import typing", "t = typing", ATTR),
    "module passed around": ("import typing", "entity.state = str(typing)", ATTR),
    "module aliased via import as": ("import typing as t", "entity.state = str(t.sys)", ATTR),
    "module rebound": ("import math", "math = 3", ATTR),
    "module patched": ("import math", "math.floor = abs", ATTR),
    "module class patched": ("import random", "random.Random.random = abs", ATTR),
    "imported object patched": ("from random import Random", "Random.random = abs", ATTR),
    # family: match class patterns (below Python 3.10, the trait runtime's language, not even syntax)
    "match": (
        "",
        "match entity:\n    case object(state=s):\n        pass",
        "SYNTAX_ERROR" if rules.trait_language() < (3, 10) else CALL,
    ),
    # family: global / nonlocal / yield
    "global": ("", "global counter\ncounter = 1", CALL),
    "nonlocal": ("", "value = 1\ndef inner():\n    nonlocal value\n    value = 2", CALL),
    "yield": ("", "def gen():\n    yield 1", CALL),
    "yield from": ("", "def gen():\n    yield from range(3)", CALL),
    # family: swallowing the host's deadline signal
    "bare except": ("", "try:\n    pass\nexcept:\n    pass", CALL),
    "except BaseException": ("", "try:\n    pass\nexcept BaseException:\n    pass", CALL),
    "except SystemExit in tuple": ("", "try:\n    pass\nexcept (ValueError, SystemExit):\n    pass", CALL),
    # family: default arguments evaluated at definition time
    "default computed": ("import math", "def helper(x=math.floor(2.5)):\n    return x", CALL),
    "lambda default computed": ("", "f = lambda x=[].append: x", CALL),
}


@pytest.mark.parametrize("name", sorted(BYPASSES))
def test_bypass_rejected(name: str) -> None:
    prelude, body, code = BYPASSES[name]
    result = validate("probe", make_trait(body, prelude=prelude))
    assert_rejected(result, code, "AST parse" if code == "SYNTAX_ERROR" else "Banned calls/attrs", "line")


MEMBER_BYPASSES: dict[str, tuple[str, str]] = {
    "__init_subclass__": ("def __init_subclass__(cls):\n    pass", "Special method '__init_subclass__'"),
    "__class_getitem__": ("def __class_getitem__(cls, item):\n    return item", "Special method '__class_getitem__'"),
    "__del__": ("def __del__(self):\n    pass", "Special method '__del__'"),
    "__eq__": ("def __eq__(self, other):\n    return True", "Special method '__eq__'"),
    "__getattr__": ("def __getattr__(self, name):\n    return 1", "Special method '__getattr__'"),
    "__hash__": ("def __hash__(self):\n    return 1", "Special method '__hash__'"),
    "private method": ("def _helper(self):\n    return 1", "Name '_helper' is not allowed"),
    "method decorator": ("@functools.cache\ndef helper(self):\n    return 1", "Decorators are not allowed"),
    "class-level call": ("LIMIT = len('abc')", "Class-level code is not allowed in class ProbeTrait"),
    "class-level loop": ("for i in range(3):\n    pass", "Class-level code is not allowed"),
    "nested class": ("class Inner:\n    pass", "Class-level code is not allowed"),
    "annotation with call": ("def helper(self, x: print('hi')) -> None:\n    pass", "Annotations may only name types"),
    "annotation computing": (
        "def helper(self, x: math.floor(1)) -> None:\n    pass",
        "Annotations may only name types",
    ),
    "string annotation code": ("def helper(self, x: \"__import__('os')\") -> None:\n    pass", "__import__"),
    "string annotation call": ("def helper(self) -> 'math.floor(1)':\n    pass", "not a type expression"),
}


@pytest.mark.parametrize("name", sorted(MEMBER_BYPASSES))
def test_class_member_bypass_rejected(name: str) -> None:
    member, fragment = MEMBER_BYPASSES[name]
    result = validate("probe", make_trait("pass", prelude="import functools\nimport math", members=member))
    assert_rejected(result, result.failure_code or "", "Banned calls/attrs", fragment)
    assert result.failure_code in {CALL, ATTR}


MODULE_LEVEL: dict[str, tuple[str, str, str]] = {
    "decorated class": ("import dataclasses", "@dataclasses.dataclass\nclass Data:\n    x: int = 0", "Decorators"),
    "metaclass": ("", "class Meta(BaseTrait, metaclass=Helper):\n    pass", "Class keywords are not allowed"),
    "class keyword": ("", "class Flagged(BaseTrait, flag=1):\n    pass", "Class keywords are not allowed"),
    "computed base": ("", "class Computed(Helper()):\n    pass", "Class bases must be plain names"),
    "module call": ("import math", "ROUNDED = math.floor(2.5)", "Module-level code is not allowed"),
    "module expression call": ("import math", "math.floor(2.5)", "Module-level code is not allowed: a call to floor()"),
    "module print": ("", "print('loaded')", "Call to print() is not allowed"),
    "module loop": ("", "for i in range(3):\n    pass", "Module-level code is not allowed: a for loop"),
    "module if": ("", "if True:\n    pass", "Module-level code is not allowed: an if statement"),
    "module computed constant": ("", "LIMIT = 1 + 2", "Module-level code is not allowed"),
    "module attribute assignment": ("", "Helper.limit = 3", "Module-level code is not allowed"),
    "module try": ("", "try:\n    pass\nexcept ValueError:\n    pass", "Module-level code is not allowed"),
    "module function decorator": ("import functools", "@functools.cache\ndef helper():\n    return 1", "Decorators"),
    "module-level dunder": ("", "__all__ = ['x']", "Name '__all__' is not allowed"),
}


@pytest.mark.parametrize("name", sorted(MODULE_LEVEL))
def test_module_level_code_rejected(name: str) -> None:
    prelude, postlude, fragment = MODULE_LEVEL[name]
    code = make_trait("pass", prelude=prelude + "\n\nclass Helper:\n    pass", postlude=postlude)
    result = validate("probe", code)
    assert_rejected(result, result.failure_code or "", "Banned calls/attrs", fragment)
    assert result.failure_code in {CALL, ATTR}


def test_module_level_constants_are_allowed() -> None:
    prelude = 'LIMIT = 5\nNEG = -1.5\nTABLE = {"a": (1, 2), "b": [3, -4]}\nNAMES: tuple = ("x", "y")\nEMPTY = None'
    assert_accepted(validate("probe", make_trait("entity.speed = LIMIT + NEG", prelude=prelude)))


@pytest.mark.parametrize(
    ("body", "code", "fragment"),
    [
        # Python normalises identifiers with NFKC; the checks act on the normalised names.
        ("ｅｖａｌ('1')", CALL, "Call to eval() is not allowed"),
        ("entity.state = str(self.execute.__ｇlobals__)", ATTR, "Access to .__globals__"),
        ("ｐｒｉｎｔ('x')", CALL, "Call to print()"),
        ("entity.state = str(entity.__ｃｌａｓｓ__)", ATTR, "Access to entity.__class__"),
        ("entity.state = 'x'.ｆｏｒｍａｔ()", ATTR, "Access to .format"),
    ],
)
def test_nfkc_spellings_are_rejected(body: str, code: str, fragment: str) -> None:
    assert_rejected(validate("probe", make_trait(body)), code, "Banned calls/attrs", fragment)


def test_nfkc_import_spelling_is_checked() -> None:
    result = validate("probe", make_trait("pass", prelude="import ｏｓ"))
    assert_rejected(result, IMPORT, "Import whitelist", "Forbidden import: os")


def test_nfkc_entity_attribute_is_checked() -> None:
    result = validate("probe", make_trait("entity.ｅｎｅｒｇｙ += 1"))
    assert_rejected(
        result, "AST_ENTITY_ATTR_FORBIDDEN", "Entity attribute whitelist", "entity.energy cannot be assigned"
    )


def test_format_hint_and_first_finding_reported() -> None:
    result = validate("probe", make_trait("entity.state = '{}'.format(1)\nexec('1')"))
    assert_rejected(result, ATTR, "Banned calls/attrs", "Access to .format is not allowed (line 7)", "f-string")


# --------------------------------------------------------------------------------------------
# Robustness: validate never raises
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "x = " + "+".join(["a"] * 5000),  # the parser's own recursion limit
        "x = " + "-" * 2000 + "1",  # parses, but deeper than a Python-level walk can follow
        "x = " + "(" * 250 + "1" + ")" * 250,
    ],
)
def test_pathological_nesting_is_a_syntax_error(code: str) -> None:
    result = validate("probe", code)
    assert result.failure_code == "SYNTAX_ERROR"
    assert result.validation_log[-1].startswith("AST parse: FAILED — ")


# --------------------------------------------------------------------------------------------
# Normalised code hash
# --------------------------------------------------------------------------------------------


def test_hash_ignores_comments_whitespace_and_parentheses() -> None:
    reformatted = (
        "# a comment at the top\n"
        "from __future__ import annotations\n"
        "import math  # trailing comment\n\n\n"
        "import random\n"
        "class BaseTrait:\n"
        '    """Base trait protocol stub — no import needed."""\n'
        "    pass\n"
        "class EnergyHoarderTrait( BaseTrait ):\n"
        "    async def execute(self,entity)->None:\n"
        "        # hoard when low\n"
        "        if (entity.energy < 25):\n"
        "            entity.energy_consumption_rate   *=   0.7\n"
    )
    first, second = validate("energy_hoarder", SEED_EXAMPLE), validate("energy_hoarder", reformatted)
    assert second.ok and first.code_hash == second.code_hash


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("< 25", "<= 25"),
        ("*= 0.7", "*= 0.8"),
        ("entity.energy <", "entity.speed <"),
        ("import random\n", "import random\nimport itertools\n"),
        ("*= 0.7", "-= 0.7"),
    ],
)
def test_hash_changes_with_logic(old: str, new: str) -> None:
    changed = SEED_EXAMPLE.replace(old, new, 1)
    assert changed != SEED_EXAMPLE
    assert validate("energy_hoarder", changed).code_hash != validate("energy_hoarder", SEED_EXAMPLE).code_hash


def test_hash_set_when_parse_ok_even_if_rejected_and_absent_when_not() -> None:
    assert validate("probe", make_trait("eval('1')")).code_hash is not None
    assert validate("probe", "def (:").code_hash is None


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["EnergyHoarder", "energy-hoarder", "1abc", "", "a" * 65, "_energy", "energy hoarder", "énergie", "energy\n"],
)
def test_schema_rejects_bad_trait_names(name: str) -> None:
    problems = schema_problems(name, SEED_EXAMPLE)
    assert problems == [
        f"trait_name {name!r} must be snake_case: lowercase letters, digits and underscores, "
        "starting with a letter (max 64 chars)"
    ]


@pytest.mark.parametrize("name", ["a", "energy_hoarder", "a" * 64, "trait_2"])
def test_schema_accepts_good_trait_names(name: str) -> None:
    assert schema_problems(name, SEED_EXAMPLE) == []


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("", "code is empty"),
        ("   \n\t\n", "code contains only whitespace"),
        ("x = 1\n" + "#" * (rules.MAX_CODE_BYTES + 10), f"; the limit is {rules.MAX_CODE_BYTES:,}"),
        ("x = 1\n\x00\n", "NUL byte on line 2"),
        (None, "code must be a string, got NoneType"),
        ("x = '\ud800'", "not valid UTF-8"),
    ],
)
def test_schema_rejects_bad_code(code: object, fragment: str) -> None:
    problems = schema_problems("probe", code)
    assert len(problems) == 1 and fragment in problems[0], problems


def test_schema_size_message_counts_utf8_bytes() -> None:
    code = "é" * 20_000  # 40,000 bytes in UTF-8
    assert schema_problems("probe", code) == ["code is 40,000 bytes; the limit is 32,768"]
    assert schema_problems("probe", "a" * rules.MAX_CODE_BYTES) == []


def test_schema_reports_every_problem_and_non_string_name() -> None:
    assert schema_problems(42, "") == [
        "trait_name must be a string, got int",
        "code is empty; submit the Python source of a trait class",
    ]


def test_validate_rejects_schema_problems_before_parsing() -> None:
    result = validate("probe", "x = 1\0")
    assert_rejected(result, "SCHEMA_INVALID", "Schema", "NUL byte")


# --------------------------------------------------------------------------------------------
# sandbox-api document
# --------------------------------------------------------------------------------------------

SEED_KEYS = {
    "api_version",
    "sandbox_rules_version",
    "trait_pattern",
    "required_method",
    "allowed_imports",
    "forbidden_imports",
    "forbidden_calls",
    "forbidden_attrs",
    "entity_allowed_attrs",
    "timeout_ms",
    "max_loop_iterations",
    "no_module_level_code",
    "example",
}


def test_sandbox_api_document_matches_seed() -> None:
    document = rules.sandbox_api_document()
    assert set(document) >= SEED_KEYS
    assert document["api_version"] == "1"
    assert document["sandbox_rules_version"] == "6" == rules.SANDBOX_RULES_VERSION
    assert document["trait_pattern"] == "define class BaseTrait stub inline, then inherit from it"
    assert document["required_method"] == "async execute(self, entity) -> None"
    assert document["allowed_imports"] == [
        "__future__",
        "math",
        "random",
        "dataclasses",
        "typing",
        "enum",
        "collections",
        "functools",
        "itertools",
    ]
    assert document["forbidden_imports"] == ["os", "sys", "subprocess", "socket", "shutil", "backend"]
    assert {"eval", "exec", "compile", "open", "__import__", "print", "globals"} <= set(document["forbidden_calls"])
    assert {"__subclasses__", "__globals__", "__code__", "__builtins__", "__dict__"} <= set(document["forbidden_attrs"])
    assert document["timeout_ms"] == 5
    assert document["max_loop_iterations"] is None  # not counted: loops are bounded by timeout_ms
    assert document["loop_bound"] == "none by count: every call of execute() has 5 ms of CPU, loops included"
    assert document["no_module_level_code"] is True
    assert document["example"] == rules.TRAIT_EXAMPLE
    assert document["entity_allowed_attrs"] == sorted(entity_api.READABLE_ATTRS) + sorted(entity_api.METHODS)
    assert document["entity_api"] == entity_api.as_wire()
    assert set(document["entity_writable_attrs"]) == set(entity_api.WRITABLE_ATTRS)
    assert document["max_code_bytes"] == 32 * 1024


def test_sandbox_api_document_is_deterministic_and_sorted() -> None:
    document = rules.sandbox_api_document()
    assert document == rules.sandbox_api_document()
    for key in ("forbidden_calls", "forbidden_attrs", "allowed_builtins"):
        assert document[key] == sorted(document[key])


def test_rules_constants() -> None:
    assert rules.TIMEOUT_MS == 5 and rules.MAX_CODE_BYTES == 32768
    assert rules.TRAIT_NAME_PATTERN == r"^[a-z][a-z0-9_]{0,63}$"
    assert set(rules.FORBIDDEN_IMPORTS_EXAMPLES).isdisjoint(rules.ALLOWED_IMPORTS)
    assert rules.ALLOWED_BUILTINS.isdisjoint(rules.BANNED_CALLS)


def test_traits_are_parsed_at_the_trait_runtimes_language_level(monkeypatch) -> None:
    match_trait = textwrap.dedent("""\
        class BaseTrait:
            pass

        class MatcherTrait(BaseTrait):
            async def execute(self, entity) -> None:
                match entity.state:
                    case "saving":
                        entity.direction = 0.0
        """)
    monkeypatch.setattr(rules, "trait_language", lambda: (3, 9))  # as if traits ran on an older Python
    result = validate("matcher", match_trait)
    assert not result.ok and result.failure_code == "SYNTAX_ERROR"
    assert "Pattern matching is only supported in Python 3.10" in result.validation_log[-1]
    assert "traits are written in Python 3.9" in result.validation_log[-1]
    monkeypatch.setattr(rules, "trait_language", lambda: (3, 11))  # the one runtime's
    assert validate("matcher", match_trait).failure_code != "SYNTAX_ERROR"


def test_sandbox_api_states_the_trait_language() -> None:
    language = rules.sandbox_api_document()["trait_language"]
    assert language["python"] == "%d.%d" % rules.TRAIT_LANGUAGE == "%d.%d" % rules.trait_language()
    assert language["runtime"] == "cpython"
