"""Steps 7 and 10, the entity: ``entity.<name>`` must be in the entity API (readable attributes
and methods; only the writable attributes assigned, nothing deleted), and its methods are
synchronous, so never awaited.

The scan checks the entity by its own name; where it goes further (aliases, arguments,
attributes of self) the escape analysis (gatekeeper/escapes.py) follows it and checks its
holders the same way."""

from __future__ import annotations

import ast
import difflib
from ast import Call, Del, Load, Store

from gatekeeper.nodes import root_name
from gatekeeper.state import ScanState
from gatekeeper.tables import (
    AST_AWAIT_ON_SYNC,
    AST_ENTITY_ATTR_FORBIDDEN,
    ENTITY_NAMES,
    ENTITY_WRITABLE,
    STEP_AWAIT,
    STEP_ENTITY,
    STEP_PARSE,
    SYNTAX_ERROR,
    WRITABLE_TEXT,
)
from genesis import entity_api


def entity_attribute_problem(
    shown: str, attr: str, ctx: type[ast.expr_context], entity: str | None
) -> tuple[str, str] | None:
    """(problem, hint) when ``<shown>.<attr>`` in context ``ctx`` is outside the entity API, or None.
    ``entity``: the entity parameter's name when ``shown`` is another expression holding the entity."""
    alias = f" ({shown} holds the {entity})" if entity is not None else ""
    if ctx is Load:
        if attr in ENTITY_NAMES:
            return None
        close = difflib.get_close_matches(attr, sorted(ENTITY_NAMES), n=1)
        suggestion = f"did you mean {shown}.{close[0]}? " if close else ""
        return (
            f"{shown}.{attr} is not part of the entity API{alias}",
            f"{suggestion}readable: {', '.join(sorted(entity_api.READABLE_ATTRS))}; "
            f"methods: {', '.join(sorted(entity_api.METHODS))}",
        )
    if ctx is not Del and attr in ENTITY_WRITABLE:
        return None
    verb = "assigned" if ctx is Store else "deleted"
    if ctx is Del and attr in ENTITY_WRITABLE:
        why = "entity attributes can be assigned but never deleted"
    elif attr in entity_api.READABLE_ATTRS:
        why = f"{attr} is read-only ({entity_api.READABLE_ATTRS[attr][1]})"
    elif attr in entity_api.METHODS:
        why = f"{attr} is a method"
    else:
        why = f"{attr} is not part of the entity API"
    return f"{shown}.{attr} cannot be {verb}{alias}", f"{why}; writable attributes: {WRITABLE_TEXT}"


class EntityChecks(ScanState):
    """The scanner's checks of the entity by its own name (part of scan.Scanner)."""

    def _entity_attribute(self, node: ast.Attribute, entity: str, attr: str, ctx: type[ast.expr_context]) -> None:
        problem = entity_attribute_problem(entity, attr, ctx, None)
        if problem is not None:
            self.found(STEP_ENTITY, node, AST_ENTITY_ATTR_FORBIDDEN, *problem)

    def _await(self, node: ast.Await) -> None:
        if not self.async_ok:
            self.found(STEP_PARSE, node, SYNTAX_ERROR, "'await' outside async function")
        if self.in_trait:
            root = root_name(node.value)
            if root is not None and root.id == self.entity:
                target = node.value
                shown = f"{ast.unparse(target.func)}(...)" if type(target) is Call else ast.unparse(target)
                self.found(
                    STEP_AWAIT,
                    node,
                    AST_AWAIT_ON_SYNC,
                    f"'await {shown}' on a synchronous entity method",
                    f"entity methods are synchronous; call {shown} without await",
                )
        self.generic(node)
