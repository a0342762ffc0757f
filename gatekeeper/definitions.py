"""Step 5, code that runs at definition time, or implicitly later: the module, classes and functions.

Refused: module-level code other than docstrings, imports, definitions and constant assignments;
class bodies other than methods, docstrings, pass and constants; decorators; class keywords
(metaclasses, ``__init_subclass__`` arguments) and computed bases; special methods other than
``__init__``; default values other than literals; annotations other than type expressions (also
inside annotation strings). Also the compile-time errors ``ast.parse`` lets through here:
duplicate parameters and a late ``from __future__`` import."""

from __future__ import annotations

import ast
from ast import (
    AnnAssign,
    Assign,
    AsyncFunctionDef,
    Attribute,
    ClassDef,
    Constant,
    Expr,
    FunctionDef,
    Import,
    ImportFrom,
    Name,
    Pass,
)
from collections.abc import Iterable

from gatekeeper.names import name_problem
from gatekeeper.nodes import (
    FunctionNode,
    all_params,
    class_methods,
    describe_statement,
    instance_parameter,
    is_constant,
    is_type_expression,
    line_of,
)
from gatekeeper.state import ScanState
from gatekeeper.tables import (
    AST_BANNED_ATTR,
    AST_BANNED_CALL,
    BANNED_ATTRS,
    CLASS_CODE_HINT,
    MODULE_CODE_HINT,
    STEP_BANNED,
    STEP_PARSE,
    SYNTAX_ERROR,
)


def constant_statement_ok(node: ast.stmt) -> bool:
    """A docstring, or a constant assigned to plain names."""
    if isinstance(node, Expr):
        value = node.value
        return type(value) is Constant and isinstance(value.value, str)
    if isinstance(node, Assign):
        return all(type(t) is Name for t in node.targets) and is_constant(node.value)
    if isinstance(node, AnnAssign):
        return type(node.target) is Name and (node.value is None or is_constant(node.value))
    return False


def module_statement_ok(node: ast.stmt) -> bool:
    if type(node) in (Import, ImportFrom, ClassDef, FunctionDef, AsyncFunctionDef, Pass):
        return True
    return constant_statement_ok(node)


def class_statement_ok(node: ast.stmt) -> bool:
    if type(node) in (FunctionDef, AsyncFunctionDef, Pass):
        return True
    return constant_statement_ok(node)


class DefinitionChecks(ScanState):
    """The scanner's handlers for the module, classes, functions and annotations (part of
    scan.Scanner); functions and classes also open the scopes that step 9 reads."""

    def _module(self, node: ast.Module) -> None:
        body = node.body
        future_allowed = True
        for index, statement in enumerate(body):
            is_docstring = (
                isinstance(statement, Expr)
                and type(statement.value) is Constant
                and isinstance(statement.value.value, str)
            )
            if isinstance(statement, ImportFrom) and statement.module == "__future__" and statement.level == 0:
                if not future_allowed:
                    self.found(
                        STEP_PARSE,
                        statement,
                        SYNTAX_ERROR,
                        "from __future__ imports must occur at the beginning of the file",
                    )
            elif not (is_docstring and index == 0):
                future_allowed = False
        self.field(body)
        # After the body, so a more specific finding on the same line (e.g. eval) wins.
        for statement in body:
            if not module_statement_ok(statement):
                self.found(
                    STEP_BANNED,
                    statement,
                    AST_BANNED_CALL,
                    f"Module-level code is not allowed: {describe_statement(statement)}",
                    MODULE_CODE_HINT,
                )

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = node.name
        if name.startswith("__") and name.endswith("__") and name != "__init__":
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_CALL,
                f"Special method '{name}' is not allowed",
                "special methods run implicitly; only __init__ may be defined",
            )
        elif name != "__init__":
            problem = name_problem(name)
            if problem is not None:
                self.found(STEP_BANNED, node, *problem)
        if name in self.module_aliases:
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"Name '{name}' is an imported module and cannot be rebound",
                "choose another name",
            )
        self.scope.add(name)
        if node.decorator_list:
            self.found(
                STEP_BANNED,
                node.decorator_list[0],
                AST_BANNED_CALL,
                f"Decorators are not allowed (on {name})",
                "they run code at definition time; call helpers explicitly instead",
            )
        self._check_signature(node.args, name)
        if node.returns is not None:
            self._check_annotation(node.returns)
        self.tokens.append(name)
        self._enter_function(node, type(node) is AsyncFunctionDef, (node.args, node.body))
        self.field(node.decorator_list)
        self.field(node.returns)

    def _lambda(self, node: ast.Lambda) -> None:
        self._check_signature(node.args, "lambda")
        body = node.body
        if type(body) is Name and body.id in self.class_methods:
            self.needs_escape_analysis = True  # returns a class of the file
        self._enter_function(node, False, (node.args, node.body))

    def _enter_function(self, node: FunctionNode, is_async: bool, fields: Iterable[object]) -> None:
        saved = (
            self.scope,
            self.function_scope,
            self.function_node,
            self.in_function,
            self.async_ok,
            self.loop_depth,
            self.self_name,
            self.method_context,
        )
        self.scope = self.function_scope = self.function_locals[node] = set()
        self.function_node = node
        self.in_function, self.async_ok, self.loop_depth = True, is_async, 0
        self.self_name = instance_parameter(node.args, self.self_name, self.method_context)
        self.method_context = False
        for value in fields:
            self.field(value)
        (
            self.scope,
            self.function_scope,
            self.function_node,
            self.in_function,
            self.async_ok,
            self.loop_depth,
            self.self_name,
            self.method_context,
        ) = saved

    def _check_signature(self, args: ast.arguments, owner: str) -> None:
        seen: set[str] = set()
        for param in all_params(args):
            if param.arg in seen:
                self.found(
                    STEP_PARSE,
                    param,
                    SYNTAX_ERROR,
                    f"duplicate argument '{param.arg}' in function definition",
                )
            seen.add(param.arg)
            if param.annotation is not None:
                self._check_annotation(param.annotation)
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            if not is_constant(default):
                self.found(
                    STEP_BANNED,
                    default,
                    AST_BANNED_CALL,
                    f"Default values must be constant literals (in {owner})",
                    "defaults are evaluated at definition time; use None and compute the value inside",
                )

    def _arg(self, node: ast.arg) -> None:
        self.bind(node.arg, node)
        self.generic(node)

    def _class(self, node: ast.ClassDef) -> None:
        name = node.name
        self.bind(name, node)
        if node.keywords:
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_CALL,
                f"Class keywords are not allowed (class {name}: {', '.join(str(k.arg) for k in node.keywords)}=...)",
                "metaclasses and class hooks run code at definition time",
            )
        if node.decorator_list:
            self.found(
                STEP_BANNED,
                node.decorator_list[0],
                AST_BANNED_CALL,
                f"Decorators are not allowed (on class {name})",
                "they run code at definition time",
            )
        for base in node.bases:
            if not (
                isinstance(base, Name)
                or (isinstance(base, Attribute) and type(base.value) is Name and base.value.id in self.module_aliases)
            ):
                self.found(
                    STEP_BANNED,
                    base,
                    AST_BANNED_CALL,
                    f"Class bases must be plain names (class {name})",
                    "computed bases run code at definition time",
                )
        for statement in node.body:
            if not class_statement_ok(statement):
                self.found(
                    STEP_BANNED,
                    statement,
                    AST_BANNED_CALL,
                    f"Class-level code is not allowed in class {name}: {describe_statement(statement)}",
                    CLASS_CODE_HINT,
                )
        self.tokens.append(name)
        self.field(node.bases)
        self.field(node.keywords)
        if self.function_node is not None:
            # A class defined inside a function: its name may be used before the scan reaches it.
            self.class_methods[name] = class_methods(node, self.class_methods) | self.class_methods.get(
                name, frozenset()
            )
            self.watched.add(name)
            self.needs_escape_analysis = True
        saved = (
            self.scope,
            self.in_function,
            self.async_ok,
            self.loop_depth,
            self.in_trait,
            self.self_name,
            self.method_context,
        )
        self.scope = set()  # class scope: not visible from methods
        self.in_function, self.async_ok, self.loop_depth = False, False, 0
        self.self_name, self.method_context = None, True
        if node is self.trait_node:
            self.in_trait = True
        self.field(node.body)
        (
            self.scope,
            self.in_function,
            self.async_ok,
            self.loop_depth,
            self.in_trait,
            self.self_name,
            self.method_context,
        ) = saved
        self.field(node.decorator_list)

    def _ann_assign(self, node: ast.AnnAssign) -> None:
        self._check_annotation(node.annotation)
        self.generic(node)

    def _check_annotation(self, annotation: ast.expr) -> None:
        """Annotations may only name types: without 'from __future__ import annotations' they
        are evaluated at definition time, and strings in them can be evaluated later."""
        if isinstance(annotation, Name) or (isinstance(annotation, Constant) and annotation.value is None):
            return
        strings: list[str] = []
        if not is_type_expression(annotation, strings):
            self.found(
                STEP_BANNED,
                annotation,
                AST_BANNED_CALL,
                "Annotations may only name types",
                "e.g. int, list[float], Optional[str]; they must not compute anything",
            )
            return
        for text in strings:
            self._check_annotation_string(text, line_of(annotation))

    def _check_annotation_string(self, text: str, line: int) -> None:
        try:
            parsed = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return  # not an expression, so nothing could ever evaluate it
        if not is_type_expression(parsed.body, []):
            self.found(
                STEP_BANNED,
                line,
                AST_BANNED_CALL,
                f"Annotation string {text!r} is not a type expression",
                "annotations may only name types",
            )
            return
        for node in ast.walk(parsed):
            if isinstance(node, Name):
                problem = name_problem(node.id)
                if problem is not None:
                    self.found(STEP_BANNED, line, *problem)
            elif isinstance(node, Attribute) and (node.attr.startswith("_") or node.attr in BANNED_ATTRS):
                self.found(
                    STEP_BANNED,
                    line,
                    AST_BANNED_ATTR,
                    f"Access to .{node.attr} is not allowed",
                    "special, private and introspection attributes are not available",
                )
