"""Step 5, banned names: builtins that reach code, introspection or the console (``eval``,
``getattr``, ``type``, ``print``, ...), the host's deadline exceptions, names starting with ``_``,
and imported modules used as anything but ``module.<name>``.

A banned name may not appear at all: not called, not read, not bound to something of your own.
Every check sees identifiers NFKC-normalised by the parser (``ｅｖａｌ`` arrives as ``eval``),
exactly the names the interpreter would resolve."""

from __future__ import annotations

import ast
from ast import Call, Del, Load, Name

from gatekeeper.state import ScanState
from gatekeeper.tables import (
    AST_BANNED_ATTR,
    AST_BANNED_CALL,
    BANNED_ATTRS,
    BANNED_CALLS,
    BANNED_EXCEPTIONS,
    DEFAULT_NAME_HINT,
    NAME_HINTS,
    STEP_BANNED,
    SUSPECT_NAMES,
)


def name_problem(name: str) -> tuple[str, str, str] | None:
    """(code, problem, hint) if a bare name may not appear at all (call, reference or binding)."""
    if name in BANNED_CALLS:
        return AST_BANNED_CALL, f"Use of {name} is not allowed", NAME_HINTS.get(name, DEFAULT_NAME_HINT)
    if name in BANNED_EXCEPTIONS:
        return (
            AST_BANNED_CALL,
            f"Use of {name} is not allowed",
            ("the sandbox's deadline signal must not be caught; use Exception or a specific error"),
        )
    if name.startswith("_") and name != "_":
        if name in BANNED_ATTRS:
            return AST_BANNED_ATTR, f"Use of {name} is not allowed", "interpreter internals are not available"
        return AST_BANNED_ATTR, f"Name '{name}' is not allowed", "names starting with '_' are reserved; rename it"
    return None


class NameChecks(ScanState):
    """The scanner's handlers for names and calls by name (part of scan.Scanner)."""

    def _name(self, node: ast.Name) -> None:
        name = node.id
        self.tokens.append(name)
        self._name_checks(node, name)
        if name == self.entity and self.in_trait and type(node.ctx) is Load:
            # Reached through a handler (loop, lambda body, ...), not as a call argument.
            self.entity_uses.append((node, None, None, self.self_name))

    def _watched_name(self, node: ast.Name, name: str, parent: ast.AST, field_name: str) -> None:
        """A name in self.watched, met as the field ``field_name`` of ``parent``."""
        self._name_checks(node, name)
        if type(node.ctx) is not Load:
            return
        if name == self.entity and self.in_trait:
            self.entity_uses.append((node, parent, field_name, self.self_name))
        if name in self.class_methods and not (
            (field_name == "func" and type(parent) is Call) or field_name == "annotation"
        ):
            self.needs_escape_analysis = True  # a class of the file used as a value

    def _name_checks(self, node: ast.Name, name: str) -> None:
        ctx = type(node.ctx)
        if ctx is not Load:
            self.bind(name, node)
            if ctx is Del and self.function_node is not None:
                self.functions_with_del.add(self.function_node)
            return
        if name in SUSPECT_NAMES or name[0] == "_":
            problem = name_problem(name)
            if problem is not None:
                self.found(STEP_BANNED, node, *problem)
        if name in self.module_aliases and node is not self.module_base:
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"Module '{name}' may only be used as {name}.<name>",
                "a module cannot be assigned, passed or returned",
            )

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if type(func) is Name:
            name = func.id
            if name in BANNED_CALLS:
                hint = NAME_HINTS.get(name, DEFAULT_NAME_HINT)
                self.found(STEP_BANNED, node, AST_BANNED_CALL, f"Call to {name}() is not allowed", hint)
        self.generic(node)
