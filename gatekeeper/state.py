"""What the scanner's handler families share: the state of one scan, and the methods one part of
the scanner calls on another.

:class:`scan.Scanner <gatekeeper.scan.Scanner>` composes the families (imports, names,
attributes, definitions, statements, entity); each subclasses :class:`ScanState`, so every family
reads, and type-checks, on its own. The walk itself is the scanner's (scan.py)."""

from __future__ import annotations

import ast
from abc import abstractmethod

from gatekeeper.contract import Trait
from gatekeeper.nodes import FunctionNode, line_of
from gatekeeper.tables import SUSPECT_NAMES

Finding = tuple[int, str, str]  # (line, failure code, message)


class ScanState:
    """The state of one scan, ``found()`` to record a finding, and the methods the scanner
    (``visit``, ``generic``, ``field``, ``bind``) and its families define for one another."""

    def __init__(
        self, trait: Trait | None, module_aliases: dict[str, str], class_methods: dict[str, frozenset[str]]
    ) -> None:
        self.tokens: list[str] = []
        self.findings: dict[str, Finding] = {}
        self.trait_node = trait.node if trait else None
        self.entity = trait.entity_param if trait else None
        self.in_trait = False
        self.module_aliases = module_aliases  # bound name -> allowed module
        # Names whose every appearance takes the slow path (_watched_name): banned names, modules,
        # the entity parameter and the classes defined in the file.
        self.watched: set[str] = set(SUSPECT_NAMES) | set(module_aliases) | set(class_methods)
        if self.entity is not None:
            self.watched.add(self.entity)
        # Where the entity and the file's classes go (the escape analysis runs when they go further
        # than entity.<name>, ClassName(...) and ClassName.CONSTANT): each bare use of the entity as
        # (its Name, the node holding it, that node's field, the instance parameter there).
        self.class_methods = class_methods  # class defined in the file -> its methods, with in-file bases'
        self.entity_uses: list[tuple[ast.Name, ast.AST | None, str | None, str | None]] = []
        self.needs_escape_analysis = False
        # Stores into attributes of something other than self or the entity by its own name:
        # refused after the escape analysis unless their object is an alias of the entity.
        self.pending_stores: list[ast.Attribute] = []
        self.self_stored_attrs: set[str] = set()  # attributes assigned on self anywhere
        self.self_name: str | None = None  # the instance parameter of the method being scanned
        self.method_context = False  # the next function definition is a method (in a class body)
        self.imported_names: set[str] = set()  # objects bound by 'from module import name'
        self.module_base: ast.Name | None = None  # the Name being used as 'module.<attr>'
        # Scopes for step 9: the names each function binds (Python scoping).
        self.module_scope: set[str] = set()
        self.scope: set[str] = self.module_scope
        self.function_scope: set[str] = self.module_scope  # nearest non-comprehension scope
        self.function_node: FunctionNode | None = None
        self.function_locals: dict[FunctionNode, set[str]] = {}
        self.functions_with_del: set[FunctionNode] = set()
        # Context for compile-time errors that ast.parse does not report.
        self.in_function = False
        self.async_ok = False
        self.loop_depth = 0
        self.depth = 0  # nesting of the node being visited (MAX_NESTING)

    def found(self, step: str, node: ast.AST | int, code: str, problem: str, hint: str = "") -> None:
        """Record a finding as 'problem (line N); hint', keeping the earliest per step."""
        line = node if isinstance(node, int) else line_of(node)
        current = self.findings.get(step)
        if current is None or line < current[0]:
            self.findings[step] = (line, code, f"{problem} (line {line})" + (f"; {hint}" if hint else ""))

    # -- defined by the scanner (scan.py) ------------------------------------------------

    @abstractmethod
    def visit(self, node: ast.AST) -> None:
        """Emit and check a node: its handler, or the generic walk."""

    @abstractmethod
    def generic(self, node: ast.AST) -> None:
        """Emit and check every field of a node."""

    @abstractmethod
    def field(self, value: object) -> None:
        """Emit and check one field value."""

    @abstractmethod
    def bind(self, name: str, node: ast.AST) -> None:
        """A name bound by an assignment, def, class, import, parameter or except clause."""

    # -- defined by one family, called by another ----------------------------------------

    @abstractmethod
    def _name_checks(self, node: ast.Name, name: str) -> None:
        """A name's own checks: a binding, a banned name, a module used as a value (names.py)."""

    @abstractmethod
    def _entity_attribute(self, node: ast.Attribute, entity: str, attr: str, ctx: type[ast.expr_context]) -> None:
        """``entity.<attr>`` by the entity's own name (entity.py)."""
