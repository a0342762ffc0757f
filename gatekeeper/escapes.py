"""Steps 7 and 5, where the entity and the file's classes go: the escape analysis (the rare path).

The scan checks ``entity.<name>`` by the entity's own name. When it saw the entity used as more
than that (and more than an argument of ``self.<method>`` whose parameter has its name), or a
class of the file used as more than ``Class(...)`` / ``Class.CONSTANT``, :class:`Escapes` follows
them through the whole module; whatever may hold the entity is checked as the entity, and a use
that cannot be followed is refused. Last, stores into attributes of anything but self are refused
unless their object is the entity (:func:`check_escapes`)."""

from __future__ import annotations

import ast
from ast import (
    AnnAssign,
    Assert,
    Assign,
    AsyncFor,
    AsyncWith,
    Attribute,
    AugAssign,
    Await,
    BinOp,
    BoolOp,
    Call,
    Compare,
    Constant,
    Delete,
    Dict,
    DictComp,
    Expr,
    For,
    If,
    IfExp,
    Lambda,
    List,
    Load,
    Name,
    NamedExpr,
    Raise,
    Return,
    Set,
    Starred,
    Store,
    Subscript,
    Try,
    TryStar,
    Tuple,
    UnaryOp,
    While,
    With,
)

from gatekeeper.attributes import class_method_read
from gatekeeper.contract import Trait
from gatekeeper.entity import entity_attribute_problem
from gatekeeper.nodes import (
    COMPREHENSIONS,
    FUNCTION_TYPES,
    Definition,
    FunctionNode,
    line_of,
    positional_params,
    shown,
)
from gatekeeper.scan import Scanner
from gatekeeper.tables import (
    AST_BANNED_ATTR,
    AST_ENTITY_ATTR_FORBIDDEN,
    BUILTINS,
    CLASS_USE_HINT,
    ENTITY_USE_HINT,
    MAX_WALKS_PER_UNIT,
    STEP_BANNED,
    STEP_ENTITY,
    STORE_HINT,
)
from gatekeeper.units import FileUnits


def entity_uses_are_direct(scanner: Scanner, trait: Trait) -> bool:
    """True when every bare use of the entity is ``self.<method>(..., entity, ...)`` into a method
    defined in the trait class whose parameter has the entity's name: there the scan's check of
    ``entity.<name>`` already applies, and nothing needs following."""
    methods: dict[str, Definition] = {}
    for member in trait.node.body:
        if isinstance(member, FUNCTION_TYPES):
            methods[member.name] = member  # the last definition wins, as at runtime
    for name_node, parent, field_name, self_name in scanner.entity_uses:
        if type(parent) is not Call or field_name != "args" or self_name is None:
            return False
        func = parent.func
        if type(func) is not Attribute or type(func.value) is not Name or func.value.id != self_name:
            return False
        method = methods.get(func.attr)
        if method is None or func.attr in scanner.self_stored_attrs:
            return False
        index = 0
        for argument in parent.args:
            if argument is name_node:
                break
            if type(argument) is Starred:
                return False
            index += 1
        params = positional_params(method.args)
        if index + 1 >= len(params) or params[index + 1].arg != trait.entity_param:
            return False
    return True


def parameter_for(args: ast.arguments, index: int | None, offset: int, keyword: str | None) -> str | None:
    """The named parameter that receives positional argument ``index`` (after ``offset`` bound
    ones) or keyword argument ``keyword``; None when it is *args, **kwargs or nothing."""
    if keyword is None:
        if index is None:
            return None
        positional = positional_params(args)
        position = index + offset
        return positional[position].arg if position < len(positional) else None
    for param in args.args + args.kwonlyargs:
        if param.arg == keyword:
            return keyword
    return None


# The expressions whose value may be the entity: a name, self.<attr>, and those choosing between
# values (Escapes._is_entity; keep in step with its branches).
MAY_BE_ENTITY = frozenset({Name, Attribute, NamedExpr, IfExp, BoolOp})


class Escapes:
    """Follows the entity and the file's classes through the whole module.

    Run only when the scan saw the entity used as more than ``entity.<name>`` (and more than an
    argument of ``self.<method>`` whose parameter has its name), or a class of the file used as
    more than ``Class(...)`` / ``Class.CONSTANT``. Every function and lambda is a unit with the
    names that may hold the entity in it: the entity parameter throughout the trait class, aliases
    (assignment, unpacking, ``:=``, ``for e in (entity,)``), closure variables of enclosing units,
    parameters that receive the entity from calls the analysis resolves (functions, methods and
    classes of the file), and ``self.<attr>`` once an attribute of self is assigned the entity.
    Units are walked again while these grow. Whatever holds the entity is checked as the entity;
    a use that cannot be followed (a container, an unknown function, a return) is refused.
    """

    def __init__(self, tree: ast.Module, trait: Trait | None, scanner: Scanner) -> None:
        self.scanner = scanner
        self.entity = trait.entity_param if trait else None
        self.class_methods = scanner.class_methods
        self.module_aliases = scanner.module_aliases
        self.file = FileUnits(tree, trait.node if trait else None)
        # unit -> the names that hold the entity in it from the start (parameters and aliases found)
        self.taint: dict[FunctionNode, set[str]] = {
            unit: {self.entity} if unit in self.file.trait_units and self.entity else set()
            for unit, _, _ in self.file.units
        }
        self.envs: dict[FunctionNode, set[str]] = {}  # unit -> every name that held the entity on its last walk
        self.self_attrs: dict[str, int] = {}  # attribute of self assigned the entity -> line
        self.entity_bases: set[int] = set()  # id() of attributes whose object may be the entity
        self.queue: list[FunctionNode] = []
        self.queued: set[FunctionNode] = set()
        # The unit being walked.
        self.unit: FunctionNode | None = None
        self.env: set[str] = set()
        self.self_name: str | None = None

    # -- driver -----------------------------------------------------------------------------

    def run(self) -> None:
        for unit, _, _ in self.file.units:
            self._enqueue(unit)
        budget = MAX_WALKS_PER_UNIT * len(self.file.units) + 100
        while self.queue:
            budget -= 1
            if budget < 0:
                self.scanner.found(
                    STEP_ENTITY,
                    self.queue[0],
                    AST_ENTITY_ATTR_FORBIDDEN,
                    "The entity is passed through more functions than the gatekeeper follows",
                    "pass it through fewer functions",
                )
                return
            unit = self.queue.pop(0)
            self.queued.discard(unit)
            self._walk(unit)

    def _enqueue(self, unit: FunctionNode) -> None:
        if unit not in self.queued:
            self.queued.add(unit)
            self.queue.append(unit)

    def _walk(self, unit: FunctionNode) -> None:
        enclosing, self_name = self.file.unit_self[unit]
        env = set(self.taint[unit])
        if enclosing is not None:
            env |= self.envs.get(enclosing, set()) - self.scanner.function_locals.get(unit, set())
        before = self.envs.get(unit)
        self.envs[unit] = env
        self.unit, self.env, self.self_name = unit, env, self_name
        attrs = len(self.self_attrs)
        if isinstance(unit, Lambda):
            self._value(unit.body, "returned")
        else:
            self._block(unit.body)
        if len(self.self_attrs) != attrs:
            for other, _, _ in self.file.units:  # self.<attr> now holds the entity in every method
                self._enqueue(other)
        elif env != before:
            for child in self.file.children.get(unit, ()):
                self._enqueue(child)

    def _add_name(self, name: str) -> None:
        unit = self.unit
        assert unit is not None, "names are added while a unit is walked"
        self.env.add(name)
        taint = self.taint[unit]
        if name not in taint:
            taint.add(name)
            self._enqueue(unit)  # earlier statements (loops) and nested units see it next time

    # -- findings ---------------------------------------------------------------------------

    def _entity_escape(self, node: ast.expr, context: str) -> None:
        text = shown(node)
        holder = "" if text == self.entity else f" ({text})"
        self.scanner.found(
            STEP_ENTITY, node, AST_ENTITY_ATTR_FORBIDDEN, f"The entity{holder} is {context}", ENTITY_USE_HINT
        )

    def _class_escape(self, node: ast.Name, context: str) -> None:
        self.scanner.found(STEP_BANNED, node, AST_BANNED_ATTR, f"Class {node.id} is {context}", CLASS_USE_HINT)

    # -- what may hold the entity -----------------------------------------------------------

    def _is_entity(self, node: ast.expr) -> bool:
        if type(node) not in MAY_BE_ENTITY:
            return False
        if isinstance(node, Name):
            return node.id in self.env
        if isinstance(node, Attribute):
            value = node.value
            return node.attr in self.self_attrs and type(value) is Name and value.id == self.self_name
        if isinstance(node, NamedExpr):
            return self._is_entity(node.value)
        if isinstance(node, IfExp):
            return self._is_entity(node.body) or self._is_entity(node.orelse)
        if isinstance(node, BoolOp):
            return any(self._is_entity(value) for value in node.values)
        return False

    def _inner(self, node: ast.expr) -> None:
        """The parts of an expression that may be the entity, used where the entity may go."""
        if isinstance(node, NamedExpr):
            self._add_name(node.target.id)
            self._inner(node.value)
        elif isinstance(node, IfExp):
            self._allowed(node.test)
            self._allowed(node.body)
            self._allowed(node.orelse)
        elif isinstance(node, BoolOp):
            for value in node.values:
                self._allowed(value)

    def _allowed(self, node: ast.expr) -> None:
        """An expression where the entity and the file's classes may appear (a test, a comparison)."""
        cls = type(node)
        if cls is Name or cls is Constant:
            return
        if self._is_entity(node):
            self._inner(node)
        else:
            self._value(node, "used in an expression")

    def _object(self, node: ast.expr, context: str) -> None:
        """An expression used as an object (indexed, iterated): a class of the file may be."""
        if type(node) is Name and not self._is_entity(node):
            return
        self._value(node, context)

    # -- statements -------------------------------------------------------------------------

    def _block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self._statement(statement)

    def _statement(self, node: ast.stmt) -> None:
        if isinstance(node, Expr):
            self._allowed(node.value)
        elif isinstance(node, Assign):
            for target in node.targets:
                self._assign(target, node.value)
        elif isinstance(node, Return):
            if node.value is not None:
                self._value(node.value, "returned")
        elif isinstance(node, (If, While)):
            self._allowed(node.test)
            self._block(node.body)
            self._block(node.orelse)
        elif isinstance(node, (For, AsyncFor)):
            self._iteration(node.target, node.iter)
            self._block(node.body)
            self._block(node.orelse)
        elif isinstance(node, AnnAssign):
            if node.value is not None:
                self._assign(node.target, node.value)
            else:
                self._target(node.target)
        elif isinstance(node, AugAssign):
            target = node.target
            if type(target) is Name:
                if self._is_entity(target):
                    self._entity_escape(target, "combined with an operator")
            else:
                self._target(target)
            self._value(node.value, "combined with an operator")
        elif isinstance(node, (With, AsyncWith)):
            for item in node.items:
                self._value(item.context_expr, "used as a context manager")
                if item.optional_vars is not None:
                    self._target(item.optional_vars)
            self._block(node.body)
        elif isinstance(node, (Try, TryStar)):
            self._block(node.body)
            for handler in node.handlers:
                if handler.type is not None:
                    self._value(handler.type, "caught")
                self._block(handler.body)
            self._block(node.orelse)
            self._block(node.finalbody)
        elif isinstance(node, Raise):
            for part in (node.exc, node.cause):
                if part is not None:
                    self._value(part, "raised")
        elif isinstance(node, Assert):
            self._allowed(node.test)
            if node.msg is not None:
                self._value(node.msg, "used as an assertion message")
        elif isinstance(node, Delete):
            for target in node.targets:
                self._target(target)
        # Definitions are units of their own (their bases are plain names, their defaults
        # constants); imports, pass, break, continue move nothing; global, nonlocal and match
        # were refused at step 5.

    def _assign(self, target: ast.expr, value: ast.expr) -> None:
        if self._is_entity(value):
            if isinstance(target, Name):
                self._add_name(target.id)
            elif isinstance(target, Attribute) and type(target.value) is Name and target.value.id == self.self_name:
                if target.attr not in self.self_attrs:
                    self.self_attrs[target.attr] = line_of(target)
            else:
                self._entity_escape(value, f"stored in {shown(target)}")
                self._target(target)
            self._inner(value)
            return
        if (
            isinstance(target, (Tuple, List))
            and isinstance(value, (Tuple, List))
            and len(target.elts) == len(value.elts)
            and not any(type(node) is Starred for node in target.elts + value.elts)
        ):
            for element_target, element_value in zip(target.elts, value.elts):
                self._assign(element_target, element_value)
            return
        self._value(value, f"assigned to {shown(target)}")
        self._target(target)

    def _target(self, node: ast.expr) -> None:
        if isinstance(node, Attribute):
            self._attribute(node)
        elif isinstance(node, Subscript):
            self._object(node.value, "indexed")
            self._value(node.slice, "used as an index")
        elif isinstance(node, (Tuple, List)):
            for element in node.elts:
                self._target(element)
        elif isinstance(node, Starred):
            self._target(node.value)

    def _iteration(self, target: ast.expr, iterable: ast.expr) -> None:
        if isinstance(iterable, (Tuple, List, Set)) and any(self._is_entity(e) for e in iterable.elts):
            for element in iterable.elts:
                if self._is_entity(element):
                    if isinstance(target, Name):
                        self._add_name(target.id)
                    else:
                        self._entity_escape(element, "unpacked by a loop")
                    self._inner(element)
                else:
                    self._value(element, "iterated over")
        else:
            self._object(iterable, "iterated over")
        self._target(target)

    # -- expressions ------------------------------------------------------------------------

    def _value(self, node: ast.expr, context: str) -> None:
        """An expression whose value goes where neither the entity nor a class of the file may."""
        if self._is_entity(node):
            self._entity_escape(node, context)
            self._inner(node)
            return
        if isinstance(node, Call):
            self._call(node)
        elif isinstance(node, (Constant, Lambda)):
            pass  # a lambda is a unit of its own
        elif isinstance(node, Attribute):
            self._attribute(node)
        elif isinstance(node, Name):
            if node.id in self.class_methods and type(node.ctx) is Load:
                self._class_escape(node, context)
        elif isinstance(node, BinOp):
            self._value(node.left, "used in arithmetic")
            self._value(node.right, "used in arithmetic")
        elif isinstance(node, Compare):
            self._allowed(node.left)
            for comparator in node.comparators:
                self._allowed(comparator)
        elif isinstance(node, UnaryOp):
            if type(node.op) is ast.Not:
                self._allowed(node.operand)
            else:
                self._value(node.operand, "used in arithmetic")
        elif isinstance(node, BoolOp):
            for value in node.values:
                self._value(value, context)
        elif isinstance(node, IfExp):
            self._allowed(node.test)
            self._value(node.body, context)
            self._value(node.orelse, context)
        elif isinstance(node, NamedExpr):
            self._value(node.value, f"assigned to {node.target.id}")
        elif isinstance(node, COMPREHENSIONS):
            for generator in node.generators:
                self._iteration(generator.target, generator.iter)
                for condition in generator.ifs:
                    self._allowed(condition)
            for part in (node.key, node.value) if isinstance(node, DictComp) else (node.elt,):
                self._value(part, "collected by a comprehension")
        elif isinstance(node, (List, Tuple, Set)):
            kind = "a list" if isinstance(node, List) else "a tuple" if isinstance(node, Tuple) else "a set"
            for element in node.elts:
                self._value(element, f"put into {kind}")
        elif isinstance(node, Dict):
            for key, value in zip(node.keys, node.values):
                if key is None:
                    self._value(value, "unpacked with **")
                else:
                    self._value(key, "put into a dict")
                    self._value(value, "put into a dict")
        elif isinstance(node, Starred):
            self._value(node.value, "unpacked with *")
        elif isinstance(node, Await):
            self._value(node.value, "awaited")
        elif isinstance(node, Subscript):
            self._object(node.value, "indexed")
            self._value(node.slice, "used as an index")
        else:  # f-strings, slices, ...
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self._value(
                        child, "formatted into a string" if type(node) is ast.JoinedStr else "used in an expression"
                    )

    def _attribute(self, node: ast.Attribute) -> None:
        value, attr = node.value, node.attr
        if self._is_entity(value):
            self.entity_bases.add(id(node))
            by_name = type(value) is Name and value.id == self.entity
            problem = entity_attribute_problem(shown(value), attr, type(node.ctx), None if by_name else self.entity)
            if problem is not None:
                self.scanner.found(STEP_ENTITY, node, AST_ENTITY_ATTR_FORBIDDEN, *problem)
            self._inner(value)
            return
        if attr in self.self_attrs and not (type(value) is Name and value.id == self.self_name):
            self.scanner.found(
                STEP_ENTITY,
                node,
                AST_ENTITY_ATTR_FORBIDDEN,
                f"{shown(node)} may hold the entity",
                f"self.{attr} is assigned the entity (line {self.self_attrs[attr]}); read it as self.{attr} "
                "in the methods of its class only",
            )
        if type(value) is Name:
            if value.id in self.class_methods and attr in self.class_methods[value.id]:
                self.scanner.found(STEP_BANNED, node, AST_BANNED_ATTR, *class_method_read(value.id, attr))
            return
        self._value(value, "used in an expression")

    def _call(self, node: ast.Call) -> None:
        func = node.func
        callee = f"{shown(func)}()"
        if self._is_entity(func):
            self._entity_escape(func, "called")
            self._inner(func)
        elif isinstance(func, Attribute):
            self._attribute(func)
        elif not isinstance(func, (Name, Lambda)):
            self._value(func, "called")
        # Builtins and module functions may receive a class (list(Mode), isinstance(x, Helper)):
        # they cannot reach its methods by name.
        trusted = (isinstance(func, Name) and func.id in BUILTINS and func.id not in self.file.shadowed) or (
            isinstance(func, Attribute) and type(func.value) is Name and func.value.id in self.module_aliases
        )
        index: int | None = 0
        for argument in node.args:
            if type(argument) is Starred:
                index = None  # later positions are unknown
                self._value(argument.value, f"unpacked into a call of {callee}")
                continue
            self._argument(node, argument, index, None, callee, trusted)
            if index is not None:
                index += 1
        for keyword in node.keywords:
            if keyword.arg is None:
                self._value(keyword.value, f"unpacked with ** into a call of {callee}")
            else:
                self._argument(node, keyword.value, None, keyword.arg, callee, trusted)

    def _argument(
        self, call: ast.Call, argument: ast.expr, index: int | None, keyword: str | None, callee: str, trusted: bool
    ) -> None:
        if self._is_entity(argument):
            func = call.func
            targets = self.file.callees(func, self.self_name, self.scanner.self_stored_attrs)
            undefined = type(func) is Name and func.id not in self.file.shadowed and func.id not in BUILTINS
            if targets is None and not undefined:  # an undefined function is step 9's finding
                self._entity_escape(argument, f"passed to {callee}, which the gatekeeper cannot follow")
            for function, offset in targets or ():
                param = parameter_for(function.args, index, offset, keyword)
                if param is None:
                    self._entity_escape(argument, f"passed to {callee} where no named parameter receives it")
                elif param not in self.taint[function]:
                    self.taint[function].add(param)
                    self._enqueue(function)
            self._inner(argument)
        elif isinstance(argument, Name):
            if argument.id in self.class_methods and not trusted:
                self._class_escape(argument, f"passed to {callee}")
        else:
            self._value(argument, f"passed to {callee}")


def check_escapes(tree: ast.Module, trait: Trait | None, scanner: Scanner) -> None:
    """The escape analysis when the scan calls for it, then the verdict on stores into attributes
    of objects other than self: refused unless the object is the entity. Without a trait class
    step 6 rejects the code anyway, with the more useful message."""
    entity_bases: set[int] = set()
    if scanner.needs_escape_analysis or (
        trait is not None and scanner.entity_uses and not entity_uses_are_direct(scanner, trait)
    ):
        escapes = Escapes(tree, trait, scanner)
        escapes.run()
        entity_bases = escapes.entity_bases
    for node in scanner.pending_stores if trait is not None else ():
        if id(node) not in entity_bases:
            verb = "assign" if type(node.ctx) is Store else "delete"
            scanner.found(
                STEP_BANNED,
                node,
                AST_BANNED_ATTR,
                f"Cannot {verb} the attribute {node.attr} of {shown(node.value)}",
                STORE_HINT,
            )
