"""Step 4, import whitelist: which modules a trait may import, and which of their names it may use.

A module is allowed only by itself (never a submodule, never relatively), and of an allowed
module only the names the sandbox rules list for it (``rules.ALLOWED_MODULE_NAMES``): data,
reviewed, the same whatever interpreter validates. A name the rules refuse says why; one they do
not know is refused as unknown, whether or not this interpreter happens to define it."""

from __future__ import annotations

import ast
import importlib
import types
from ast import Import

from gatekeeper.names import name_problem
from gatekeeper.state import ScanState
from gatekeeper.tables import (
    ALLOWED_MODULES,
    ALLOWED_MODULES_TEXT,
    AST_IMPORT_FORBIDDEN,
    MODULE_ATTR_DENYLIST,
    MODULE_NAMES,
    STEP_BANNED,
    STEP_IMPORTS,
)


def module_name_problem(module: str, name: str) -> str | None:
    """Why ``module.name`` (or ``from module import name``) is refused, or None."""
    if name in MODULE_NAMES.get(module, ()):
        return None
    if name.startswith("_"):
        return f"'{module}.{name}' is private"
    denied = MODULE_ATTR_DENYLIST.get(module, {})
    if name in denied:
        return f"'{module}.{name}' is not allowed: it {denied[name]}"
    if module == "__future__":
        return f"'{name}' is not a __future__ feature; use 'from __future__ import annotations'"
    # Refused either way; the interpreter is asked only to word the message.
    value = getattr(importlib.import_module(module), name, None)  # trusted stdlib, in the allow-list
    if isinstance(value, types.ModuleType):
        return f"'{module}.{name}' is a module; only modules in the allow-list may be used"
    if value is None and not hasattr(importlib.import_module(module), name):
        return f"module '{module}' has no public name '{name}'"
    return f"'{module}.{name}' is not in the allow-list of module '{module}' (the sandbox rules list its names)"


def module_aliases(tree: ast.Module) -> dict[str, str]:
    """Names bound to allowed modules by top-level 'import X [as Y]' (known before the scan)."""
    aliases: dict[str, str] = {}
    for statement in tree.body:
        if type(statement) is Import:
            for alias in statement.names:
                name = alias.name
                if name in ALLOWED_MODULES and name != "__future__":
                    aliases[alias.asname if alias.asname else name] = name
    return aliases


class ImportChecks(ScanState):
    """The scanner's handlers for ``import`` and ``from ... import`` (part of scan.Scanner)."""

    def _import(self, node: ast.Import) -> None:
        for alias in node.names:
            full = alias.name
            top = full.partition(".")[0]
            if top not in ALLOWED_MODULES:
                self.found(
                    STEP_IMPORTS,
                    node,
                    AST_IMPORT_FORBIDDEN,
                    f"Forbidden import: {full}",
                    f"allowed modules: {ALLOWED_MODULES_TEXT}",
                )
            elif full != top:
                self.found(
                    STEP_IMPORTS,
                    node,
                    AST_IMPORT_FORBIDDEN,
                    f"Forbidden import: {full}",
                    f"submodules are not allowed; import {top} itself",
                )
            elif full == "__future__":
                self.found(
                    STEP_IMPORTS,
                    node,
                    AST_IMPORT_FORBIDDEN,
                    "Forbidden import: __future__",
                    "write 'from __future__ import annotations'",
                )
            bound = alias.asname or top
            if top in ALLOWED_MODULES and full == top:
                self.module_aliases[bound] = top
                self.watched.add(bound)
            self.scope.add(bound)
            problem = name_problem(bound)
            if problem is not None:
                self.found(STEP_BANNED, alias, *problem)
        self.generic(node)

    def _import_from(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        names = ", ".join(alias.name for alias in node.names)
        top = module.partition(".")[0]
        if node.level:
            self.found(
                STEP_IMPORTS,
                node,
                AST_IMPORT_FORBIDDEN,
                f"Forbidden import: relative import 'from {'.' * node.level}{module} import {names}'",
                f"allowed modules: {ALLOWED_MODULES_TEXT}",
            )
        elif top not in ALLOWED_MODULES:
            self.found(
                STEP_IMPORTS,
                node,
                AST_IMPORT_FORBIDDEN,
                f"Forbidden import: {module}",
                f"allowed modules: {ALLOWED_MODULES_TEXT}",
            )
        elif module != top:
            self.found(
                STEP_IMPORTS,
                node,
                AST_IMPORT_FORBIDDEN,
                f"Forbidden import: {module}",
                f"submodules are not allowed; import from {top}",
            )
        else:
            for alias in node.names:
                name = alias.name
                if name == "*":
                    self.found(
                        STEP_IMPORTS,
                        node,
                        AST_IMPORT_FORBIDDEN,
                        f"Forbidden import: 'from {module} import *'",
                        "import the names you use",
                    )
                    continue
                problem = module_name_problem(module, name)
                if problem is not None:
                    self.found(STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN, f"Forbidden import: {problem}")
        if module != "__future__":
            for alias in node.names:
                if alias.name != "*":
                    bound = alias.asname or alias.name
                    self.imported_names.add(bound)
                    self.bind(bound, alias)
        self.generic(node)
