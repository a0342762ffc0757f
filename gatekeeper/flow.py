"""Step 9, unbound variables: every local is assigned on every path before it is read, and every
other name is module-level, an allowed builtin or a closure variable.

A flow-sensitive pass over function bodies (the scan has already collected the names each
function binds): the state at each point is the set of names assigned on every path reaching it;
branches meet by intersection, a ``return``/``raise``/``break`` ends a path. Names evaluated while
the module loads (bases, annotations without ``from __future__ import annotations``) must be
defined earlier in the file."""

from __future__ import annotations

import ast
from ast import (
    AnnAssign,
    Assert,
    Assign,
    AsyncFor,
    AsyncFunctionDef,
    AsyncWith,
    Attribute,
    AugAssign,
    BoolOp,
    Break,
    Call,
    ClassDef,
    Constant,
    Continue,
    Del,
    Delete,
    DictComp,
    Expr,
    For,
    FunctionDef,
    If,
    IfExp,
    Import,
    ImportFrom,
    Lambda,
    List,
    Name,
    NamedExpr,
    Pass,
    Raise,
    Return,
    Starred,
    Subscript,
    Try,
    TryStar,
    Tuple,
    While,
    With,
)
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from gatekeeper.nodes import (
    COMPREHENSIONS,
    FUNCTION_TYPES,
    Comprehension,
    Definition,
    FunctionNode,
    all_params,
    field_table,
)
from gatekeeper.scan import Scanner
from gatekeeper.tables import BUILTINS


def has_future_annotations(tree: ast.Module) -> bool:
    """Whether annotations are left unevaluated ('from __future__ import annotations')."""
    for statement in tree.body:
        if (
            type(statement) is ImportFrom
            and statement.module == "__future__"
            and any(alias.name == "annotations" for alias in statement.names)
        ):
            return True
    return False


class Unbound(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


State = set[str]


def meet(states: Iterable[State | None]) -> State | None:
    """Names assigned on every path that reaches this point (None: no path reaches it)."""
    live = [state for state in states if state is not None]
    if not live:
        return None
    first = live[0]
    return first.intersection(*live[1:]) if len(live) > 1 else first


def deleted_names(statements: list[ast.stmt]) -> set[str]:
    return {
        node.id
        for statement in statements
        for node in ast.walk(statement)
        if type(node) is Name and type(node.ctx) is Del
    }


EXPR_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "kind", "conversion", "is_async"})
# The fields FlowChecker._expr walks generically, and the classes it walks so: all but those it
# checks by hand (keep in step with its branches). Most expressions are walked, so the class picks
# this branch before any isinstance() test.
EXPR_FIELDS = field_table(EXPR_SKIPPED_FIELDS)
EXPR_BY_FIELDS = frozenset(EXPR_FIELDS) - {
    Name,
    Attribute,
    Constant,
    Call,
    BoolOp,
    IfExp,
    NamedExpr,
    Lambda,
    *COMPREHENSIONS,
}


class FlowChecker:
    """Flow-sensitive check that every local is assigned on every path before it is read,
    and that every other name is module-level, an allowed builtin or a closure variable."""

    def __init__(self, scanner: Scanner, future_annotations: bool) -> None:
        self.module_names = scanner.module_scope
        self.function_locals = scanner.function_locals
        self.functions_with_del = scanner.functions_with_del
        self.future_annotations = future_annotations
        # Per-function context, saved and restored around nested functions.
        self.locals: set[str] = set()
        self.enclosing: tuple[set[str], ...] = ()
        self.function_name = "<module>"
        self.has_del = False
        self.loops: list[tuple[list[State], list[State]]] = []

    # -- module level ---------------------------------------------------------------------

    def check_module(self, tree: ast.Module) -> None:
        defined: set[str] = set()
        for statement in tree.body:
            if isinstance(statement, ClassDef):
                for base in statement.bases:
                    if type(base) is Name and (base.id in defined or base.id in BUILTINS):
                        continue  # the common case, decided without building the message
                    self._module_level_names(base, defined, f"base of class {statement.name}")
                class_defined = set(defined)
                for member in statement.body:
                    if isinstance(member, FUNCTION_TYPES):
                        self._definition_time_annotations(member, class_defined)
                        self.check_function(member, ())
                        class_defined.add(member.name)
                    elif type(member) is AnnAssign and not self.future_annotations:
                        self._module_level_names(member.annotation, class_defined, "annotation")
                    if isinstance(member, (Assign, AnnAssign)):
                        targets = member.targets if isinstance(member, Assign) else [member.target]
                        class_defined.update(t.id for t in targets if type(t) is Name)
                defined.add(statement.name)
            elif isinstance(statement, FUNCTION_TYPES):
                self._definition_time_annotations(statement, defined)
                self.check_function(statement, ())
                defined.add(statement.name)
            elif isinstance(statement, (Import, ImportFrom)):
                for alias in statement.names:
                    defined.add((alias.asname or alias.name).partition(".")[0])
            elif isinstance(statement, Assign):
                defined.update(t.id for t in statement.targets if type(t) is Name)
            elif isinstance(statement, AnnAssign):
                if not self.future_annotations:
                    self._module_level_names(statement.annotation, defined, "annotation")
                if statement.value is not None and type(statement.target) is Name:
                    defined.add(statement.target.id)

    def _definition_time_annotations(self, function: Definition, defined: set[str]) -> None:
        if self.future_annotations:
            return
        args = function.args
        for param in all_params(args):
            if param.annotation is not None:
                self._module_level_names(param.annotation, defined, "annotation")
        if function.returns is not None:
            self._module_level_names(function.returns, defined, "annotation")

    def _module_level_names(self, node: ast.expr, defined: set[str], where: str) -> None:
        """Names evaluated while the module loads must already be defined."""
        for child in ast.walk(node):
            if isinstance(child, Name) and child.id not in defined and child.id not in BUILTINS:
                if child.id in self.module_names:
                    raise Unbound(
                        f"'{child.id}' is used in the {where} before it is defined "
                        f"(line {child.lineno}); define it earlier in the file"
                    )
                raise Unbound(f"undefined name '{child.id}' in the {where} (line {child.lineno})")

    # -- functions ------------------------------------------------------------------------

    def check_function(self, node: FunctionNode, enclosing: tuple[set[str], ...]) -> None:
        saved = (self.locals, self.enclosing, self.function_name, self.has_del, self.loops)
        self.locals = self.function_locals.get(node, set())
        self.enclosing = enclosing
        self.function_name = getattr(node, "name", "lambda")
        self.has_del = node in self.functions_with_del
        self.loops = []
        state = {param.arg for param in all_params(node.args)}
        if isinstance(node, Lambda):
            self._expr(node.body, state)
        else:
            self._block(node.body, state)
        self.locals, self.enclosing, self.function_name, self.has_del, self.loops = saved

    def _nested(self, node: FunctionNode) -> None:
        self.check_function(node, (self.locals,) + self.enclosing)

    def _missing(self, node: ast.Name) -> None:
        """A read of a name not definitely assigned in this function at this point."""
        name = node.id
        if name in self.locals:
            raise Unbound(
                f"'{name}' may be used before it is assigned (line {node.lineno}, in "
                f"{self.function_name}); assign it on every path before this line, e.g. "
                f"{name} = None at the top"
            )
        if name in self.module_names or name in BUILTINS:
            return
        for scope in self.enclosing:
            if name in scope:
                return
        raise Unbound(
            f"undefined name '{name}' (line {node.lineno}, in {self.function_name}); "
            "define it, import it from an allowed module, or read class constants as self.NAME"
        )

    # -- statements -----------------------------------------------------------------------

    def _block(self, statements: list[ast.stmt], state: State) -> State | None:
        for statement in statements:
            # Statements without a handler (global, match, ...) were rejected in step 5.
            after = FLOW_HANDLERS.get(type(statement), FlowChecker._pass)(self, statement, state)
            if after is None:
                return None  # the rest is unreachable
            state = after
        return state

    def _expr_statement(self, node: ast.Expr, state: State) -> State:
        self._expr(node.value, state)
        return state

    def _assign(self, node: ast.Assign, state: State) -> State:
        self._expr(node.value, state)
        for target in node.targets:
            self._bind(target, state)
        return state

    def _aug_assign(self, node: ast.AugAssign, state: State) -> State:
        target = node.target
        if type(target) is Name:
            if target.id not in state:
                self._missing(target)
            self._expr(node.value, state)
            state.add(target.id)
        else:
            self._bind(target, state)
            self._expr(node.value, state)
        return state

    def _ann_assign(self, node: ast.AnnAssign, state: State) -> State:
        # Annotations of local variables are never evaluated.
        if node.value is not None:
            self._expr(node.value, state)
            self._bind(node.target, state)
        elif type(node.target) is not Name:
            self._bind(node.target, state)
        return state

    def _return(self, node: ast.Return, state: State) -> None:
        if node.value is not None:
            self._expr(node.value, state)
        return None

    def _raise(self, node: ast.Raise, state: State) -> None:
        if node.exc is not None:
            self._expr(node.exc, state)
        if node.cause is not None:
            self._expr(node.cause, state)
        return None

    def _assert(self, node: ast.Assert, state: State) -> State:
        self._expr(node.test, state)
        if node.msg is not None:
            self._expr(node.msg, set(state))
        return state

    def _delete(self, node: ast.Delete, state: State) -> State:
        for target in node.targets:
            if type(target) is Name:
                if target.id not in state:
                    self._missing(target)
                state.discard(target.id)
            elif isinstance(target, (Tuple, List)):
                self._delete(Delete(targets=target.elts), state)
            else:
                self._bind(target, state)
        return state

    def _pass(self, node: ast.stmt, state: State) -> State:
        return state

    def _break(self, node: ast.Break, state: State) -> None:
        if self.loops:
            self.loops[-1][0].append(state)
        return None

    def _continue(self, node: ast.Continue, state: State) -> None:
        if self.loops:
            self.loops[-1][1].append(state)
        return None

    def _if(self, node: ast.If, state: State) -> State | None:
        self._expr(node.test, state)
        taken = self._block(node.body, set(state))
        if not node.orelse:
            return meet((taken, state))
        return meet((taken, self._block(node.orelse, set(state))))

    def _loop_head(self, body: list[ast.stmt], state: State) -> State:
        # Without 'del', states only grow, so the first iteration is the worst case.
        if self.has_del:
            return state - deleted_names(body)
        return state

    def _for(self, node: ast.For | ast.AsyncFor, state: State) -> State | None:
        self._expr(node.iter, state)
        head = self._loop_head(node.body, state)
        inside = set(head)
        self._bind(node.target, inside)
        self.loops.append(([], []))
        self._block(node.body, inside)
        breaks, _ = self.loops.pop()
        after_else = self._block(node.orelse, set(head)) if node.orelse else head
        return meet([after_else, *breaks])

    def _while(self, node: ast.While, state: State) -> State | None:
        head = set(self._loop_head(node.body, state))
        self._expr(node.test, head)
        self.loops.append(([], []))
        self._block(node.body, set(head))
        breaks, _ = self.loops.pop()
        test = node.test
        endless = type(test) is Constant and bool(test.value)
        if endless:
            return meet(breaks)  # leaves only through break
        after_else = self._block(node.orelse, set(head)) if node.orelse else head
        return meet([after_else, *breaks])

    def _try(self, node: ast.Try | ast.TryStar, state: State) -> State | None:
        floor = state
        if self.has_del:
            floor = (
                state
                - deleted_names(node.body + node.orelse + node.finalbody)
                - deleted_names([statement for handler in node.handlers for statement in handler.body])
            )
        after_body = self._block(node.body, set(state))
        outcomes: list[State | None] = []
        for handler in node.handlers:
            # An exception can interrupt the body anywhere: only what held before it is certain.
            inside = set(floor)
            if handler.type is not None:
                self._expr(handler.type, inside)
            if handler.name:
                inside.add(handler.name)
            after = self._block(handler.body, inside)
            if after is not None and handler.name:
                after.discard(handler.name)  # Python deletes the name when the handler ends
            outcomes.append(after)
        if after_body is not None:
            outcomes.append(self._block(node.orelse, after_body) if node.orelse else after_body)
        normal = meet(outcomes)
        if not node.finalbody:
            return normal
        after_finally = self._block(node.finalbody, set(floor))
        if normal is None or after_finally is None:
            return None
        if normal == floor:
            return after_finally
        return self._block(node.finalbody, set(normal))

    def _with(self, node: ast.With | ast.AsyncWith, state: State) -> State | None:
        for item in node.items:
            self._expr(item.context_expr, state)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, state)
        return self._block(node.body, state)

    def _def(self, node: Definition, state: State) -> State:
        if not self.future_annotations:
            for param in all_params(node.args):
                if param.annotation is not None:
                    self._expr(param.annotation, state)
            if node.returns is not None:
                self._expr(node.returns, state)
        state.add(node.name)
        self._nested(node)
        return state

    def _class(self, node: ast.ClassDef, state: State) -> State:
        for base in node.bases:
            self._expr(base, state)
        state.add(node.name)
        for member in node.body:
            if isinstance(member, FUNCTION_TYPES):
                self._nested(member)
        return state

    def _import(self, node: ast.Import | ast.ImportFrom, state: State) -> State:
        for alias in node.names:
            state.add((alias.asname or alias.name).partition(".")[0])
        return state

    # -- expressions ----------------------------------------------------------------------

    def _bind(self, target: ast.expr, state: State) -> None:
        if isinstance(target, Name):
            state.add(target.id)
        elif isinstance(target, Attribute):
            self._expr(target.value, state)
        elif isinstance(target, (Tuple, List)):
            for element in target.elts:
                self._bind(element, state)
        elif isinstance(target, Subscript):
            self._expr(target.value, state)
            self._expr(target.slice, state)
        elif isinstance(target, Starred):
            self._bind(target.value, state)

    def _expr(self, node: ast.expr, state: State) -> None:
        """Check the reads in an expression, in field order; names and constants among the
        children are handled inline rather than by a recursive call."""
        cls = type(node)
        if cls in EXPR_BY_FIELDS:
            for field_name in EXPR_FIELDS[cls]:
                child = getattr(node, field_name)
                child_cls = type(child)
                if child_cls is list:
                    for item in child:
                        item_cls = type(item)
                        if item_cls is Name:
                            if item.id not in state:
                                self._missing(item)
                        elif item_cls is not Constant and item is not None:  # dict unpacking: None key
                            self._expr(item, state)
                elif child_cls is Name:
                    if child.id not in state:
                        self._missing(child)
                elif child_cls is not Constant and child is not None and isinstance(child, ast.expr):
                    self._expr(child, state)
        elif isinstance(node, Attribute):
            value = node.value
            while type(value) is Attribute:
                value = value.value
            if type(value) is Name:
                if value.id not in state:
                    self._missing(value)
            elif type(value) is not Constant:
                self._expr(value, state)
        elif isinstance(node, Name):
            if node.id not in state:
                self._missing(node)
        elif isinstance(node, Call):
            func = node.func
            if type(func) is Name:
                if func.id not in state:
                    self._missing(func)
            else:
                self._expr(func, state)
            for argument in node.args:
                if isinstance(argument, Name):
                    if argument.id not in state:
                        self._missing(argument)
                elif type(argument) is not Constant:
                    self._expr(argument, state)
            for keyword in node.keywords:
                value = keyword.value
                if isinstance(value, Name):
                    if value.id not in state:
                        self._missing(value)
                elif type(value) is not Constant:
                    self._expr(value, state)
        elif isinstance(node, Constant):
            pass
        elif isinstance(node, BoolOp):
            values = node.values
            self._expr(values[0], state)
            maybe = set(state)  # later operands may not run: their ':=' are not certain
            for value in values[1:]:
                self._expr(value, maybe)
        elif isinstance(node, IfExp):
            self._expr(node.test, state)
            self._expr(node.body, set(state))
            self._expr(node.orelse, set(state))
        elif isinstance(node, NamedExpr):
            self._expr(node.value, state)
            state.add(node.target.id)
        elif isinstance(node, Lambda):
            self._nested(node)
        elif isinstance(node, COMPREHENSIONS):
            self._comprehension(node, state)

    def _comprehension(self, node: Comprehension, state: State) -> None:
        generators = node.generators
        self._expr(generators[0].iter, state)  # evaluated in the enclosing scope
        inner = set(state)  # comprehension variables and conditional ':=' stay inside
        for index, generator in enumerate(generators):
            if index:
                self._expr(generator.iter, inner)
            self._bind(generator.target, inner)
            for condition in generator.ifs:
                self._expr(condition, inner)
        if isinstance(node, DictComp):
            self._expr(node.key, inner)
            self._expr(node.value, inner)
        else:
            self._expr(node.elt, inner)


# Statement class -> handler (unbound, as the scanner's; Any: the statement's class is the key).
FlowHandler = Callable[[FlowChecker, Any, State], State | None]
StatementT = TypeVar("StatementT", bound=ast.stmt)


def handles(
    statement_class: type[StatementT], handler: Callable[[FlowChecker, StatementT, State], State | None]
) -> tuple[type[ast.stmt], FlowHandler]:
    """A table entry; the type checker checks that ``handler`` takes statements of ``statement_class``."""
    return statement_class, handler


FLOW_HANDLERS: dict[type[ast.stmt], FlowHandler] = dict(
    [
        handles(Expr, FlowChecker._expr_statement),
        handles(Assign, FlowChecker._assign),
        handles(AugAssign, FlowChecker._aug_assign),
        handles(AnnAssign, FlowChecker._ann_assign),
        handles(Return, FlowChecker._return),
        handles(If, FlowChecker._if),
        handles(For, FlowChecker._for),
        handles(AsyncFor, FlowChecker._for),
        handles(While, FlowChecker._while),
        handles(Try, FlowChecker._try),
        handles(TryStar, FlowChecker._try),
        handles(With, FlowChecker._with),
        handles(AsyncWith, FlowChecker._with),
        handles(Raise, FlowChecker._raise),
        handles(Assert, FlowChecker._assert),
        handles(Delete, FlowChecker._delete),
        handles(Pass, FlowChecker._pass),
        handles(Break, FlowChecker._break),
        handles(Continue, FlowChecker._continue),
        handles(FunctionDef, FlowChecker._def),
        handles(AsyncFunctionDef, FlowChecker._def),
        handles(ClassDef, FlowChecker._class),
        handles(Import, FlowChecker._import),
        handles(ImportFrom, FlowChecker._import),
    ]
)
