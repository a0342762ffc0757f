"""Step 5, attribute escapes: the ways code climbs from an object to the interpreter.

Refused: every ``_``-prefixed attribute (``__class__``, ``__globals__``, private names), frame,
generator, coroutine, traceback and code attributes (``gi_frame``, ``f_back``, ``tb_frame``),
``format``/``format_map`` (their fields traverse attributes named in strings), ``obj``, ``mro``;
string literals naming special attributes ('__eq__'); module attributes outside the module's
allowed names; methods read through a class of the file; and stores into attributes of anything
but self and the entity (decided after the escape analysis, gatekeeper/escapes.py)."""

from __future__ import annotations

import ast
from ast import Load, Name

from gatekeeper.imports import module_name_problem
from gatekeeper.nodes import root_name
from gatekeeper.state import ScanState
from gatekeeper.tables import (
    AST_BANNED_ATTR,
    ATTR_HINTS,
    BANNED_ATTRS,
    DUNDER,
    FRAME_HINT,
    STEP_BANNED,
    SUSPECT_NAMES,
)


def class_method_read(class_name: str, attr: str) -> tuple[str, str]:
    """(problem, hint) for ``ClassName.method``: a method read through its class."""
    return (
        f"Access to {class_name}.{attr} is not allowed",
        f"{attr} is a method: call it on an instance (self.{attr}(...)); read through the "
        "class it would run on whatever object is passed as self",
    )


class AttributeChecks(ScanState):
    """The scanner's handlers for attributes and string constants (part of scan.Scanner)."""

    def _attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        value = node.value
        ctx = type(node.ctx)
        if attr[0] == "_":
            kind = "special" if attr.startswith("__") and attr.endswith("__") else "private"
            shown = f"{value.id}.{attr}" if type(value) is Name else f".{attr}"
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"Access to {shown} is not allowed",
                f"{kind} attributes (names starting with '_') are not available"
                + ("" if kind == "special" else "; rename it without the underscore"),
            )
        elif attr in BANNED_ATTRS:
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"Access to .{attr} is not allowed",
                ATTR_HINTS.get(attr, FRAME_HINT),
            )
        is_self = False
        if type(value) is Name:
            base = value.id
            if base in self.module_aliases:
                self.module_base = value
                module = self.module_aliases[base]
                problem = None if attr.startswith("_") else module_name_problem(module, attr)
                if problem is not None:
                    self.found(STEP_BANNED, node, AST_BANNED_ATTR, f"Access to {base}.{attr} is not allowed", problem)
            elif base == self.entity and self.in_trait:
                self._entity_attribute(node, base, attr, ctx)
                is_self = True  # the entity by its own name: checked just above
            elif base == self.self_name:
                is_self = True
                if ctx is not Load:
                    self.self_stored_attrs.add(attr)
            elif base in self.class_methods and attr in self.class_methods[base]:
                self.found(STEP_BANNED, node, AST_BANNED_ATTR, *class_method_read(base, attr))
        if ctx is not Load and not is_self:
            root = root_name(value)
            if root is not None and (root.id in self.module_aliases or root.id in self.imported_names):
                self.found(
                    STEP_BANNED,
                    node,
                    AST_BANNED_ATTR,
                    f"Cannot assign or delete .{attr} on '{root.id}'",
                    "imported modules and their objects are shared and read-only",
                )
            else:
                self.pending_stores.append(node)  # refused unless it turns out to be the entity
        # The walk of (value, attr); a plain name as the value, the commonest case, inline.
        if type(value) is Name:
            name = value.id
            self.tokens.append(f"Name\0{name}\0{attr}")
            if type(value.ctx) is not Load or name in SUSPECT_NAMES or name[0] == "_" or name in self.module_aliases:
                self._name_checks(value, name)
            return
        self.visit(value)
        self.tokens.append(attr)

    def _constant(self, node: ast.Constant) -> None:
        constant = node.value
        self.tokens.append(repr(constant))
        if type(constant) is str and constant[:2] == "__":
            self._dunder_string(node, constant)

    def _dunder_string(self, node: ast.Constant, text: str) -> None:
        # Dictionaries handed to enum.Enum(), dataclass/class factories or update_wrapper
        # define or reach special methods by name, without a 'def' or an attribute access.
        if DUNDER.fullmatch(text):
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"String {node.value!r} names a special attribute",
                "special methods and attributes cannot be defined or reached by name",
            )
