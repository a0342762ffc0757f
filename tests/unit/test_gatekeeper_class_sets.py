"""The class sets that let the gatekeeper's busiest chains skip their isinstance() tests match the
branches they guard: a branch added to a chain but not to its set would never run. Pure: reads
the gatekeeper's source."""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

import pytest

from gatekeeper import escapes, flow, units


def classes_tested(module: ModuleType, function_name: str, subject: str) -> set[type]:
    """The classes ``function_name`` tests ``subject`` against with isinstance()."""
    tree = ast.parse(inspect.getsource(module))
    [function] = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function_name]
    found: set[type] = set()
    for call in ast.walk(function):
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "isinstance"
            and isinstance(call.args[0], ast.Name)
            and call.args[0].id == subject
        ):
            spec = call.args[1]
            for name in spec.elts if isinstance(spec, ast.Tuple) else [spec]:
                assert isinstance(name, ast.Name), f"name the class as imported, not {ast.unparse(name)}"
                value = getattr(module, name.id)
                found.update(value if isinstance(value, tuple) else [value])
    return found


@pytest.mark.parametrize(
    ("module", "function_name", "subject", "class_set"),
    [
        (escapes, "_is_entity", "node", escapes.MAY_BE_ENTITY),
        (units, "_collect", "child", units.COLLECTED),
    ],
)
def test_a_prefilter_holds_every_class_its_chain_tests(
    module: ModuleType, function_name: str, subject: str, class_set: frozenset[type]
) -> None:
    assert classes_tested(module, function_name, subject) == set(class_set)


def test_the_flow_pass_walks_by_fields_exactly_the_classes_it_does_not_check_by_hand() -> None:
    by_hand = classes_tested(flow, "_expr", "node")
    assert {ast.Name, ast.Attribute, ast.Call, ast.Lambda} <= by_hand
    assert set(flow.EXPR_FIELDS) - by_hand == flow.EXPR_BY_FIELDS
