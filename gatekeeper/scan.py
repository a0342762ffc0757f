"""The single scan: one pre-order pass over the tree that records the first finding of each step
it covers (3, 4, 5, 7 and 10), the names every function binds (for step 9), where the entity and
the file's classes go (for the escape analysis), and the normalised code hash.

The walk and the state live here; the checks are the handlers of each family, in their own
modules (imports, names, attributes, definitions, statements, entity), composed into
:class:`Scanner`. A handler is picked by node class from one table; node classes without one
get the generic walk, which also handles names and constants inline (about half of all nodes).

The hash is sha256 over a canonical token stream of the tree (node types, identifiers, constant
reprs and list brackets; no positions), so comments, blank lines, formatting and parentheses do
not change it, while any change of logic does. Stored hashes decide duplicates: the stream must
stay exactly as it is.
"""

from __future__ import annotations

import ast
import hashlib
from ast import (
    AST,
    AnnAssign,
    AsyncFor,
    AsyncFunctionDef,
    Attribute,
    Await,
    Break,
    Call,
    ClassDef,
    Constant,
    Continue,
    DictComp,
    ExceptHandler,
    For,
    FunctionDef,
    GeneratorExp,
    Global,
    Import,
    ImportFrom,
    Lambda,
    ListComp,
    Load,
    Match,
    Module,
    Name,
    NamedExpr,
    Nonlocal,
    Return,
    SetComp,
    Store,
    While,
    Yield,
    YieldFrom,
)
from collections.abc import Callable

from gatekeeper.attributes import AttributeChecks
from gatekeeper.contract import Trait
from gatekeeper.definitions import DefinitionChecks
from gatekeeper.entity import EntityChecks
from gatekeeper.imports import ImportChecks
from gatekeeper.names import NameChecks, name_problem
from gatekeeper.nodes import TooDeep, ast_classes, field_table, line_of
from gatekeeper.statements import StatementChecks
from gatekeeper.tables import AST_BANNED_ATTR, MAX_NESTING, STEP_BANNED, SUSPECT_NAMES

# The scanned (hashed) fields of every node class.
FIELDS = field_table(frozenset({"ctx", "type_comment", "kind"}))
# The token of every node class (a dict lookup is cheaper than reading a type's __name__).
NODE_NAMES: dict[type, str] = {cls: cls.__name__ for cls in ast_classes()}
# Operator nodes have no fields: emitted by name without a visit.
OPERATOR_NAMES: dict[type, str] = {
    cls: cls.__name__ for base in (ast.operator, ast.boolop, ast.unaryop, ast.cmpop) for cls in base.__subclasses__()
}

Finding = tuple[int, str, str]  # (line, failure code, message)


class Scanner(ImportChecks, NameChecks, AttributeChecks, DefinitionChecks, StatementChecks, EntityChecks):
    """One pass: ``visit(tree)``, then ``findings`` (step -> its earliest finding) and ``digest()``."""

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
        # than entity.<name>, ClassName(...) and ClassName.CONSTANT).
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
        self.function_node: ast.AST | None = None
        self.function_locals: dict[ast.AST, set[str]] = {}
        self.functions_with_del: set[ast.AST] = set()
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

    def digest(self) -> str:
        return hashlib.sha256("\0".join(self.tokens).encode("utf-8", "surrogatepass")).hexdigest()

    def visit(self, node: ast.AST) -> None:
        self.tokens.append(NODE_NAMES[type(node)])
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise TooDeep
        DISPATCH[type(node)](self, node)
        self.depth -= 1

    def generic(self, node: ast.AST) -> None:
        """Emit/visit every field of a node: the hot path of every validation.

        Children are dispatched directly (no visit() frame), and names, constants and
        operators, about half of all nodes, are handled inline (twice: as list items and as
        single fields; a method call each would cost ~7% of a validation). Tokens that always
        follow each other are emitted pre-joined with the separator: the digest only sees the
        joined text."""
        tokens = self.tokens
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise TooDeep
        for field_name in FIELDS[type(node)]:
            value = getattr(node, field_name)
            value_cls = type(value)
            if value_cls is list:
                if not value:
                    tokens.append("[\0]")
                    continue
                tokens.append("[")
                for item in value:
                    item_cls = type(item)
                    if item_cls is Name:
                        name = item.id
                        tokens.append("Name\0" + name)
                        ctx = type(item.ctx)
                        if name in self.watched or name[0] == "_":
                            self._watched_name(item, name, node, field_name)
                        elif ctx is Store:
                            if name == self.self_name:
                                self.bind(name, item)
                            else:
                                self.scope.add(name)  # what bind() does for an unremarkable name
                        elif ctx is not Load:
                            self._name_checks(item, name)
                    elif item_cls is Constant:
                        constant = item.value
                        tokens.append("Constant\0" + repr(constant))
                        if type(constant) is str and constant[:2] == "__":
                            self._dunder_string(item)
                    elif item_cls in OPERATOR_NAMES:
                        tokens.append(OPERATOR_NAMES[item_cls])
                    elif item is None:
                        tokens.append("~")  # kw_defaults without a default, dict unpacking
                    elif item_cls is str:
                        tokens.append(item)  # identifiers, e.g. Global.names
                    else:
                        tokens.append(NODE_NAMES[item_cls])
                        DISPATCH[item_cls](self, item)
                tokens.append("]")
            elif value_cls is Name:
                name = value.id
                tokens.append("Name\0" + name)
                ctx = type(value.ctx)
                if name in self.watched or name[0] == "_":
                    self._watched_name(value, name, node, field_name)
                elif ctx is Store:
                    if name == self.self_name:
                        self.bind(name, value)
                    else:
                        self.scope.add(name)  # what bind() does for an unremarkable name
                elif ctx is not Load:
                    self._name_checks(value, name)
            elif value_cls is Constant:
                constant = value.value
                tokens.append("Constant\0" + repr(constant))
                if type(constant) is str and constant[:2] == "__":
                    self._dunder_string(value)
            elif value is None:
                tokens.append("~")
            elif value_cls is str:
                tokens.append(value)
            elif value_cls in OPERATOR_NAMES:
                tokens.append(OPERATOR_NAMES[value_cls])
            elif isinstance(value, AST):
                tokens.append(NODE_NAMES[value_cls])
                DISPATCH[value_cls](self, value)
            else:
                tokens.append(repr(value))
        self.depth -= 1

    def field(self, value: object) -> None:
        """Emit/visit one field value (used by handlers that change context between fields)."""
        if type(value) is list:
            if not value:
                self.tokens.append("[\0]")
                return
            self.tokens.append("[")
            for item in value:
                if item is None:
                    self.tokens.append("~")
                else:
                    self.visit(item)
            self.tokens.append("]")
        elif value is None:
            self.tokens.append("~")
        elif isinstance(value, AST):
            self.visit(value)
        else:
            self.tokens.append(value if type(value) is str else repr(value))

    def bind(self, name: str, node: ast.AST) -> None:
        """A name bound by an assignment, def, class, import, parameter or except clause."""
        self.scope.add(name)
        if name == self.self_name and type(node) is not ast.arg:  # a parameter shadows it instead
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"The instance parameter '{name}' cannot be rebound",
                "stores into its attributes are allowed because it is the instance; use another name",
            )
        if name in SUSPECT_NAMES or name[0] == "_":
            problem = name_problem(name)
            if problem is not None:
                code, text, hint = problem
                if name in SUSPECT_NAMES:
                    hint = "banned builtin names cannot be reused; choose another name"
                self.found(STEP_BANNED, node, code, text, hint)
        if name in self.module_aliases:
            self.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"Name '{name}' is an imported module and cannot be rebound",
                "choose another name",
            )


# Node class -> handler (an unbound method: bound methods kept on the instance would form a
# reference cycle that keeps every tree alive until the cyclic GC runs). Every node class is a
# key, those without a handler of their own map to the generic walk.
HANDLERS: dict[type, Callable[[Scanner, ast.AST], None]] = {
    Module: Scanner._module,
    Import: Scanner._import,
    ImportFrom: Scanner._import_from,
    Name: Scanner._name,
    Attribute: Scanner._attribute,
    Call: Scanner._call,
    Constant: Scanner._constant,
    FunctionDef: Scanner._function,
    AsyncFunctionDef: Scanner._function,
    Lambda: Scanner._lambda,
    ClassDef: Scanner._class,
    ast.arg: Scanner._arg,
    For: Scanner._loop,
    AsyncFor: Scanner._loop,
    While: Scanner._loop,
    Break: Scanner._break_continue,
    Continue: Scanner._break_continue,
    Return: Scanner._return,
    Await: Scanner._await,
    ExceptHandler: Scanner._except_handler,
    NamedExpr: Scanner._named_expr,
    ListComp: Scanner._comprehension,
    SetComp: Scanner._comprehension,
    GeneratorExp: Scanner._comprehension,
    DictComp: Scanner._comprehension,
    AnnAssign: Scanner._ann_assign,
    Global: Scanner._refused,
    Nonlocal: Scanner._refused,
    Match: Scanner._refused,
    Yield: Scanner._refused,
    YieldFrom: Scanner._refused,
}
DISPATCH: dict[type, Callable[[Scanner, ast.AST], None]] = {
    cls: HANDLERS.get(cls, Scanner.generic) for cls in ast_classes()
}
