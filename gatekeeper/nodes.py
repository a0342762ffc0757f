"""Small facts about syntax trees that several checks ask: node tables, parameters, literals,
type expressions, and the classes a file defines."""

from __future__ import annotations

import ast
from ast import (
    AnnAssign,
    Assign,
    AsyncFunctionDef,
    Attribute,
    AugAssign,
    BinOp,
    BitOr,
    Call,
    ClassDef,
    Constant,
    Dict,
    DictComp,
    Expr,
    FunctionDef,
    GeneratorExp,
    Lambda,
    List,
    ListComp,
    Name,
    Set,
    SetComp,
    Subscript,
    Tuple,
    UAdd,
    UnaryOp,
    USub,
)
from typing import TypeGuard

from gatekeeper.tables import MAX_NESTING, STATEMENT_NAMES

NUMBER_TYPES = (int, float, complex)
FUNCTION_TYPES = (FunctionDef, AsyncFunctionDef)
COMPREHENSIONS = (ListComp, SetComp, GeneratorExp, DictComp)

# Nodes as the checks take them: a function definition; anything with a function scope of its own
# (a unit of the escape analysis); a comprehension.
Definition = FunctionDef | AsyncFunctionDef
FunctionNode = FunctionDef | AsyncFunctionDef | Lambda
Comprehension = ListComp | SetComp | GeneratorExp | DictComp


class TooDeep(Exception):
    """The tree nests deeper than MAX_NESTING."""


def ast_classes() -> list[type[ast.AST]]:
    """Every node class the parser can produce (all subclasses of ast.AST)."""
    found: list[type[ast.AST]] = []
    pending = [ast.AST]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                pending.append(sub)
    return found


def field_table(skipped: frozenset[str]) -> dict[type[ast.AST], tuple[str, ...]]:
    """Node class -> the names of its fields not in ``skipped``, in field order."""
    return {cls: tuple(f for f in cls._fields if f not in skipped) for cls in ast_classes()}


def line_of(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


def shown(node: ast.AST) -> str:
    """An expression as a message shows it (cut at 40 characters)."""
    if type(node) is Name:
        return node.id
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


def is_constant(node: ast.expr, depth: int = 0) -> bool:
    """A literal, a tuple/list/set/dict of literals, or a signed number."""
    if isinstance(node, Constant):
        return True
    if depth > MAX_NESTING:
        raise TooDeep
    depth += 1
    if isinstance(node, (Tuple, List, Set)):
        return all(is_constant(element, depth) for element in node.elts)
    if isinstance(node, Dict):
        return all(key is not None and is_constant(key, depth) for key in node.keys) and all(
            is_constant(value, depth) for value in node.values
        )
    if isinstance(node, UnaryOp) and type(node.op) in (USub, UAdd):
        operand = node.operand
        return type(operand) is Constant and isinstance(operand.value, NUMBER_TYPES)
    return False


def is_type_expression(node: ast.expr, strings: list[str], depth: int = 0) -> bool:
    """Names, dotted names, subscripts, tuples/lists, constants and ``|`` only; string
    constants are collected for a separate check."""
    if isinstance(node, Name):
        return True
    if isinstance(node, Constant):
        if isinstance(node.value, str):
            strings.append(node.value)
        return True
    if depth > MAX_NESTING:
        raise TooDeep
    depth += 1
    if isinstance(node, Attribute):
        return is_type_expression(node.value, strings, depth)
    if isinstance(node, Subscript):
        return is_type_expression(node.value, strings, depth) and is_type_expression(node.slice, strings, depth)
    if isinstance(node, (Tuple, List)):
        return all(is_type_expression(element, strings, depth) for element in node.elts)
    if isinstance(node, BinOp):
        return (
            type(node.op) is BitOr
            and is_type_expression(node.left, strings, depth)
            and is_type_expression(node.right, strings, depth)
        )
    return False


def describe_statement(node: ast.stmt) -> str:
    """A statement refused at module or class level, as its message names it."""
    if isinstance(node, Expr) and isinstance(node.value, Call):
        func = node.value.func
        name = func.id if type(func) is Name else getattr(func, "attr", "...")
        return f"a call to {name}()"
    if isinstance(node, (Assign, AnnAssign, AugAssign)):
        targets = node.targets if isinstance(node, Assign) else [node.target]
        odd = [target for target in targets if type(target) is not Name]
        first = targets[0]
        if not odd and not isinstance(node, AugAssign) and isinstance(first, Name):
            return f"an assignment of a computed value to {first.id} (only literals may be assigned here)"
        target = ast.unparse(odd[0] if odd else first)
        return f"an assignment to {target} (only plain names may be assigned here)"
    cls = type(node)
    return STATEMENT_NAMES.get(cls, f"a {cls.__name__} statement")


def plain_names(targets: list[ast.expr]) -> TypeGuard[list[ast.Name]]:
    """Whether every assignment target is a plain name."""
    return all(type(target) is Name for target in targets)


def root_name(node: ast.expr) -> ast.Name | None:
    """The Name at the root of ``a.b[c](d).e``, if any."""
    while True:
        if isinstance(node, Name):
            return node
        if isinstance(node, (Attribute, Subscript)):
            node = node.value
        elif isinstance(node, Call):
            node = node.func
        else:
            return None


def positional_params(args: ast.arguments) -> list[ast.arg]:
    return args.posonlyargs + args.args


def all_params(args: ast.arguments) -> list[ast.arg]:
    params = args.posonlyargs + args.args + args.kwonlyargs
    if args.vararg is not None:
        params.append(args.vararg)
    if args.kwarg is not None:
        params.append(args.kwarg)
    return params


def instance_parameter(args: ast.arguments, enclosing: str | None, is_method: bool) -> str | None:
    """The name bound to the instance inside a function: a method's first parameter; in a nested
    function or lambda the enclosing method's, unless a parameter of its own shadows it."""
    if is_method:
        positional = positional_params(args)
        return positional[0].arg if positional else None
    if enclosing is not None and any(param.arg == enclosing for param in all_params(args)):
        return None
    return enclosing


def class_methods(node: ast.ClassDef, known: dict[str, frozenset[str]]) -> frozenset[str]:
    """The methods defined in a class and in its bases defined earlier in the file."""
    names = {member.name for member in node.body if isinstance(member, FUNCTION_TYPES)}
    for base in node.bases:
        if type(base) is Name and base.id in known:
            names |= known[base.id]
    return frozenset(names)


def module_classes(tree: ast.Module) -> dict[str, frozenset[str]]:
    """Top-level class name -> its methods, with those of its in-file bases."""
    classes: dict[str, frozenset[str]] = {}
    for statement in tree.body:
        if type(statement) is ClassDef:
            classes[statement.name] = class_methods(statement, classes) | classes.get(statement.name, frozenset())
    return classes
