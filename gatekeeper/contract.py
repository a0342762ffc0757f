"""Steps 6 and 8, the trait contract: a class inheriting the inline ``BaseTrait`` stub with
``async def execute(self, entity)``, created without arguments.

The trait class is found before the scan, because the entity checks (steps 7 and 10) follow
its ``entity`` parameter."""

from __future__ import annotations

import ast
from ast import AsyncFunctionDef, ClassDef, Name
from dataclasses import dataclass

from gatekeeper.nodes import FUNCTION_TYPES, positional_params
from gatekeeper.tables import NO_TRAIT_CLASS, TRAIT_BASES


@dataclass(frozen=True)
class Trait:
    node: ast.ClassDef
    entity_param: str


def _class_where(statement: ast.ClassDef) -> str:
    return f"class {statement.name} (line {statement.lineno})"


def find_trait(tree: ast.Module) -> tuple[Trait | None, str]:
    """The first top-level class that qualifies, or None and why nothing did."""
    reasons: list[str] = []
    for statement in tree.body:
        if type(statement) is not ClassDef:
            continue
        if not any(type(base) is Name and base.id in TRAIT_BASES for base in statement.bases):
            continue
        execute = None
        for member in statement.body:
            if isinstance(member, FUNCTION_TYPES) and member.name == "execute":
                execute = member  # the last definition wins, as at runtime
        if execute is None:
            reasons.append(f"{_class_where(statement)} has no 'async def execute(self, entity) -> None'")
            continue
        if type(execute) is not AsyncFunctionDef:
            reasons.append(f"{_class_where(statement)}: execute must be 'async def', not 'def' (line {execute.lineno})")
            continue
        positional = positional_params(execute.args)
        required_kwonly = [
            arg.arg for arg, default in zip(execute.args.kwonlyargs, execute.args.kw_defaults) if default is None
        ]
        if len(positional) != 2 or required_kwonly:
            reasons.append(
                f"{_class_where(statement)}: execute must take exactly (self, entity) (line {execute.lineno})"
            )
            continue
        return Trait(statement, positional[1].arg), ""
    if reasons:
        return None, "; ".join(reasons)
    return None, NO_TRAIT_CLASS


def init_problem(tree: ast.Module, trait: ast.ClassDef) -> str | None:
    """Step 8: the __init__ the trait is created with must need no arguments."""
    classes = {node.name: node for node in tree.body if type(node) is ClassDef}
    pending, seen = [trait], set()
    while pending:  # depth-first over bases defined in the file, like a simple MRO
        cls = pending.pop(0)
        if cls.name in seen:
            continue
        seen.add(cls.name)
        init = None
        for member in cls.body:
            if isinstance(member, FUNCTION_TYPES) and member.name == "__init__":
                init = member
        if init is None:
            pending.extend(classes[b.id] for b in cls.bases if type(b) is Name and b.id in classes)
            continue
        where = f"{cls.name}.__init__ (line {init.lineno})"
        if type(init) is AsyncFunctionDef:
            return f"{where} must be a plain 'def', not 'async def'"
        args = init.args
        positional = positional_params(args)
        if not positional and args.vararg is None:
            return f"{where} must accept self"
        without_default = positional[1 : len(positional) - len(args.defaults)]
        required = [arg.arg for arg in without_default]
        required += [arg.arg for arg, default in zip(args.kwonlyargs, args.kw_defaults) if default is None]
        if required:
            names = ", ".join(repr(name) for name in required)
            return (
                f"{where} requires {names}; traits are created without arguments, so give every "
                f"parameter a default (e.g. {required[0]}=25)"
            )
        return None
    return None
