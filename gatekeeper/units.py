"""The units of a file for the escape analysis: every function, method and lambda, where it is
defined, and which of them a call may run."""

from __future__ import annotations

import ast
from ast import (
    Assign,
    AsyncFunctionDef,
    Attribute,
    ClassDef,
    ExceptHandler,
    FunctionDef,
    Import,
    ImportFrom,
    Lambda,
    Load,
    Name,
)

from gatekeeper.nodes import FUNCTION_TYPES, Definition, FunctionNode, all_params, instance_parameter, plain_names

# The nodes FileUnits._collect looks at: units, classes, and what binds a name (keep in step with
# its branches; every other node is only walked through).
COLLECTED = frozenset(
    {FunctionDef, AsyncFunctionDef, Lambda, ClassDef, Assign, Name, ExceptHandler, Import, ImportFrom}
)


class FileUnits:
    """Collected once per file: ``units`` in walk order, each as (unit, enclosing unit or None,
    the name of the instance in it); ``trait_units``, those inside the trait class; the file's
    functions, methods and classes by name, and ``shadowed``, every name bound to something
    other than a builtin."""

    def __init__(self, tree: ast.Module, trait_node: ast.ClassDef | None) -> None:
        self.trait_node = trait_node
        self.units: list[tuple[FunctionNode, FunctionNode | None, str | None]] = []
        # unit -> the units defined in it (None: the module)
        self.children: dict[FunctionNode | None, list[FunctionNode]] = {}
        # unit -> (enclosing, self name)
        self.unit_self: dict[FunctionNode, tuple[FunctionNode | None, str | None]] = {}
        self.trait_units: set[FunctionNode] = set()
        self.functions: dict[str, list[FunctionNode]] = {}  # name -> the defs and lambdas bound to it
        self.methods: dict[str, list[Definition]] = {}  # method name -> its definitions in any class
        self.classes: dict[str, list[ast.ClassDef]] = {}
        self.other_bindings: set[str] = set()  # names also bound to something else than a def
        self._collect(tree, None, None, False, False)
        self.shadowed = self.other_bindings | set(self.functions) | set(self.classes)

    def _add(self, unit: FunctionNode, enclosing: FunctionNode | None, self_name: str | None, in_trait: bool) -> None:
        self.units.append((unit, enclosing, self_name))
        self.children.setdefault(enclosing, []).append(unit)
        self.unit_self[unit] = (enclosing, self_name)
        if in_trait:
            self.trait_units.add(unit)
        self.other_bindings.update(param.arg for param in all_params(unit.args))

    def _collect(
        self, node: ast.AST, unit: FunctionNode | None, self_name: str | None, in_class: bool, in_trait: bool
    ) -> None:
        for child in ast.iter_child_nodes(node):
            if type(child) not in COLLECTED:
                self._collect(child, unit, self_name, False, in_trait)  # defines and binds nothing itself
            elif isinstance(child, Name):
                if type(child.ctx) is not Load:
                    self.other_bindings.add(child.id)
                self._collect(child, unit, self_name, False, in_trait)
            elif isinstance(child, (FunctionDef, AsyncFunctionDef, Lambda)):
                child_self = instance_parameter(child.args, self_name, in_class and not isinstance(child, Lambda))
                self._add(child, unit, child_self, in_trait)
                if not isinstance(child, Lambda):
                    (self.methods if in_class else self.functions).setdefault(child.name, []).append(child)
                self._collect(child, child, child_self, False, in_trait)
            elif isinstance(child, ClassDef):
                self.classes.setdefault(child.name, []).append(child)
                self._collect(child, unit, None, True, in_trait or child is self.trait_node)
            else:
                if isinstance(child, Assign) and isinstance(child.value, Lambda) and plain_names(child.targets):
                    function = child.value
                    for target in child.targets:
                        self.functions.setdefault(target.id, []).append(function)
                    self._collect(function, unit, self_name, False, in_trait)
                    self._add(function, unit, instance_parameter(function.args, self_name, False), in_trait)
                    continue
                if isinstance(child, ExceptHandler) and child.name:
                    self.other_bindings.add(child.name)
                elif isinstance(child, (Import, ImportFrom)):
                    self.other_bindings.update((a.asname or a.name).partition(".")[0] for a in child.names)
                self._collect(child, unit, self_name, False, in_trait)

    def inits(self, class_name: str, seen: set[str]) -> list[Definition] | None:
        """The __init__ methods that ``class_name(...)`` may run, or None if one is not the file's."""
        if class_name in seen:
            return []
        seen.add(class_name)
        found: list[Definition] = []
        for node in self.classes.get(class_name, ()):
            inits = [m for m in node.body if isinstance(m, FUNCTION_TYPES) and m.name == "__init__"]
            if inits:
                found += inits
                continue
            for base in node.bases:
                if type(base) is not Name or base.id not in self.classes:
                    return None  # object's or a module class's __init__: not followed
                inherited = self.inits(base.id, seen)
                if inherited is None:
                    return None
                found += inherited
            if not node.bases:
                return None
        return found

    def callees(
        self, func: ast.expr, self_name: str | None, self_stored_attrs: set[str]
    ) -> list[tuple[FunctionNode, int]] | None:
        """The functions of the file a call of ``func`` may run, each with how many leading
        parameters are bound already (self), or None when the call may run something else.
        ``self_name``: the instance in the calling unit; ``self_stored_attrs``: attributes
        assigned on self anywhere (a method of that name may have been replaced)."""
        if isinstance(func, Lambda):
            return [(func, 0)]
        if isinstance(func, Name):
            name = func.id
            if name in self.other_bindings:
                return None
            if name in self.functions:
                return [(function, 0) for function in self.functions[name]]
            if name in self.classes:
                inits = self.inits(name, set())
                return [(init, 1) for init in inits] if inits else None
            return None
        if isinstance(func, Attribute) and type(func.value) is Name and func.value.id == self_name is not None:
            if func.attr in self_stored_attrs or func.attr not in self.methods:
                return None
            return [(method, 1) for method in self.methods[func.attr]]
        return None
