"""The single scan: one pre-order pass over the tree that records the first finding of each step
it covers (3, 4, 5, 7 and 10), the names every function binds (for step 9), where the entity and
the file's classes go (for the escape analysis), and the normalised code hash.

The walk lives here, the state in state.py; the checks are the handlers of each family, in their
own modules (imports, names, attributes, definitions, statements, entity), composed into
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
from typing import Any, TypeVar

from gatekeeper.attributes import AttributeChecks
from gatekeeper.definitions import DefinitionChecks
from gatekeeper.entity import EntityChecks
from gatekeeper.imports import ImportChecks
from gatekeeper.names import NameChecks, name_problem
from gatekeeper.nodes import TooDeep, ast_classes, field_table
from gatekeeper.statements import StatementChecks
from gatekeeper.tables import AST_BANNED_ATTR, MAX_NESTING, STEP_BANNED, SUSPECT_NAMES

# The scanned (hashed) fields of every node class.
FIELDS = field_table(frozenset({"ctx", "type_comment", "kind"}))
# The token of every node class (a dict lookup is cheaper than reading a type's __name__).
NODE_NAMES: dict[type[AST], str] = {cls: cls.__name__ for cls in ast_classes()}
# Operator nodes have no fields: emitted by name without a visit.
OPERATOR_NAMES: dict[type[AST], str] = {
    cls: cls.__name__ for base in (ast.operator, ast.boolop, ast.unaryop, ast.cmpop) for cls in base.__subclasses__()
}


class Scanner(ImportChecks, NameChecks, AttributeChecks, DefinitionChecks, StatementChecks, EntityChecks):
    """One pass: ``visit(tree)``, then ``findings`` (step -> its earliest finding) and ``digest()``.
    Its state, and the arguments it is created with, are state.ScanState's."""

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
                            self._dunder_string(item, constant)
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
                    self._dunder_string(value, constant)
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
Handler = Callable[[Scanner, Any], None]  # Any: the node's class is the handler's key
NodeT = TypeVar("NodeT", bound=AST)


def handles(node_class: type[NodeT], handler: Callable[[Scanner, NodeT], None]) -> tuple[type[AST], Handler]:
    """A table entry; the type checker checks that ``handler`` takes nodes of ``node_class``."""
    return node_class, handler


HANDLERS: dict[type[AST], Handler] = dict(
    [
        handles(Module, Scanner._module),
        handles(Import, Scanner._import),
        handles(ImportFrom, Scanner._import_from),
        handles(Name, Scanner._name),
        handles(Attribute, Scanner._attribute),
        handles(Call, Scanner._call),
        handles(Constant, Scanner._constant),
        handles(FunctionDef, Scanner._function),
        handles(AsyncFunctionDef, Scanner._function),
        handles(Lambda, Scanner._lambda),
        handles(ClassDef, Scanner._class),
        handles(ast.arg, Scanner._arg),
        handles(For, Scanner._loop),
        handles(AsyncFor, Scanner._loop),
        handles(While, Scanner._loop),
        handles(Break, Scanner._break_continue),
        handles(Continue, Scanner._break_continue),
        handles(Return, Scanner._return),
        handles(Await, Scanner._await),
        handles(ExceptHandler, Scanner._except_handler),
        handles(NamedExpr, Scanner._named_expr),
        handles(ListComp, Scanner._comprehension),
        handles(SetComp, Scanner._comprehension),
        handles(GeneratorExp, Scanner._comprehension),
        handles(DictComp, Scanner._comprehension),
        handles(AnnAssign, Scanner._ann_assign),
        handles(Global, Scanner._refused),
        handles(Nonlocal, Scanner._refused),
        handles(Match, Scanner._refused),
        handles(Yield, Scanner._refused),
        handles(YieldFrom, Scanner._refused),
    ]
)
DISPATCH: dict[type[AST], Handler] = {cls: HANDLERS.get(cls, Scanner.generic) for cls in ast_classes()}
