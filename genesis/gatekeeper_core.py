"""AST gatekeeper: steps 2-10 of the mutation validation pipeline (open-mutation-api seed).

The implementation behind ``genesis.gatekeeper``.

Pure and fast: no I/O, never executes the submitted code. ``validate`` parses once, then makes
one pass over the tree (``_Scanner``) that gathers the facts for steps 3-5, 7 and 10 and the
normalised code hash, and one flow-sensitive pass over function bodies for step 9
(``_FlowChecker``). Steps are reported in pipeline order and validation stops at the first
failing step.

The gatekeeper is a first line only: submitted code runs in the sandbox container, which is
the boundary (DESIGN.md, "Untrusted code never runs in a trusted process"). The hardening here
rejects the published AST-filter bypass families (NOTES.md, "Running untrusted Python").

Every check acts on identifiers as the parser returns them, which is NFKC-normalised
(PEP 3131): ``ｅｖａｌ`` arrives as ``eval`` and ``__ｇlobals__`` as ``__globals__``, exactly the
names the interpreter would resolve.
"""

from __future__ import annotations

import __future__ as future_module
import ast
import difflib
import gc
import hashlib
import importlib
import re
import threading
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from genesis import entity_api, rules
from genesis.dto import FailureCode

__all__ = ["GateResult", "schema_problems", "validate"]

# Step names as they appear in the validation log.
STEP_SCHEMA = "Schema"
STEP_PARSE = "AST parse"
STEP_IMPORTS = "Import whitelist"
STEP_BANNED = "Banned calls/attrs"
STEP_CONTRACT = "Trait contract"
STEP_ENTITY = "Entity attribute whitelist"
STEP_INIT = "Init signature"
STEP_UNBOUND = "Unbound variables"
STEP_AWAIT = "Await-on-sync"

# The failure codes are defined once, in genesis.dto.FailureCode; plain strings here for speed.
SCHEMA_INVALID = FailureCode.SCHEMA_INVALID.value
SYNTAX_ERROR = FailureCode.SYNTAX_ERROR.value
AST_IMPORT_FORBIDDEN = FailureCode.AST_IMPORT_FORBIDDEN.value
AST_BANNED_CALL = FailureCode.AST_BANNED_CALL.value
AST_BANNED_ATTR = FailureCode.AST_BANNED_ATTR.value
AST_NO_TRAIT_CLASS = FailureCode.AST_NO_TRAIT_CLASS.value
AST_ENTITY_ATTR_FORBIDDEN = FailureCode.AST_ENTITY_ATTR_FORBIDDEN.value
AST_INIT_REQUIRED_ARGS = FailureCode.AST_INIT_REQUIRED_ARGS.value
AST_UNBOUND_VARIABLE = FailureCode.AST_UNBOUND_VARIABLE.value
AST_AWAIT_ON_SYNC = FailureCode.AST_AWAIT_ON_SYNC.value


@dataclass(frozen=True)
class GateResult:
    ok: bool
    failure_code: str | None  # None when ok
    validation_log: list[str]  # one line per step that ran
    class_name: str | None  # the trait class (once step 6 passed)
    code_hash: str | None  # sha256 of the normalised AST (comments/formatting ignored)


_TRAIT_NAME_RE = re.compile(rules.TRAIT_NAME_PATTERN)
_ALLOWED_MODULES = frozenset(rules.ALLOWED_IMPORTS)
_ALLOWED_MODULES_TEXT = ", ".join(sorted(_ALLOWED_MODULES))
_FUTURE_FEATURES = frozenset(future_module.all_feature_names)
_ENTITY_NAMES = entity_api.allowed_entity_names()
_ENTITY_WRITABLE = frozenset(entity_api.WRITABLE_ATTRS)
_WRITABLE_TEXT = ", ".join(sorted(_ENTITY_WRITABLE))
_BANNED_CALLS = rules.BANNED_CALLS
_BANNED_EXCEPTIONS = rules.BANNED_EXCEPTION_NAMES
_BANNED_ATTRS = rules.BANNED_ATTRS
_BUILTINS = rules.ALLOWED_BUILTINS
_TRAIT_BASES = frozenset(rules.TRAIT_BASE_NAMES)

_NAME_HINTS = {
    "eval": "code must be static", "exec": "code must be static", "compile": "code must be static",
    "print": "traits have no console; expose a label through entity.state instead",
    "open": "traits have no file system",
    "__import__": "use a plain import of an allowed module",
    "getattr": "access attributes directly (obj.name)",
    "setattr": "assign attributes directly (obj.name = value)",
    "hasattr": "access attributes directly (obj.name)",
    "delattr": "attributes cannot be deleted by name",
    "type": "use isinstance()",
    "super": "the BaseTrait stub has nothing to initialise; drop the super() call",
    "classmethod": "use plain methods", "staticmethod": "use plain methods",
    "property": "use plain methods",
    "globals": "introspection is not available", "locals": "introspection is not available",
    "vars": "introspection is not available", "dir": "introspection is not available",
}
_DEFAULT_NAME_HINT = "it is a banned builtin; if this is your own variable, choose another name"
_FRAME_HINT = "frame, generator, coroutine and code introspection is not available"
_ATTR_HINTS = {
    "format": "use an f-string instead of str.format",
    "format_map": "use an f-string instead of str.format_map",
    "obj": "exception objects may not hand out other objects",
    "mro": "class introspection is not available",
}


def _line(node: ast.AST) -> int:
    return getattr(node, "lineno", 0)


# ---------------------------------------------------------------------------------------------
# Step 2: schema
# ---------------------------------------------------------------------------------------------


def schema_problems(trait_name: object, code: object) -> list[str]:
    """Step 2: what is wrong with the request fields, as messages a person can act on."""
    problems: list[str] = []
    if not isinstance(trait_name, str):
        problems.append(f"trait_name must be a string, got {type(trait_name).__name__}")
    elif _TRAIT_NAME_RE.fullmatch(trait_name) is None:
        problems.append(
            f"trait_name {trait_name!r} must be snake_case: lowercase letters, digits and "
            "underscores, starting with a letter (max 64 chars)"
        )
    if not isinstance(code, str):
        problems.append(f"code must be a string, got {type(code).__name__}")
        return problems
    if not code:
        problems.append("code is empty; submit the Python source of a trait class")
        return problems
    if code.isspace():
        problems.append("code contains only whitespace; submit the Python source of a trait class")
        return problems
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError as error:
        problems.append(f"code is not valid UTF-8 text (character {error.start} is a lone surrogate)")
        return problems
    if size > rules.MAX_CODE_BYTES:
        problems.append(f"code is {size:,} bytes; the limit is {rules.MAX_CODE_BYTES:,}")
    nul = code.find("\0")
    if nul >= 0:
        problems.append(f"code contains a NUL byte on line {code.count(chr(10), 0, nul) + 1}; remove it")
    return problems


# ---------------------------------------------------------------------------------------------
# Allowed modules: which of their names a trait may use (computed once from the real modules)
# ---------------------------------------------------------------------------------------------


@cache
def _module_public_names(module: str) -> frozenset[str]:
    """Public, non-module, non-denied attributes of an allowed module."""
    if module == "__future__":
        return _FUTURE_FEATURES
    loaded = importlib.import_module(module)  # trusted stdlib, in the allow-list
    denied = rules.MODULE_ATTR_DENYLIST.get(module, {})
    return frozenset(
        name
        for name in dir(loaded)
        if not name.startswith("_")
        and name not in denied
        and not isinstance(getattr(loaded, name), types.ModuleType)
    )


def _module_name_problem(module: str, name: str) -> str | None:
    """Why ``module.name`` (or ``from module import name``) is refused, or None."""
    if name in _module_public_names(module):
        return None
    if name.startswith("_"):
        return f"'{module}.{name}' is private"
    denied = rules.MODULE_ATTR_DENYLIST.get(module, {})
    if name in denied:
        return f"'{module}.{name}' is not allowed: it {denied[name]}"
    if module == "__future__":
        return f"'{name}' is not a __future__ feature; use 'from __future__ import annotations'"
    value = getattr(importlib.import_module(module), name, None)
    if isinstance(value, types.ModuleType):
        return f"'{module}.{name}' is a module; only modules in the allow-list may be used"
    return f"module '{module}' has no public name '{name}'"


for _module in rules.ALLOWED_IMPORTS:  # warm the cache so the first validation is fast too
    _module_public_names(_module)


# ---------------------------------------------------------------------------------------------
# Small AST predicates
# ---------------------------------------------------------------------------------------------

# The node classes the checks compare with, as module globals (C globals in the compiled build,
# see the .pxd): ``ast.Name`` would be a global plus a module attribute lookup on every use.
from ast import (  # noqa: E402
    AST as _AST, AnnAssign as _AnnAssign, Assert as _Assert, Assign as _Assign, AsyncFor as _AsyncFor,
    AsyncFunctionDef as _AsyncFunctionDef, AsyncWith as _AsyncWith, Attribute as _Attribute,
    AugAssign as _AugAssign, Await as _Await, BinOp as _BinOp, BitOr as _BitOr, BoolOp as _BoolOp,
    Break as _Break, Call as _Call, ClassDef as _ClassDef, Compare as _Compare, Constant as _Constant,
    Continue as _Continue, Del as _Del, Delete as _Delete, Dict as _Dict, DictComp as _DictComp,
    ExceptHandler as _ExceptHandler, Expr as _Expr, For as _For, FunctionDef as _FunctionDef,
    GeneratorExp as _GeneratorExp, Global as _Global, If as _If, IfExp as _IfExp,
    Import as _Import, ImportFrom as _ImportFrom, Lambda as _Lambda, List as _List,
    ListComp as _ListComp, Load as _Load, Match as _Match, Module as _Module, Name as _Name,
    NamedExpr as _NamedExpr, Nonlocal as _Nonlocal, Pass as _Pass, Raise as _Raise,
    Return as _Return, Set as _Set, SetComp as _SetComp, Starred as _Starred, Store as _Store,
    Subscript as _Subscript, Try as _Try, TryStar as _TryStar, Tuple as _Tuple, UAdd as _UAdd,
    USub as _USub, UnaryOp as _UnaryOp, While as _While, With as _With, Yield as _Yield,
    YieldFrom as _YieldFrom,
)

_NUMBER_TYPES = (int, float, complex)

# The deepest nesting of the tree the analysis follows; deeper code is a SYNTAX_ERROR. The
# compiled module recurses on the C stack, where Python's recursion limit does not protect it
# (a raised sys.setrecursionlimit lets ast.parse build far deeper trees), so every recursive
# walk counts its depth against this bound; real traits nest a few dozen levels.
MAX_NESTING = 400


class _TooDeep(Exception):
    """The tree nests deeper than MAX_NESTING."""


def _is_constant(node: ast.AST, depth: int = 0) -> bool:
    """A literal, a tuple/list/set/dict of literals, or a signed number."""
    cls = type(node)
    if cls is _Constant:
        return True
    if depth > MAX_NESTING:
        raise _TooDeep
    depth += 1
    if cls is _Tuple or cls is _List or cls is _Set:
        return all(_is_constant(element, depth) for element in node.elts)
    if cls is _Dict:
        return all(key is not None and _is_constant(key, depth) for key in node.keys) and all(
            _is_constant(value, depth) for value in node.values
        )
    if cls is _UnaryOp and type(node.op) in (_USub, _UAdd):
        operand = node.operand
        return type(operand) is _Constant and isinstance(operand.value, _NUMBER_TYPES)
    return False


def _describe_statement(node: ast.stmt) -> str:
    cls = type(node)
    if cls is _Expr and type(node.value) is _Call:
        func = node.value.func
        name = func.id if type(func) is _Name else getattr(func, "attr", "...")
        return f"a call to {name}()"
    if cls in (_Assign, _AnnAssign, _AugAssign):
        targets = node.targets if cls is _Assign else [node.target]
        odd = [target for target in targets if type(target) is not _Name]
        if odd or cls is _AugAssign:
            target = ast.unparse(odd[0] if odd else node.target)
            return f"an assignment to {target} (only plain names may be assigned here)"
        return f"an assignment of a computed value to {targets[0].id} (only literals may be assigned here)"
    names = {
        _For: "a for loop", _AsyncFor: "an async for loop", _While: "a while loop",
        _If: "an if statement", _Try: "a try statement", _With: "a with statement",
        _AsyncWith: "an async with statement", _Expr: "an expression statement",
        _Return: "a return statement", _Delete: "a del statement", _Raise: "a raise statement",
        _Assert: "an assert statement", _ClassDef: "a nested class",
    }
    return names.get(cls, f"a {cls.__name__} statement")


def _root_name(node: ast.AST) -> ast.Name | None:
    """The Name at the root of ``a.b[c](d).e``, if any."""
    while True:
        cls = type(node)
        if cls is _Name:
            return node
        if cls is _Attribute or cls is _Subscript:
            node = node.value
        elif cls is _Call:
            node = node.func
        else:
            return None


def _positional_params(args: ast.arguments) -> list[ast.arg]:
    return args.posonlyargs + args.args


def _all_params(args: ast.arguments) -> list[ast.arg]:
    params = args.posonlyargs + args.args + args.kwonlyargs
    if args.vararg is not None:
        params.append(args.vararg)
    if args.kwarg is not None:
        params.append(args.kwarg)
    return params


# ---------------------------------------------------------------------------------------------
# Step 6: the trait class (found before the scan because steps 7 and 10 depend on it)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Trait:
    node: ast.ClassDef
    entity_param: str


def _class_where(statement: ast.ClassDef) -> str:
    return f"class {statement.name} (line {statement.lineno})"


def _find_trait(tree: ast.Module) -> tuple[_Trait | None, str]:
    """The first top-level class that qualifies, or None and why nothing did."""
    reasons: list[str] = []
    for statement in tree.body:
        if type(statement) is not _ClassDef:
            continue
        if not any(type(base) is _Name and base.id in _TRAIT_BASES for base in statement.bases):
            continue
        execute = None
        for member in statement.body:
            if type(member) in (_FunctionDef, _AsyncFunctionDef) and member.name == "execute":
                execute = member  # the last definition wins, as at runtime
        if execute is None:
            reasons.append(f"{_class_where(statement)} has no 'async def execute(self, entity) -> None'")
            continue
        if type(execute) is not _AsyncFunctionDef:
            reasons.append(
                f"{_class_where(statement)}: execute must be 'async def', not 'def' (line {execute.lineno})"
            )
            continue
        positional = _positional_params(execute.args)
        required_kwonly = [
            arg.arg for arg, default in zip(execute.args.kwonlyargs, execute.args.kw_defaults) if default is None
        ]
        if len(positional) != 2 or required_kwonly:
            reasons.append(
                f"{_class_where(statement)}: execute must take exactly (self, entity) (line {execute.lineno})"
            )
            continue
        return _Trait(statement, positional[1].arg), ""
    if reasons:
        return None, "; ".join(reasons)
    return None, (
        "No trait class found: define the stub 'class BaseTrait: pass' in the file and a class "
        "inheriting from it with 'async def execute(self, entity) -> None'"
    )


def _init_problem(tree: ast.Module, trait: ast.ClassDef) -> str | None:
    """Step 8: the __init__ the trait is created with must need no arguments."""
    classes = {node.name: node for node in tree.body if type(node) is _ClassDef}
    pending, seen = [trait], set()
    while pending:  # depth-first over bases defined in the file, like a simple MRO
        cls = pending.pop(0)
        if cls.name in seen:
            continue
        seen.add(cls.name)
        init = None
        for member in cls.body:
            if type(member) in (_FunctionDef, _AsyncFunctionDef) and member.name == "__init__":
                init = member
        if init is None:
            pending.extend(classes[b.id] for b in cls.bases if type(b) is _Name and b.id in classes)
            continue
        where = f"{cls.name}.__init__ (line {init.lineno})"
        if type(init) is _AsyncFunctionDef:
            return f"{where} must be a plain 'def', not 'async def'"
        args = init.args
        positional = _positional_params(args)
        if not positional and args.vararg is None:
            return f"{where} must accept self"
        without_default = positional[1 : len(positional) - len(args.defaults)]
        required = [arg.arg for arg in without_default]
        required += [arg.arg for arg, default in zip(args.kwonlyargs, args.kw_defaults) if default is None]
        if required:
            names = ", ".join(repr(name) for name in required)
            return (
                f"{where} requires {names}; traits are created without arguments, so give every "
                f"parameter a default (e.g. {required[0]}=25)"
            )
        return None
    return None


# ---------------------------------------------------------------------------------------------
# The single scan: steps 3 (compile-time errors), 4, 5, 7, 10, scopes for step 9, and the hash
# ---------------------------------------------------------------------------------------------

_SKIPPED_FIELDS = frozenset({"ctx", "type_comment", "kind"})


def _ast_classes() -> list[type]:
    """Every node class the parser can produce (all subclasses of ast.AST)."""
    found: list[type] = []
    pending = [ast.AST]
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                pending.append(sub)
    return found


def _field_table(skipped: frozenset[str]) -> dict[type, tuple[str, ...]]:
    """Node class -> the names of its fields not in ``skipped``, in field order.

    The walks read them one by one with getattr: in the compiled build that is a plain C call,
    while an operator.attrgetter (no vectorcall on Python 3.11) costs an argument tuple per node
    and a result tuple."""
    return {cls: tuple(f for f in cls._fields if f not in skipped) for cls in _ast_classes()}


# The scanned (hashed) fields of every node class.
_FIELDS = _field_table(_SKIPPED_FIELDS)
# The token of every node class (a dict lookup is cheaper than reading a type's __name__).
_NODE_NAMES: dict[type, str] = {cls: cls.__name__ for cls in _ast_classes()}


_Finding = tuple[int, str, str]  # (line, failure code, message)

# Operator nodes have no fields: emitted by name without a visit.
_OPERATOR_TYPES = frozenset(
    cls
    for base in (ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
    for cls in base.__subclasses__()
)
_OPERATOR_NAMES: dict[type, str] = {cls: cls.__name__ for cls in _OPERATOR_TYPES}
_SUSPECT_NAMES = _BANNED_CALLS | _BANNED_EXCEPTIONS
_DUNDER_RE = re.compile(r"__\w+__")

_COMPREHENSION_TYPES = (_ListComp, _SetComp, _GeneratorExp, _DictComp)


class _Scanner:
    """One pre-order pass: records the first finding of each step and the normalised hash.

    The hash is sha256 over a canonical token stream of the tree (node types, identifiers,
    constant reprs and list brackets; no positions), so comments, blank lines, formatting and
    parentheses do not change it, while any change of logic does.
    """

    def __init__(
        self, trait: _Trait | None, module_aliases: dict[str, str], class_methods: dict[str, frozenset[str]]
    ) -> None:
        self.tokens: list[str] = []
        self.findings: dict[str, _Finding] = {}
        self.trait_node = trait.node if trait else None
        self.entity = trait.entity_param if trait else None
        self.in_trait = False
        self.module_aliases = module_aliases  # bound name -> allowed module
        # Names whose every appearance takes the slow path (_watched_name): banned names, modules,
        # the entity parameter and the classes defined in the file.
        self.watched: set[str] = set(_SUSPECT_NAMES) | set(module_aliases) | set(class_methods)
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

    # -- infrastructure ----------------------------------------------------------------------

    def found(self, step: str, node: ast.AST | int, code: str, problem: str, hint: str = "") -> None:
        """Record a finding as 'problem (line N); hint', keeping the earliest per step."""
        line = node if isinstance(node, int) else _line(node)
        current = self.findings.get(step)
        if current is None or line < current[0]:
            self.findings[step] = (line, code, f"{problem} (line {line})" + (f"; {hint}" if hint else ""))

    def digest(self) -> str:
        return hashlib.sha256("\0".join(self.tokens).encode("utf-8", "surrogatepass")).hexdigest()

    def visit(self, node: ast.AST) -> None:
        cls = type(node)
        self.tokens.append(_NODE_NAMES[cls])
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeep
        handler = _DISPATCH[cls]
        if handler is _GENERIC:
            self.generic(node)  # a direct C call in the compiled build
        else:
            handler(self, node)
        self.depth -= 1

    def generic(self, node: ast.AST) -> None:
        """Emit/visit every field of a node: the hot path of every validation.

        Children are dispatched directly (no visit() frame), and names, constants and
        operators, about half of all nodes, are handled inline. Tokens that always follow each
        other are emitted pre-joined with the separator: the digest only sees the joined text."""
        tokens = self.tokens
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeep
        for field_name in _FIELDS[type(node)]:
            value = getattr(node, field_name)
            value_cls = type(value)
            if value_cls is list:
                if not value:
                    tokens.append("[\0]")
                    continue
                tokens.append("[")
                for item in value:
                    item_cls = type(item)
                    if item_cls is _Name:
                        name = item.id
                        tokens.append("Name\0" + name)
                        ctx = type(item.ctx)
                        if name in self.watched or name[0] == "_":
                            self._watched_name(item, name, node, field_name)
                        elif ctx is _Store:
                            if name == self.self_name:
                                self.bind(name, item)
                            else:
                                self.scope.add(name)  # what bind() does for an unremarkable name
                        elif ctx is not _Load:
                            self._name_checks(item, name)
                    elif item_cls is _Constant:
                        constant = item.value
                        tokens.append("Constant\0" + repr(constant))
                        if type(constant) is str and constant[:2] == "__":
                            self._dunder_string(item)
                    elif item_cls in _OPERATOR_NAMES:
                        tokens.append(_OPERATOR_NAMES[item_cls])
                    elif item is None:
                        tokens.append("~")  # kw_defaults without a default, dict unpacking
                    elif item_cls is str:
                        tokens.append(item)  # identifiers, e.g. Global.names
                    else:
                        tokens.append(_NODE_NAMES[item_cls])
                        handler = _DISPATCH[item_cls]
                        if handler is _GENERIC:
                            self.generic(item)  # direct C calls in the compiled build
                        elif item_cls is _Attribute:
                            self._attribute(item)
                        elif item_cls is _Call:
                            self._call(item)
                        else:
                            handler(self, item)
                tokens.append("]")
            elif value_cls is _Name:
                name = value.id
                tokens.append("Name\0" + name)
                ctx = type(value.ctx)
                if name in self.watched or name[0] == "_":
                    self._watched_name(value, name, node, field_name)
                elif ctx is _Store:
                    if name == self.self_name:
                        self.bind(name, value)
                    else:
                        self.scope.add(name)  # what bind() does for an unremarkable name
                elif ctx is not _Load:
                    self._name_checks(value, name)
            elif value_cls is _Constant:
                constant = value.value
                tokens.append("Constant\0" + repr(constant))
                if type(constant) is str and constant[:2] == "__":
                    self._dunder_string(value)
            elif value is None:
                tokens.append("~")
            elif value_cls is str:
                tokens.append(value)
            elif value_cls in _OPERATOR_NAMES:
                tokens.append(_OPERATOR_NAMES[value_cls])
            elif isinstance(value, _AST):
                tokens.append(_NODE_NAMES[value_cls])
                handler = _DISPATCH[value_cls]
                if handler is _GENERIC:
                    self.generic(value)
                elif value_cls is _Attribute:
                    self._attribute(value)
                elif value_cls is _Call:
                    self._call(value)
                else:
                    handler(self, value)
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
        elif isinstance(value, _AST):
            self.visit(value)
        else:
            self.tokens.append(value if type(value) is str else repr(value))

    def bind(self, name: str, node: ast.AST) -> None:
        """A name bound by an assignment, def, class, import, parameter or except clause."""
        self.scope.add(name)
        if name == self.self_name and type(node) is not ast.arg:  # a parameter shadows it instead
            self.found(
                STEP_BANNED, node, AST_BANNED_ATTR,
                f"The instance parameter '{name}' cannot be rebound",
                "stores into its attributes are allowed because it is the instance; use another name",
            )
        if name in _SUSPECT_NAMES or name[0] == "_":
            problem = _name_problem(name)
            if problem is not None:
                code, text, hint = problem
                if name in _SUSPECT_NAMES:
                    hint = "banned builtin names cannot be reused; choose another name"
                self.found(STEP_BANNED, node, code, text, hint)
        if name in self.module_aliases:
            self.found(
                STEP_BANNED, node, AST_BANNED_ATTR,
                f"Name '{name}' is an imported module and cannot be rebound", "choose another name",
            )

    # -- module and statements ----------------------------------------------------------------

    def _module(self, node: ast.Module) -> None:
        body = node.body
        future_allowed = True
        for index, statement in enumerate(body):
            cls = type(statement)
            is_docstring = cls is _Expr and type(statement.value) is _Constant and isinstance(
                statement.value.value, str
            )
            if cls is _ImportFrom and statement.module == "__future__" and statement.level == 0:
                if not future_allowed:
                    self.found(
                        STEP_PARSE, statement, SYNTAX_ERROR,
                        "from __future__ imports must occur at the beginning of the file",
                    )
            elif not (is_docstring and index == 0):
                future_allowed = False
        self.field(body)
        # After the body, so a more specific finding on the same line (e.g. eval) wins.
        for statement in body:
            if not _module_statement_ok(statement):
                self.found(
                    STEP_BANNED, statement, AST_BANNED_CALL,
                    f"Module-level code is not allowed: {_describe_statement(statement)}",
                    "the module may only hold imports, classes, functions and constant "
                    "assignments; move the code into a method",
                )

    def _import(self, node: ast.Import) -> None:
        for alias in node.names:
            full = alias.name
            top = full.partition(".")[0]
            if top not in _ALLOWED_MODULES:
                self.found(
                    STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN,
                    f"Forbidden import: {full}", f"allowed modules: {_ALLOWED_MODULES_TEXT}",
                )
            elif full != top:
                self.found(
                    STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN,
                    f"Forbidden import: {full}", f"submodules are not allowed; import {top} itself",
                )
            elif full == "__future__":
                self.found(
                    STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN,
                    "Forbidden import: __future__", "write 'from __future__ import annotations'",
                )
            bound = alias.asname or top
            if top in _ALLOWED_MODULES and full == top:
                self.module_aliases[bound] = top
                self.watched.add(bound)
            self.scope.add(bound)
            problem = _name_problem(bound)
            if problem is not None:
                self.found(STEP_BANNED, alias, *problem)
        self.generic(node)

    def _import_from(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        names = ", ".join(alias.name for alias in node.names)
        top = module.partition(".")[0]
        if node.level:
            self.found(
                STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN,
                f"Forbidden import: relative import 'from {'.' * node.level}{module} import {names}'",
                f"allowed modules: {_ALLOWED_MODULES_TEXT}",
            )
        elif top not in _ALLOWED_MODULES:
            self.found(
                STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN,
                f"Forbidden import: {module}", f"allowed modules: {_ALLOWED_MODULES_TEXT}",
            )
        elif module != top:
            self.found(
                STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN,
                f"Forbidden import: {module}", f"submodules are not allowed; import from {top}",
            )
        else:
            for alias in node.names:
                name = alias.name
                if name == "*":
                    self.found(
                        STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN,
                        f"Forbidden import: 'from {module} import *'", "import the names you use",
                    )
                    continue
                problem = _module_name_problem(module, name)
                if problem is not None:
                    self.found(STEP_IMPORTS, node, AST_IMPORT_FORBIDDEN, f"Forbidden import: {problem}")
        if module != "__future__":
            for alias in node.names:
                if alias.name != "*":
                    bound = alias.asname or alias.name
                    self.imported_names.add(bound)
                    self.bind(bound, alias)
        self.generic(node)

    def _ann_assign(self, node: ast.AnnAssign) -> None:
        self._check_annotation(node.annotation)
        self.generic(node)

    def _global(self, node: ast.Global | ast.Nonlocal) -> None:
        keyword = "global" if type(node) is _Global else "nonlocal"
        self.found(
            STEP_BANNED, node, AST_BANNED_CALL,
            f"'{keyword}' is not allowed", "keep state on self instead",
        )
        self.generic(node)

    def _match(self, node: ast.Match) -> None:
        self.found(
            STEP_BANNED, node, AST_BANNED_CALL,
            "'match' statements are not allowed",
            "class patterns read attributes named in strings; use if/elif",
        )
        self.generic(node)

    def _yield(self, node: ast.Yield | ast.YieldFrom) -> None:
        keyword = "yield" if type(node) is _Yield else "yield from"
        self.found(
            STEP_BANNED, node, AST_BANNED_CALL,
            f"'{keyword}' is not allowed", "generators expose their frames; build and return a list",
        )
        self.generic(node)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        if type(node) is _While:
            self.field(node.test)
        else:
            self.field(node.target)
            self.field(node.iter)
        self.loop_depth += 1
        self.field(node.body)
        self.loop_depth -= 1
        self.field(node.orelse)  # break/continue in 'else' belong to an outer loop

    def _break_continue(self, node: ast.Break | ast.Continue) -> None:
        if self.loop_depth == 0:
            keyword = "break" if type(node) is _Break else "continue"
            self.found(STEP_PARSE, node, SYNTAX_ERROR, f"'{keyword}' outside loop")

    def _return(self, node: ast.Return) -> None:
        if not self.in_function:
            self.found(STEP_PARSE, node, SYNTAX_ERROR, "'return' outside function")
        self.generic(node)

    def _except_handler(self, node: ast.ExceptHandler) -> None:
        caught = node.type
        if caught is None:
            self.found(
                STEP_BANNED, node, AST_BANNED_CALL,
                "Bare 'except:' is not allowed",
                "it would swallow the sandbox's deadline signal; catch Exception or a specific error",
            )
        else:
            for item in caught.elts if type(caught) is _Tuple else (caught,):
                if type(item) is _Name and item.id in _BANNED_EXCEPTIONS:
                    self.found(
                        STEP_BANNED, node, AST_BANNED_CALL,
                        f"Catching {item.id} is not allowed",
                        "it would swallow the sandbox's deadline signal; catch Exception or a specific error",
                    )
        if node.name:
            self.bind(node.name, node)
        self.generic(node)

    # -- definitions ----------------------------------------------------------------------

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = node.name
        if name.startswith("__") and name.endswith("__") and name != "__init__":
            self.found(
                STEP_BANNED, node, AST_BANNED_CALL,
                f"Special method '{name}' is not allowed",
                "special methods run implicitly; only __init__ may be defined",
            )
        elif name != "__init__":
            problem = _name_problem(name)
            if problem is not None:
                self.found(STEP_BANNED, node, *problem)
        if name in self.module_aliases:
            self.found(
                STEP_BANNED, node, AST_BANNED_ATTR,
                f"Name '{name}' is an imported module and cannot be rebound", "choose another name",
            )
        self.scope.add(name)
        if node.decorator_list:
            self.found(
                STEP_BANNED, node.decorator_list[0], AST_BANNED_CALL,
                f"Decorators are not allowed (on {name})",
                "they run code at definition time; call helpers explicitly instead",
            )
        self._check_signature(node.args, name)
        if node.returns is not None:
            self._check_annotation(node.returns)
        self.tokens.append(name)
        self._enter_function(node, type(node) is _AsyncFunctionDef, (node.args, node.body))
        self.field(node.decorator_list)
        self.field(node.returns)

    def _lambda(self, node: ast.Lambda) -> None:
        self._check_signature(node.args, "lambda")
        body = node.body
        if type(body) is _Name and body.id in self.class_methods:
            self.needs_escape_analysis = True  # returns a class of the file
        self._enter_function(node, False, (node.args, node.body))

    def _enter_function(self, node: ast.AST, is_async: bool, fields: Iterable[object]) -> None:
        saved = (
            self.scope, self.function_scope, self.function_node,
            self.in_function, self.async_ok, self.loop_depth, self.self_name, self.method_context,
        )
        self.scope = self.function_scope = self.function_locals[node] = set()
        self.function_node = node
        self.in_function, self.async_ok, self.loop_depth = True, is_async, 0
        self.self_name = _instance_parameter(node.args, self.self_name, self.method_context)
        self.method_context = False
        for value in fields:
            self.field(value)
        (
            self.scope, self.function_scope, self.function_node,
            self.in_function, self.async_ok, self.loop_depth, self.self_name, self.method_context,
        ) = saved

    def _check_signature(self, args: ast.arguments, owner: str) -> None:
        seen: set[str] = set()
        for param in _all_params(args):
            if param.arg in seen:
                self.found(
                    STEP_PARSE, param, SYNTAX_ERROR,
                    f"duplicate argument '{param.arg}' in function definition",
                )
            seen.add(param.arg)
            if param.annotation is not None:
                self._check_annotation(param.annotation)
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            if not _is_constant(default):
                self.found(
                    STEP_BANNED, default, AST_BANNED_CALL,
                    f"Default values must be constant literals (in {owner})",
                    "defaults are evaluated at definition time; use None and compute the value inside",
                )

    def _arg(self, node: ast.arg) -> None:
        self.bind(node.arg, node)
        self.generic(node)

    def _class(self, node: ast.ClassDef) -> None:
        name = node.name
        self.bind(name, node)
        if node.keywords:
            self.found(
                STEP_BANNED, node, AST_BANNED_CALL,
                f"Class keywords are not allowed (class {name}: "
                f"{', '.join(str(k.arg) for k in node.keywords)}=...)",
                "metaclasses and class hooks run code at definition time",
            )
        if node.decorator_list:
            self.found(
                STEP_BANNED, node.decorator_list[0], AST_BANNED_CALL,
                f"Decorators are not allowed (on class {name})", "they run code at definition time",
            )
        for base in node.bases:
            cls = type(base)
            if not (
                cls is _Name
                or (cls is _Attribute and type(base.value) is _Name
                    and base.value.id in self.module_aliases)
            ):
                self.found(
                    STEP_BANNED, base, AST_BANNED_CALL,
                    f"Class bases must be plain names (class {name})",
                    "computed bases run code at definition time",
                )
        for statement in node.body:
            if not _class_statement_ok(statement):
                self.found(
                    STEP_BANNED, statement, AST_BANNED_CALL,
                    f"Class-level code is not allowed in class {name}: {_describe_statement(statement)}",
                    "class bodies may only hold methods, docstrings, pass and constant assignments",
                )
        self.tokens.append(name)
        self.field(node.bases)
        self.field(node.keywords)
        if self.function_node is not None:
            # A class defined inside a function: its name may be used before the scan reaches it.
            self.class_methods[name] = _class_methods(node, self.class_methods) | self.class_methods.get(name, frozenset())
            self.watched.add(name)
            self.needs_escape_analysis = True
        saved = (
            self.scope, self.in_function, self.async_ok, self.loop_depth, self.in_trait, self.self_name,
            self.method_context,
        )
        self.scope = set()  # class scope: not visible from methods
        self.in_function, self.async_ok, self.loop_depth = False, False, 0
        self.self_name, self.method_context = None, True
        if node is self.trait_node:
            self.in_trait = True
        self.field(node.body)
        (
            self.scope, self.in_function, self.async_ok, self.loop_depth, self.in_trait, self.self_name,
            self.method_context,
        ) = saved
        self.field(node.decorator_list)

    def _comprehension(self, node: ast.AST) -> None:
        saved = self.scope
        self.scope = set()  # comprehension variables do not leak into the function
        self.generic(node)
        self.scope = saved

    def _named_expr(self, node: ast.NamedExpr) -> None:
        # ':=' binds in the enclosing function even inside a comprehension.
        self.function_scope.add(node.target.id)
        self.generic(node)

    # -- expressions ----------------------------------------------------------------------

    def _constant(self, node: ast.Constant) -> None:
        constant = node.value
        self.tokens.append(repr(constant))
        if type(constant) is str and constant[:2] == "__":
            self._dunder_string(node)

    def _dunder_string(self, node: ast.Constant) -> None:
        # Dictionaries handed to enum.Enum(), dataclass/class factories or update_wrapper
        # define or reach special methods by name, without a 'def' or an attribute access.
        if _DUNDER_RE.fullmatch(node.value):
            self.found(
                STEP_BANNED, node, AST_BANNED_ATTR, f"String {node.value!r} names a special attribute",
                "special methods and attributes cannot be defined or reached by name",
            )

    def _name(self, node: ast.Name) -> None:
        name = node.id  # already NFKC-normalised by the parser
        self.tokens.append(name)
        self._name_checks(node, name)
        if name == self.entity and self.in_trait and type(node.ctx) is _Load:
            # Reached through a handler (loop, lambda body, ...), not as a call argument.
            self.entity_uses.append((node, None, None, self.self_name))

    def _watched_name(self, node: ast.Name, name: str, parent: ast.AST, field_name: str) -> None:
        """A name in self.watched, met as the field ``field_name`` of ``parent``."""
        self._name_checks(node, name)
        if type(node.ctx) is not _Load:
            return
        if name == self.entity and self.in_trait:
            self.entity_uses.append((node, parent, field_name, self.self_name))
        if name in self.class_methods and not (
            (field_name == "func" and type(parent) is _Call) or field_name == "annotation"
        ):
            self.needs_escape_analysis = True  # a class of the file used as a value

    def _name_checks(self, node: ast.Name, name: str) -> None:
        ctx = type(node.ctx)
        if ctx is not _Load:
            self.bind(name, node)
            if ctx is _Del and self.function_node is not None:
                self.functions_with_del.add(self.function_node)
            return
        if name in _SUSPECT_NAMES or name[0] == "_":
            problem = _name_problem(name)
            if problem is not None:
                self.found(STEP_BANNED, node, *problem)
        if name in self.module_aliases and node is not self.module_base:
            self.found(
                STEP_BANNED, node, AST_BANNED_ATTR,
                f"Module '{name}' may only be used as {name}.<name>",
                "a module cannot be assigned, passed or returned",
            )

    def _call(self, node: ast.Call) -> None:
        func = node.func
        if type(func) is _Name:
            name = func.id
            if name in _BANNED_CALLS:
                hint = _NAME_HINTS.get(name, _DEFAULT_NAME_HINT)
                self.found(STEP_BANNED, node, AST_BANNED_CALL, f"Call to {name}() is not allowed", hint)
        self.generic(node)

    def _attribute(self, node: ast.Attribute) -> None:
        attr = node.attr  # already NFKC-normalised by the parser
        value = node.value
        ctx = type(node.ctx)
        if attr[0] == "_":
            kind = "special" if attr.startswith("__") and attr.endswith("__") else "private"
            shown = f"{value.id}.{attr}" if type(value) is _Name else f".{attr}"
            self.found(
                STEP_BANNED, node, AST_BANNED_ATTR, f"Access to {shown} is not allowed",
                f"{kind} attributes (names starting with '_') are not available"
                + ("" if kind == "special" else "; rename it without the underscore"),
            )
        elif attr in _BANNED_ATTRS:
            self.found(
                STEP_BANNED, node, AST_BANNED_ATTR, f"Access to .{attr} is not allowed",
                _ATTR_HINTS.get(attr, _FRAME_HINT),
            )
        is_self = False
        if type(value) is _Name:
            base = value.id
            if base in self.module_aliases:
                self.module_base = value
                module = self.module_aliases[base]
                problem = None if attr.startswith("_") else _module_name_problem(module, attr)
                if problem is not None:
                    self.found(STEP_BANNED, node, AST_BANNED_ATTR, f"Access to {base}.{attr} is not allowed", problem)
            elif base == self.entity and self.in_trait:
                self._entity_attribute(node, attr, ctx)
                is_self = True  # the entity by its own name: checked just above
            elif base == self.self_name:
                is_self = True
                if ctx is not _Load:
                    self.self_stored_attrs.add(attr)
            elif base in self.class_methods and attr in self.class_methods[base]:
                self.found(
                    STEP_BANNED, node, AST_BANNED_ATTR, f"Access to {base}.{attr} is not allowed",
                    f"{attr} is a method: call it on an instance (self.{attr}(...)); read through the "
                    "class it would run on whatever object is passed as self",
                )
        if ctx is not _Load and not is_self:
            root = _root_name(value)
            if root is not None and (root.id in self.module_aliases or root.id in self.imported_names):
                self.found(
                    STEP_BANNED, node, AST_BANNED_ATTR,
                    f"Cannot assign or delete .{attr} on '{root.id}'",
                    "imported modules and their objects are shared and read-only",
                )
            else:
                self.pending_stores.append(node)  # refused unless it turns out to be the entity
        # The generic walk of (value, attr), inlined.
        value_cls = type(value)
        if value_cls is _Name:
            name = value.id
            self.tokens.append(f"Name\0{name}\0{attr}")
            if (
                type(value.ctx) is not _Load or name in _SUSPECT_NAMES or name[0] == "_"
                or name in self.module_aliases
            ):
                self._name_checks(value, name)
            return
        tokens = self.tokens
        tokens.append(_NODE_NAMES[value_cls])
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _TooDeep
        if value_cls is _Attribute:  # a.b.c: a direct C call in the compiled build
            self._attribute(value)
        else:
            _DISPATCH[value_cls](self, value)
        self.depth -= 1
        tokens.append(attr)

    def _entity_attribute(self, node: ast.Attribute, attr: str, ctx: type) -> None:
        problem = _entity_attribute_problem(self.entity, attr, ctx, None)
        if problem is not None:
            self.found(STEP_ENTITY, node, AST_ENTITY_ATTR_FORBIDDEN, *problem)

    def _await(self, node: ast.Await) -> None:
        if not self.async_ok:
            self.found(STEP_PARSE, node, SYNTAX_ERROR, "'await' outside async function")
        if self.in_trait:
            root = _root_name(node.value)
            if root is not None and root.id == self.entity:
                target = node.value
                shown = (
                    f"{ast.unparse(target.func)}(...)" if type(target) is _Call else ast.unparse(target)
                )
                self.found(
                    STEP_AWAIT, node, AST_AWAIT_ON_SYNC, f"'await {shown}' on a synchronous entity method",
                    f"entity methods are synchronous; call {shown} without await",
                )
        self.generic(node)

    def _check_annotation(self, annotation: ast.AST) -> None:
        """Annotations may only name types: without 'from __future__ import annotations' they
        are evaluated at definition time, and strings in them can be evaluated later."""
        cls = type(annotation)
        if cls is _Name or (cls is _Constant and annotation.value is None):
            return
        strings: list[str] = []
        if not _is_type_expression(annotation, strings):
            self.found(
                STEP_BANNED, annotation, AST_BANNED_CALL, "Annotations may only name types",
                "e.g. int, list[float], Optional[str]; they must not compute anything",
            )
            return
        for text in strings:
            self._check_annotation_string(text, _line(annotation))

    def _check_annotation_string(self, text: str, line: int) -> None:
        try:
            parsed = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return  # not an expression, so nothing could ever evaluate it
        if not _is_type_expression(parsed.body, []):
            self.found(
                STEP_BANNED, line, AST_BANNED_CALL,
                f"Annotation string {text!r} is not a type expression", "annotations may only name types",
            )
            return
        for node in ast.walk(parsed):
            cls = type(node)
            if cls is _Name:
                problem = _name_problem(node.id)
                if problem is not None:
                    self.found(STEP_BANNED, line, *problem)
            elif cls is _Attribute and (node.attr.startswith("_") or node.attr in _BANNED_ATTRS):
                self.found(STEP_BANNED, line, AST_BANNED_ATTR, f"Access to .{node.attr} is not allowed",
                           "special, private and introspection attributes are not available")


def _entity_attribute_problem(shown: str, attr: str, ctx: type, entity: str | None) -> tuple[str, str] | None:
    """(problem, hint) when ``<shown>.<attr>`` in context ``ctx`` is outside the entity API, or None.
    ``entity``: the entity parameter's name when ``shown`` is another expression holding the entity."""
    alias = f" ({shown} holds the {entity})" if entity is not None else ""
    if ctx is _Load:
        if attr in _ENTITY_NAMES:
            return None
        close = difflib.get_close_matches(attr, sorted(_ENTITY_NAMES), n=1)
        suggestion = f"did you mean {shown}.{close[0]}? " if close else ""
        return (
            f"{shown}.{attr} is not part of the entity API{alias}",
            f"{suggestion}readable: {', '.join(sorted(entity_api.READABLE_ATTRS))}; "
            f"methods: {', '.join(sorted(entity_api.METHODS))}",
        )
    if ctx is not _Del and attr in _ENTITY_WRITABLE:
        return None
    verb = "assigned" if ctx is _Store else "deleted"
    if ctx is _Del and attr in _ENTITY_WRITABLE:
        why = "entity attributes can be assigned but never deleted"
    elif attr in entity_api.READABLE_ATTRS:
        why = f"{attr} is read-only ({entity_api.READABLE_ATTRS[attr][1]})"
    elif attr in entity_api.METHODS:
        why = f"{attr} is a method"
    else:
        why = f"{attr} is not part of the entity API"
    return f"{shown}.{attr} cannot be {verb}{alias}", f"{why}; writable attributes: {_WRITABLE_TEXT}"


def _instance_parameter(args: ast.arguments, enclosing: str | None, is_method: bool) -> str | None:
    """The name bound to the instance inside a function: a method's first parameter; in a nested
    function or lambda the enclosing method's, unless a parameter of its own shadows it."""
    if is_method:
        positional = _positional_params(args)
        return positional[0].arg if positional else None
    if enclosing is not None and any(param.arg == enclosing for param in _all_params(args)):
        return None
    return enclosing


def _class_methods(node: ast.ClassDef, known: dict[str, frozenset[str]]) -> frozenset[str]:
    """The methods defined in a class and in its bases defined earlier in the file."""
    names = {member.name for member in node.body if type(member) in (_FunctionDef, _AsyncFunctionDef)}
    for base in node.bases:
        if type(base) is _Name and base.id in known:
            names |= known[base.id]
    return frozenset(names)


def _module_classes(tree: ast.Module) -> dict[str, frozenset[str]]:
    """Top-level class name -> its methods, with those of its in-file bases (used before the scan)."""
    classes: dict[str, frozenset[str]] = {}
    for statement in tree.body:
        if type(statement) is _ClassDef:
            classes[statement.name] = _class_methods(statement, classes) | classes.get(statement.name, frozenset())
    return classes


def _is_type_expression(node: ast.AST, strings: list[str], depth: int = 0) -> bool:
    """Names, dotted names, subscripts, tuples/lists, constants and ``|`` only; string
    constants are collected for a separate check."""
    cls = type(node)
    if cls is _Name:
        return True
    if cls is _Constant:
        if isinstance(node.value, str):
            strings.append(node.value)
        return True
    if depth > MAX_NESTING:
        raise _TooDeep
    depth += 1
    if cls is _Attribute:
        return _is_type_expression(node.value, strings, depth)
    if cls is _Subscript:
        return _is_type_expression(node.value, strings, depth) and _is_type_expression(node.slice, strings, depth)
    if cls is _Tuple or cls is _List:
        return all(_is_type_expression(element, strings, depth) for element in node.elts)
    if cls is _BinOp:
        return (
            type(node.op) is _BitOr
            and _is_type_expression(node.left, strings, depth)
            and _is_type_expression(node.right, strings, depth)
        )
    return False


def _unbound_methods(cls: type, names: dict[type, str]) -> dict[type, Callable[..., object]]:
    """Node class -> the method of ``cls`` named for it, unbound (called as ``f(self, node)``).

    Handlers are plain functions in a module-level table: bound methods stored on the instance
    would form a reference cycle that keeps every tree alive until the cyclic GC runs. They are
    looked up by name so that the compiled build gets their Python-callable form."""
    return {node_cls: getattr(cls, name) for node_cls, name in names.items()}


_SCANNER_HANDLERS: dict[type, Callable[[_Scanner, ast.AST], None]] = _unbound_methods(_Scanner, {
    _Module: "_module",
    _Import: "_import",
    _ImportFrom: "_import_from",
    _Name: "_name",
    _Attribute: "_attribute",
    _Call: "_call",
    _Constant: "_constant",
    _FunctionDef: "_function",
    _AsyncFunctionDef: "_function",
    _Lambda: "_lambda",
    _ClassDef: "_class",
    ast.arg: "_arg",
    _For: "_loop",
    _AsyncFor: "_loop",
    _While: "_loop",
    _Break: "_break_continue",
    _Continue: "_break_continue",
    _Return: "_return",
    _Await: "_await",
    _ExceptHandler: "_except_handler",
    _NamedExpr: "_named_expr",
    _ListComp: "_comprehension",
    _SetComp: "_comprehension",
    _GeneratorExp: "_comprehension",
    _DictComp: "_comprehension",
    _AnnAssign: "_ann_assign",
    _Global: "_global",
    _Nonlocal: "_global",
    _Match: "_match",
    _Yield: "_yield",
    _YieldFrom: "_yield",
})


# Node class -> scanner function; classes without a handler get the generic walk. A plain dict
# holding every node class: its lookups are faster than a dict subclass with __missing__.
_GENERIC = getattr(_Scanner, "generic")
_DISPATCH: dict[type, Callable[[_Scanner, ast.AST], None]] = {
    cls: _SCANNER_HANDLERS.get(cls, _GENERIC) for cls in _ast_classes()
}


def _name_problem(name: str) -> tuple[str, str, str] | None:
    """(code, problem, hint) if a bare name may not appear at all (call, reference or binding)."""
    if name in _BANNED_CALLS:
        return AST_BANNED_CALL, f"Use of {name} is not allowed", _NAME_HINTS.get(name, _DEFAULT_NAME_HINT)
    if name in _BANNED_EXCEPTIONS:
        return AST_BANNED_CALL, f"Use of {name} is not allowed", (
            "the sandbox's deadline signal must not be caught; use Exception or a specific error"
        )
    if name.startswith("_") and name != "_":
        if name in _BANNED_ATTRS:
            return AST_BANNED_ATTR, f"Use of {name} is not allowed", "interpreter internals are not available"
        return AST_BANNED_ATTR, f"Name '{name}' is not allowed", "names starting with '_' are reserved; rename it"
    return None


def _module_statement_ok(node: ast.stmt) -> bool:
    cls = type(node)
    if cls in (_Import, _ImportFrom, _ClassDef, _FunctionDef, _AsyncFunctionDef, _Pass):
        return True
    return _constant_statement_ok(node)


def _class_statement_ok(node: ast.stmt) -> bool:
    cls = type(node)
    if cls in (_FunctionDef, _AsyncFunctionDef, _Pass):
        return True
    return _constant_statement_ok(node)


def _constant_statement_ok(node: ast.stmt) -> bool:
    """A docstring, or a constant assigned to plain names."""
    cls = type(node)
    if cls is _Expr:
        value = node.value
        return type(value) is _Constant and isinstance(value.value, str)
    if cls is _Assign:
        return all(type(t) is _Name for t in node.targets) and _is_constant(node.value)
    if cls is _AnnAssign:
        return type(node.target) is _Name and (node.value is None or _is_constant(node.value))
    return False


# ---------------------------------------------------------------------------------------------
# Step 9: definitely-assigned analysis
# ---------------------------------------------------------------------------------------------


class _Unbound(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_State = set[str]


def _meet(states: Iterable[_State | None]) -> _State | None:
    """Names assigned on every path that reaches this point (None: no path reaches it)."""
    live = [state for state in states if state is not None]
    if not live:
        return None
    first = live[0]
    return first.intersection(*live[1:]) if len(live) > 1 else first


def _deleted_names(statements: list[ast.stmt]) -> set[str]:
    return {
        node.id
        for statement in statements
        for node in ast.walk(statement)
        if type(node) is _Name and type(node.ctx) is _Del
    }


_EXPR_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "kind", "conversion", "is_async"})
# The fields _FlowChecker._expr walks generically.
_EXPR_FIELDS = _field_table(_EXPR_SKIPPED_FIELDS)


class _FlowChecker:
    """Flow-sensitive check that every local is assigned on every path before it is read,
    and that every other name is module-level, an allowed builtin or a closure variable."""

    def __init__(self, scanner: _Scanner, future_annotations: bool) -> None:
        self.module_names = scanner.module_scope
        self.function_locals = scanner.function_locals
        self.functions_with_del = scanner.functions_with_del
        self.future_annotations = future_annotations
        # Per-function context, saved and restored around nested functions.
        self.locals: set[str] = set()
        self.enclosing: tuple[set[str], ...] = ()
        self.function_name = "<module>"
        self.has_del = False
        self.loops: list[tuple[list[_State], list[_State]]] = []

    # -- module level ---------------------------------------------------------------------

    def check_module(self, tree: ast.Module) -> None:
        defined: set[str] = set()
        for statement in tree.body:
            cls = type(statement)
            if cls is _ClassDef:
                for base in statement.bases:
                    if type(base) is _Name and (base.id in defined or base.id in _BUILTINS):
                        continue  # the common case, decided without building the message
                    self._module_level_names(base, defined, f"base of class {statement.name}")
                class_defined = set(defined)
                for member in statement.body:
                    if type(member) in (_FunctionDef, _AsyncFunctionDef):
                        self._definition_time_annotations(member, class_defined)
                        self.check_function(member, ())
                        class_defined.add(member.name)
                    elif type(member) is _AnnAssign and not self.future_annotations:
                        self._module_level_names(member.annotation, class_defined, "annotation")
                    if type(member) in (_Assign, _AnnAssign):
                        targets = member.targets if type(member) is _Assign else [member.target]
                        class_defined.update(t.id for t in targets if type(t) is _Name)
                defined.add(statement.name)
            elif cls in (_FunctionDef, _AsyncFunctionDef):
                self._definition_time_annotations(statement, defined)
                self.check_function(statement, ())
                defined.add(statement.name)
            elif cls is _Import or cls is _ImportFrom:
                for alias in statement.names:
                    defined.add((alias.asname or alias.name).partition(".")[0])
            elif cls is _Assign:
                defined.update(t.id for t in statement.targets if type(t) is _Name)
            elif cls is _AnnAssign:
                if not self.future_annotations:
                    self._module_level_names(statement.annotation, defined, "annotation")
                if statement.value is not None and type(statement.target) is _Name:
                    defined.add(statement.target.id)

    def _definition_time_annotations(self, function: ast.AST, defined: set[str]) -> None:
        if self.future_annotations:
            return
        args = function.args
        for param in _all_params(args):
            if param.annotation is not None:
                self._module_level_names(param.annotation, defined, "annotation")
        if function.returns is not None:
            self._module_level_names(function.returns, defined, "annotation")

    def _module_level_names(self, node: ast.AST, defined: set[str], where: str) -> None:
        """Names evaluated while the module loads must already be defined."""
        for child in ast.walk(node):
            if type(child) is _Name and child.id not in defined and child.id not in _BUILTINS:
                if child.id in self.module_names:
                    raise _Unbound(
                        f"'{child.id}' is used in the {where} before it is defined "
                        f"(line {child.lineno}); define it earlier in the file"
                    )
                raise _Unbound(f"undefined name '{child.id}' in the {where} (line {child.lineno})")

    # -- functions ------------------------------------------------------------------------

    def check_function(self, node: ast.AST, enclosing: tuple[set[str], ...]) -> None:
        saved = (self.locals, self.enclosing, self.function_name, self.has_del, self.loops)
        self.locals = self.function_locals.get(node, set())
        self.enclosing = enclosing
        self.function_name = getattr(node, "name", "lambda")
        self.has_del = node in self.functions_with_del
        self.loops = []
        state = {param.arg for param in _all_params(node.args)}
        if type(node) is _Lambda:
            self._expr(node.body, state)
        else:
            self._block(node.body, state)
        self.locals, self.enclosing, self.function_name, self.has_del, self.loops = saved

    def _nested(self, node: ast.AST) -> None:
        self.check_function(node, (self.locals,) + self.enclosing)

    def _missing(self, node: ast.Name) -> None:
        """A read of a name not definitely assigned in this function at this point."""
        name = node.id
        if name in self.locals:
            raise _Unbound(
                f"'{name}' may be used before it is assigned (line {node.lineno}, in "
                f"{self.function_name}); assign it on every path before this line, e.g. "
                f"{name} = None at the top"
            )
        if name in self.module_names or name in _BUILTINS:
            return
        for scope in self.enclosing:
            if name in scope:
                return
        raise _Unbound(
            f"undefined name '{name}' (line {node.lineno}, in {self.function_name}); "
            "define it, import it from an allowed module, or read class constants as self.NAME"
        )

    # -- statements -----------------------------------------------------------------------

    def _block(self, statements: list[ast.stmt], state: _State) -> _State | None:
        for statement in statements:
            # Statements without a handler (global, match, ...) were rejected in step 5.
            cls = type(statement)
            # The commonest statements by direct (C, compiled) calls, the rest through the table.
            if cls is _Expr:
                state = self._expr_statement(statement, state)
            elif cls is _Assign:
                state = self._assign(statement, state)
            elif cls is _If:
                state = self._if(statement, state)
            elif cls is _Return:
                state = self._return(statement, state)
            elif cls is _For:
                state = self._for(statement, state)
            else:
                state = _FLOW_HANDLERS.get(cls, _FLOW_PASS)(self, statement, state)
            if state is None:
                return None  # the rest is unreachable
        return state

    def _expr_statement(self, node: ast.Expr, state: _State) -> _State:
        self._expr(node.value, state)
        return state

    def _assign(self, node: ast.Assign, state: _State) -> _State:
        self._expr(node.value, state)
        for target in node.targets:
            self._bind(target, state)
        return state

    def _aug_assign(self, node: ast.AugAssign, state: _State) -> _State:
        target = node.target
        if type(target) is _Name:
            if target.id not in state:
                self._missing(target)
            self._expr(node.value, state)
            state.add(target.id)
        else:
            self._bind(target, state)
            self._expr(node.value, state)
        return state

    def _ann_assign(self, node: ast.AnnAssign, state: _State) -> _State:
        # Annotations of local variables are never evaluated.
        if node.value is not None:
            self._expr(node.value, state)
            self._bind(node.target, state)
        elif type(node.target) is not _Name:
            self._bind(node.target, state)
        return state

    def _return(self, node: ast.Return, state: _State) -> None:
        if node.value is not None:
            self._expr(node.value, state)
        return None

    def _raise(self, node: ast.Raise, state: _State) -> None:
        if node.exc is not None:
            self._expr(node.exc, state)
        if node.cause is not None:
            self._expr(node.cause, state)
        return None

    def _assert(self, node: ast.Assert, state: _State) -> _State:
        self._expr(node.test, state)
        if node.msg is not None:
            self._expr(node.msg, set(state))
        return state

    def _delete(self, node: ast.Delete, state: _State) -> _State:
        for target in node.targets:
            if type(target) is _Name:
                if target.id not in state:
                    self._missing(target)
                state.discard(target.id)
            elif type(target) in (_Tuple, _List):
                self._delete(_Delete(targets=target.elts), state)
            else:
                self._bind(target, state)
        return state

    def _pass(self, node: ast.Pass, state: _State) -> _State:
        return state

    def _break(self, node: ast.Break, state: _State) -> None:
        if self.loops:
            self.loops[-1][0].append(state)
        return None

    def _continue(self, node: ast.Continue, state: _State) -> None:
        if self.loops:
            self.loops[-1][1].append(state)
        return None

    def _if(self, node: ast.If, state: _State) -> _State | None:
        self._expr(node.test, state)
        taken = self._block(node.body, set(state))
        if not node.orelse:
            return _meet((taken, state))
        return _meet((taken, self._block(node.orelse, set(state))))

    def _loop_head(self, body: list[ast.stmt], state: _State) -> _State:
        # Without 'del', states only grow, so the first iteration is the worst case.
        if self.has_del:
            return state - _deleted_names(body)
        return state

    def _for(self, node: ast.For | ast.AsyncFor, state: _State) -> _State | None:
        self._expr(node.iter, state)
        head = self._loop_head(node.body, state)
        inside = set(head)
        self._bind(node.target, inside)
        self.loops.append(([], []))
        self._block(node.body, inside)
        breaks, _ = self.loops.pop()
        after_else = self._block(node.orelse, set(head)) if node.orelse else head
        return _meet([after_else, *breaks])

    def _while(self, node: ast.While, state: _State) -> _State | None:
        head = set(self._loop_head(node.body, state))
        self._expr(node.test, head)
        self.loops.append(([], []))
        self._block(node.body, set(head))
        breaks, _ = self.loops.pop()
        test = node.test
        endless = type(test) is _Constant and bool(test.value)
        if endless:
            return _meet(breaks)  # leaves only through break
        after_else = self._block(node.orelse, set(head)) if node.orelse else head
        return _meet([after_else, *breaks])

    def _try(self, node: ast.Try, state: _State) -> _State | None:
        floor = state
        if self.has_del:
            floor = state - _deleted_names(node.body + node.orelse + node.finalbody) - _deleted_names(
                [statement for handler in node.handlers for statement in handler.body]
            )
        after_body = self._block(node.body, set(state))
        outcomes: list[_State | None] = []
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
        normal = _meet(outcomes)
        if not node.finalbody:
            return normal
        after_finally = self._block(node.finalbody, set(floor))
        if normal is None or after_finally is None:
            return None
        if normal == floor:
            return after_finally
        return self._block(node.finalbody, set(normal))

    def _with(self, node: ast.With | ast.AsyncWith, state: _State) -> _State | None:
        for item in node.items:
            self._expr(item.context_expr, state)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, state)
        return self._block(node.body, state)

    def _def(self, node: ast.FunctionDef | ast.AsyncFunctionDef, state: _State) -> _State:
        if not self.future_annotations:
            for param in _all_params(node.args):
                if param.annotation is not None:
                    self._expr(param.annotation, state)
            if node.returns is not None:
                self._expr(node.returns, state)
        state.add(node.name)
        self._nested(node)
        return state

    def _class(self, node: ast.ClassDef, state: _State) -> _State:
        for base in node.bases:
            self._expr(base, state)
        state.add(node.name)
        for member in node.body:
            if type(member) in (_FunctionDef, _AsyncFunctionDef):
                self._nested(member)
        return state

    def _import(self, node: ast.Import | ast.ImportFrom, state: _State) -> _State:
        for alias in node.names:
            state.add((alias.asname or alias.name).partition(".")[0])
        return state

    # -- expressions ----------------------------------------------------------------------

    def _bind(self, target: ast.AST, state: _State) -> None:
        cls = type(target)
        if cls is _Name:
            state.add(target.id)
        elif cls is _Tuple or cls is _List:
            for element in target.elts:
                self._bind(element, state)
        elif cls is _Starred:
            self._bind(target.value, state)
        elif cls is _Attribute:
            self._expr(target.value, state)
        elif cls is _Subscript:
            self._expr(target.value, state)
            self._expr(target.slice, state)

    def _expr(self, node: ast.AST, state: _State) -> None:
        """Check the reads in an expression, in field order; names and constants among the
        children are handled inline rather than by a recursive call."""
        cls = type(node)
        if cls is _Name:
            if node.id not in state:
                self._missing(node)
        elif cls is _Attribute:
            value = node.value
            while type(value) is _Attribute:
                value = value.value
            if type(value) is _Name:
                if value.id not in state:
                    self._missing(value)
            elif type(value) is not _Constant:
                self._expr(value, state)
        elif cls is _Constant:
            pass
        elif cls is _Call:
            func = node.func
            if type(func) is _Name:
                if func.id not in state:
                    self._missing(func)
            else:
                self._expr(func, state)
            for argument in node.args:
                argument_cls = type(argument)
                if argument_cls is _Name:
                    if argument.id not in state:
                        self._missing(argument)
                elif argument_cls is not _Constant:
                    self._expr(argument, state)
            for keyword in node.keywords:
                value = keyword.value
                value_cls = type(value)
                if value_cls is _Name:
                    if value.id not in state:
                        self._missing(value)
                elif value_cls is not _Constant:
                    self._expr(value, state)
        elif cls is _BoolOp:
            values = node.values
            self._expr(values[0], state)
            maybe = set(state)  # later operands may not run: their ':=' are not certain
            for value in values[1:]:
                self._expr(value, maybe)
        elif cls is _IfExp:
            self._expr(node.test, state)
            self._expr(node.body, set(state))
            self._expr(node.orelse, set(state))
        elif cls is _NamedExpr:
            self._expr(node.value, state)
            state.add(node.target.id)
        elif cls in _COMPREHENSION_TYPES:
            self._comprehension(node, state)
        elif cls is _Lambda:
            self._nested(node)
        else:
            for field_name in _EXPR_FIELDS[cls]:
                value = getattr(node, field_name)
                value_cls = type(value)
                if value_cls is list:
                    for item in value:
                        item_cls = type(item)
                        if item_cls is _Name:
                            if item.id not in state:
                                self._missing(item)
                        elif item_cls is not _Constant and item is not None:  # dict unpacking: None key
                            self._expr(item, state)
                elif value_cls is _Name:
                    if value.id not in state:
                        self._missing(value)
                elif value_cls is not _Constant and value is not None and isinstance(value, _AST):
                    self._expr(value, state)

    def _comprehension(self, node: ast.AST, state: _State) -> None:
        generators = node.generators
        self._expr(generators[0].iter, state)  # evaluated in the enclosing scope
        inner = set(state)  # comprehension variables and conditional ':=' stay inside
        for index, generator in enumerate(generators):
            if index:
                self._expr(generator.iter, inner)
            self._bind(generator.target, inner)
            for condition in generator.ifs:
                self._expr(condition, inner)
        if type(node) is _DictComp:
            self._expr(node.key, inner)
            self._expr(node.value, inner)
        else:
            self._expr(node.elt, inner)


_FLOW_HANDLERS: dict[type, Callable[[_FlowChecker, ast.AST, _State], _State | None]] = _unbound_methods(_FlowChecker, {
    _Expr: "_expr_statement",
    _Assign: "_assign",
    _AugAssign: "_aug_assign",
    _AnnAssign: "_ann_assign",
    _Return: "_return",
    _If: "_if",
    _For: "_for",
    _AsyncFor: "_for",
    _While: "_while",
    _Try: "_try",
    _TryStar: "_try",
    _With: "_with",
    _AsyncWith: "_with",
    _Raise: "_raise",
    _Assert: "_assert",
    _Delete: "_delete",
    _Pass: "_pass",
    _Break: "_break",
    _Continue: "_continue",
    _FunctionDef: "_def",
    _AsyncFunctionDef: "_def",
    _ClassDef: "_class",
    _Import: "_import",
    _ImportFrom: "_import",
})
_FLOW_PASS = getattr(_FlowChecker, "_pass")


# ---------------------------------------------------------------------------------------------
# Steps 7 and 5: where the entity and the file's classes go (the rare path)
# ---------------------------------------------------------------------------------------------

_ENTITY_USE_HINT = (
    "use the entity only as entity.<attribute>, entity.<method>(...), a plain name (e = entity), in a "
    "comparison, or as an argument of a function or method defined in the trait (its parameter is then "
    "checked as the entity); anywhere else the gatekeeper cannot check what is done with it"
)
_CLASS_USE_HINT = (
    "a class defined in the trait may be instantiated, subclassed, named in annotations, compared, "
    "iterated, passed to builtins and module functions, and read for its constants; keep instances "
    "rather than classes in variables"
)
_STORE_HINT = (
    "only attributes of self (the first parameter of a method, never rebound) and the entity's writable "
    "attributes may be assigned or deleted; other objects, classes and objects of modules in particular, "
    "may be shared with other traits"
)
# Units walked before the analysis gives up (per unit of the file): ample for real code, a bound for
# code built to make it run long.
_MAX_WALKS_PER_UNIT = 20


def _shown(node: ast.AST) -> str:
    if type(node) is _Name:
        return node.id
    text = ast.unparse(node)
    return text if len(text) <= 40 else text[:37] + "..."


def _entity_uses_are_direct(scanner: _Scanner, trait: _Trait) -> bool:
    """True when every bare use of the entity is ``self.<method>(..., entity, ...)`` into a method
    defined in the trait class whose parameter has the entity's name: there the scan's check of
    ``entity.<name>`` already applies, and nothing needs following."""
    methods: dict[str, ast.AST] = {}
    for member in trait.node.body:
        if type(member) in (_FunctionDef, _AsyncFunctionDef):
            methods[member.name] = member  # the last definition wins, as at runtime
    for name_node, parent, field_name, self_name in scanner.entity_uses:
        if type(parent) is not _Call or field_name != "args" or self_name is None:
            return False
        func = parent.func
        if type(func) is not _Attribute or type(func.value) is not _Name or func.value.id != self_name:
            return False
        method = methods.get(func.attr)
        if method is None or func.attr in scanner.self_stored_attrs:
            return False
        index = 0
        for argument in parent.args:
            if argument is name_node:
                break
            if type(argument) is _Starred:
                return False
            index += 1
        params = _positional_params(method.args)
        if index + 1 >= len(params) or params[index + 1].arg != trait.entity_param:
            return False
    return True


def _parameter_for(args: ast.arguments, index: int | None, offset: int, keyword: str | None) -> str | None:
    """The named parameter that receives positional argument ``index`` (after ``offset`` bound
    ones) or keyword argument ``keyword``; None when it is *args, **kwargs or nothing."""
    if keyword is None:
        if index is None:
            return None
        positional = _positional_params(args)
        position = index + offset
        return positional[position].arg if position < len(positional) else None
    for param in args.args + args.kwonlyargs:
        if param.arg == keyword:
            return keyword
    return None


class _Escapes:
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

    def __init__(self, tree: ast.Module, trait: _Trait | None, scanner: _Scanner) -> None:
        self.scanner = scanner
        self.entity = trait.entity_param if trait else None
        self.trait_node = trait.node if trait else None
        self.class_methods = scanner.class_methods
        self.module_aliases = scanner.module_aliases
        self.units: list[tuple[ast.AST, ast.AST | None, str | None]] = []  # (unit, enclosing, self name)
        self.children: dict[ast.AST | None, list[ast.AST]] = {}
        self.unit_self: dict[ast.AST, tuple[ast.AST | None, str | None]] = {}
        self.taint: dict[ast.AST, set[str]] = {}
        self.envs: dict[ast.AST, set[str]] = {}
        self.functions: dict[str, list[ast.AST]] = {}  # name -> the defs and lambdas bound to it
        self.methods: dict[str, list[ast.AST]] = {}  # method name -> its definitions in any class
        self.classes: dict[str, list[ast.ClassDef]] = {}
        self.other_bindings: set[str] = set()  # names also bound to something else than a def
        self.self_attrs: dict[str, int] = {}  # attribute of self assigned the entity -> line
        self.entity_bases: set[int] = set()  # id() of attributes whose object may be the entity
        self.queue: list[ast.AST] = []
        self.queued: set[ast.AST] = set()
        # The unit being walked.
        self.unit: ast.AST | None = None
        self.env: set[str] = set()
        self.self_name: str | None = None
        self._collect(tree, None, None, False, False)
        self.shadowed = self.other_bindings | set(self.functions) | set(self.classes)

    # -- the file's units, functions, methods and classes ---------------------------------

    def _collect(self, node: ast.AST, unit: ast.AST | None, self_name: str | None, in_class: bool,
                 in_trait: bool) -> None:
        for child in ast.iter_child_nodes(node):
            cls = type(child)
            if cls is _FunctionDef or cls is _AsyncFunctionDef or cls is _Lambda:
                child_self = _instance_parameter(child.args, self_name, in_class and cls is not _Lambda)
                self.units.append((child, unit, child_self))
                self.children.setdefault(unit, []).append(child)
                self.unit_self[child] = (unit, child_self)
                self.taint[child] = {self.entity} if in_trait and self.entity else set()
                if cls is not _Lambda:
                    (self.methods if in_class else self.functions).setdefault(child.name, []).append(child)
                self.other_bindings.update(param.arg for param in _all_params(child.args))
                self._collect(child, child, child_self, False, in_trait)
            elif cls is _ClassDef:
                self.classes.setdefault(child.name, []).append(child)
                self._collect(child, unit, None, True, in_trait or child is self.trait_node)
            else:
                if cls is _Assign and type(child.value) is _Lambda and all(type(t) is _Name for t in child.targets):
                    for target in child.targets:
                        self.functions.setdefault(target.id, []).append(child.value)
                    self._collect(child.value, unit, self_name, False, in_trait)
                    self.units.append((child.value, unit, _instance_parameter(child.value.args, self_name, False)))
                    self.children.setdefault(unit, []).append(child.value)
                    self.unit_self[child.value] = self.units[-1][1:]
                    self.taint[child.value] = {self.entity} if in_trait and self.entity else set()
                    self.other_bindings.update(param.arg for param in _all_params(child.value.args))
                    continue
                if cls is _Name and type(child.ctx) is not _Load:
                    self.other_bindings.add(child.id)
                elif cls is _ExceptHandler and child.name:
                    self.other_bindings.add(child.name)
                elif cls is _Import or cls is _ImportFrom:
                    self.other_bindings.update((a.asname or a.name).partition(".")[0] for a in child.names)
                self._collect(child, unit, self_name, False, in_trait)

    def _inits(self, class_name: str, seen: set[str]) -> list[ast.AST] | None:
        """The __init__ methods that ``class_name(...)`` may run, or None if one is not the file's."""
        if class_name in seen:
            return []
        seen.add(class_name)
        found: list[ast.AST] = []
        for node in self.classes.get(class_name, ()):
            inits = [m for m in node.body if type(m) in (_FunctionDef, _AsyncFunctionDef) and m.name == "__init__"]
            if inits:
                found += inits
                continue
            for base in node.bases:
                if type(base) is not _Name or base.id not in self.classes:
                    return None  # object's or a module class's __init__: not followed
                inherited = self._inits(base.id, seen)
                if inherited is None:
                    return None
                found += inherited
            if not node.bases:
                return None
        return found

    # -- driver -----------------------------------------------------------------------------

    def run(self) -> None:
        for unit, _, _ in self.units:
            self._enqueue(unit)
        budget = _MAX_WALKS_PER_UNIT * len(self.units) + 100
        while self.queue:
            budget -= 1
            if budget < 0:
                self.scanner.found(
                    STEP_ENTITY, self.queue[0], AST_ENTITY_ATTR_FORBIDDEN,
                    "The entity is passed through more functions than the gatekeeper follows",
                    "pass it through fewer functions",
                )
                return
            unit = self.queue.pop(0)
            self.queued.discard(unit)
            self._walk(unit)

    def _enqueue(self, unit: ast.AST) -> None:
        if unit not in self.queued:
            self.queued.add(unit)
            self.queue.append(unit)

    def _walk(self, unit: ast.AST) -> None:
        enclosing, self_name = self.unit_self[unit]
        env = set(self.taint[unit])
        if enclosing is not None:
            env |= self.envs.get(enclosing, set()) - self.scanner.function_locals.get(unit, set())
        before = self.envs.get(unit)
        self.envs[unit] = env
        self.unit, self.env, self.self_name = unit, env, self_name
        attrs = len(self.self_attrs)
        if type(unit) is _Lambda:
            self._value(unit.body, "returned")
        else:
            self._block(unit.body)
        if len(self.self_attrs) != attrs:
            for other, _, _ in self.units:  # self.<attr> now holds the entity in every method
                self._enqueue(other)
        elif env != before:
            for child in self.children.get(unit, ()):
                self._enqueue(child)

    def _add_name(self, name: str) -> None:
        self.env.add(name)
        taint = self.taint[self.unit]
        if name not in taint:
            taint.add(name)
            self._enqueue(self.unit)  # earlier statements (loops) and nested units see it next time

    # -- findings ---------------------------------------------------------------------------

    def _entity_escape(self, node: ast.AST, context: str) -> None:
        shown = _shown(node)
        holder = "" if shown == self.entity else f" ({shown})"
        self.scanner.found(
            STEP_ENTITY, node, AST_ENTITY_ATTR_FORBIDDEN, f"The entity{holder} is {context}", _ENTITY_USE_HINT
        )

    def _class_escape(self, node: ast.Name, context: str) -> None:
        self.scanner.found(STEP_BANNED, node, AST_BANNED_ATTR, f"Class {node.id} is {context}", _CLASS_USE_HINT)

    # -- what may hold the entity -----------------------------------------------------------

    def _is_entity(self, node: ast.AST) -> bool:
        cls = type(node)
        if cls is _Name:
            return node.id in self.env
        if cls is _Attribute:
            value = node.value
            return node.attr in self.self_attrs and type(value) is _Name and value.id == self.self_name
        if cls is _NamedExpr:
            return self._is_entity(node.value)
        if cls is _IfExp:
            return self._is_entity(node.body) or self._is_entity(node.orelse)
        if cls is _BoolOp:
            return any(self._is_entity(value) for value in node.values)
        return False

    def _inner(self, node: ast.AST) -> None:
        """The parts of an expression that may be the entity, used where the entity may go."""
        cls = type(node)
        if cls is _NamedExpr:
            self._add_name(node.target.id)
            self._inner(node.value)
        elif cls is _IfExp:
            self._allowed(node.test)
            self._allowed(node.body)
            self._allowed(node.orelse)
        elif cls is _BoolOp:
            for value in node.values:
                self._allowed(value)

    def _allowed(self, node: ast.AST) -> None:
        """An expression where the entity and the file's classes may appear (a test, a comparison)."""
        cls = type(node)
        if cls is _Name or cls is _Constant:
            return
        if self._is_entity(node):
            self._inner(node)
        else:
            self._value(node, "used in an expression")

    def _object(self, node: ast.AST, context: str) -> None:
        """An expression used as an object (indexed, iterated): a class of the file may be."""
        if type(node) is _Name and not self._is_entity(node):
            return
        self._value(node, context)

    # -- statements -------------------------------------------------------------------------

    def _block(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self._statement(statement)

    def _statement(self, node: ast.stmt) -> None:
        cls = type(node)
        if cls is _Assign:
            for target in node.targets:
                self._assign(target, node.value)
        elif cls is _AnnAssign:
            if node.value is not None:
                self._assign(node.target, node.value)
            else:
                self._target(node.target)
        elif cls is _AugAssign:
            target = node.target
            if type(target) is _Name:
                if self._is_entity(target):
                    self._entity_escape(target, "combined with an operator")
            else:
                self._target(target)
            self._value(node.value, "combined with an operator")
        elif cls is _For or cls is _AsyncFor:
            self._iteration(node.target, node.iter)
            self._block(node.body)
            self._block(node.orelse)
        elif cls is _If or cls is _While:
            self._allowed(node.test)
            self._block(node.body)
            self._block(node.orelse)
        elif cls is _Return:
            if node.value is not None:
                self._value(node.value, "returned")
        elif cls is _Expr:
            self._allowed(node.value)
        elif cls is _With or cls is _AsyncWith:
            for item in node.items:
                self._value(item.context_expr, "used as a context manager")
                if item.optional_vars is not None:
                    self._target(item.optional_vars)
            self._block(node.body)
        elif cls is _Try or cls is _TryStar:
            self._block(node.body)
            for handler in node.handlers:
                if handler.type is not None:
                    self._value(handler.type, "caught")
                self._block(handler.body)
            self._block(node.orelse)
            self._block(node.finalbody)
        elif cls is _Raise:
            for part in (node.exc, node.cause):
                if part is not None:
                    self._value(part, "raised")
        elif cls is _Assert:
            self._allowed(node.test)
            if node.msg is not None:
                self._value(node.msg, "used as an assertion message")
        elif cls is _Delete:
            for target in node.targets:
                self._target(target)
        # Definitions are units of their own (their bases are plain names, their defaults
        # constants); imports, pass, break, continue move nothing; global, nonlocal and match
        # were refused at step 5.

    def _assign(self, target: ast.AST, value: ast.AST) -> None:
        if self._is_entity(value):
            target_cls = type(target)
            if target_cls is _Name:
                self._add_name(target.id)
            elif target_cls is _Attribute and type(target.value) is _Name and target.value.id == self.self_name:
                if target.attr not in self.self_attrs:
                    self.self_attrs[target.attr] = _line(target)
            else:
                self._entity_escape(value, f"stored in {_shown(target)}")
                self._target(target)
            self._inner(value)
            return
        target_cls, value_cls = type(target), type(value)
        if (
            (target_cls is _Tuple or target_cls is _List) and (value_cls is _Tuple or value_cls is _List)
            and len(target.elts) == len(value.elts)
            and not any(type(node) is _Starred for node in target.elts + value.elts)
        ):
            for element_target, element_value in zip(target.elts, value.elts):
                self._assign(element_target, element_value)
            return
        self._value(value, f"assigned to {_shown(target)}")
        self._target(target)

    def _target(self, node: ast.AST) -> None:
        cls = type(node)
        if cls is _Attribute:
            self._attribute(node)
        elif cls is _Subscript:
            self._object(node.value, "indexed")
            self._value(node.slice, "used as an index")
        elif cls is _Tuple or cls is _List:
            for element in node.elts:
                self._target(element)
        elif cls is _Starred:
            self._target(node.value)

    def _iteration(self, target: ast.AST, iterable: ast.AST) -> None:
        cls = type(iterable)
        if (cls is _Tuple or cls is _List or cls is _Set) and any(self._is_entity(e) for e in iterable.elts):
            for element in iterable.elts:
                if self._is_entity(element):
                    if type(target) is _Name:
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

    def _value(self, node: ast.AST, context: str) -> None:
        """An expression whose value goes where neither the entity nor a class of the file may."""
        if self._is_entity(node):
            self._entity_escape(node, context)
            self._inner(node)
            return
        cls = type(node)
        if cls is _Name:
            if node.id in self.class_methods and type(node.ctx) is _Load:
                self._class_escape(node, context)
        elif cls is _Constant or cls is _Lambda:
            pass  # a lambda is a unit of its own
        elif cls is _Attribute:
            self._attribute(node)
        elif cls is _Call:
            self._call(node)
        elif cls is _Compare:
            self._allowed(node.left)
            for comparator in node.comparators:
                self._allowed(comparator)
        elif cls is _UnaryOp:
            if type(node.op) is ast.Not:
                self._allowed(node.operand)
            else:
                self._value(node.operand, "used in arithmetic")
        elif cls is _BoolOp:
            for value in node.values:
                self._value(value, context)
        elif cls is _IfExp:
            self._allowed(node.test)
            self._value(node.body, context)
            self._value(node.orelse, context)
        elif cls is _NamedExpr:
            self._value(node.value, f"assigned to {node.target.id}")
        elif cls in _COMPREHENSION_TYPES:
            for generator in node.generators:
                self._iteration(generator.target, generator.iter)
                for condition in generator.ifs:
                    self._allowed(condition)
            for part in (node.key, node.value) if cls is _DictComp else (node.elt,):
                self._value(part, "collected by a comprehension")
        elif cls is _List or cls is _Tuple or cls is _Set:
            kind = "a list" if cls is _List else "a tuple" if cls is _Tuple else "a set"
            for element in node.elts:
                self._value(element, f"put into {kind}")
        elif cls is _Dict:
            for key, value in zip(node.keys, node.values):
                if key is None:
                    self._value(value, "unpacked with **")
                else:
                    self._value(key, "put into a dict")
                    self._value(value, "put into a dict")
        elif cls is _Starred:
            self._value(node.value, "unpacked with *")
        elif cls is _Await:
            self._value(node.value, "awaited")
        elif cls is _Subscript:
            self._object(node.value, "indexed")
            self._value(node.slice, "used as an index")
        elif cls is _BinOp:
            self._value(node.left, "used in arithmetic")
            self._value(node.right, "used in arithmetic")
        else:  # f-strings, slices, ...
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self._value(child, "formatted into a string" if cls is ast.JoinedStr else "used in an expression")

    def _attribute(self, node: ast.Attribute) -> None:
        value, attr = node.value, node.attr
        if self._is_entity(value):
            self.entity_bases.add(id(node))
            by_name = type(value) is _Name and value.id == self.entity
            problem = _entity_attribute_problem(_shown(value), attr, type(node.ctx), None if by_name else self.entity)
            if problem is not None:
                self.scanner.found(STEP_ENTITY, node, AST_ENTITY_ATTR_FORBIDDEN, *problem)
            self._inner(value)
            return
        if attr in self.self_attrs and not (type(value) is _Name and value.id == self.self_name):
            self.scanner.found(
                STEP_ENTITY, node, AST_ENTITY_ATTR_FORBIDDEN, f"{_shown(node)} may hold the entity",
                f"self.{attr} is assigned the entity (line {self.self_attrs[attr]}); read it as self.{attr} "
                "in the methods of its class only",
            )
        if type(value) is _Name:
            if value.id in self.class_methods and attr in self.class_methods[value.id]:
                self.scanner.found(
                    STEP_BANNED, node, AST_BANNED_ATTR, f"Access to {value.id}.{attr} is not allowed",
                    f"{attr} is a method: call it on an instance (self.{attr}(...)); read through the "
                    "class it would run on whatever object is passed as self",
                )
            return
        self._value(value, "used in an expression")

    def _call(self, node: ast.Call) -> None:
        func = node.func
        func_cls = type(func)
        callee = f"{_shown(func)}()"
        if self._is_entity(func):
            self._entity_escape(func, "called")
            self._inner(func)
        elif func_cls is _Attribute:
            self._attribute(func)
        elif func_cls is not _Name and func_cls is not _Lambda:
            self._value(func, "called")
        # Builtins and module functions may receive a class (list(Mode), isinstance(x, Helper)):
        # they cannot reach its methods by name.
        trusted = (func_cls is _Name and func.id in _BUILTINS and func.id not in self.shadowed) or (
            func_cls is _Attribute and type(func.value) is _Name and func.value.id in self.module_aliases
        )
        index: int | None = 0
        for argument in node.args:
            if type(argument) is _Starred:
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

    def _argument(self, call: ast.Call, argument: ast.AST, index: int | None, keyword: str | None,
                  callee: str, trusted: bool) -> None:
        if self._is_entity(argument):
            func = call.func
            targets = self._callees(func)
            undefined = type(func) is _Name and func.id not in self.shadowed and func.id not in _BUILTINS
            if targets is None and not undefined:  # an undefined function is step 9's finding
                self._entity_escape(argument, f"passed to {callee}, which the gatekeeper cannot follow")
            for function, offset in targets or ():
                param = _parameter_for(function.args, index, offset, keyword)
                if param is None:
                    self._entity_escape(argument, f"passed to {callee} where no named parameter receives it")
                elif param not in self.taint[function]:
                    self.taint[function].add(param)
                    self._enqueue(function)
            self._inner(argument)
        elif type(argument) is _Name:
            if argument.id in self.class_methods and not trusted:
                self._class_escape(argument, f"passed to {callee}")
        else:
            self._value(argument, f"passed to {callee}")

    def _callees(self, func: ast.AST) -> list[tuple[ast.AST, int]] | None:
        """The functions of the file a call may run, each with how many leading parameters are
        bound already (self), or None when the call may run something else."""
        cls = type(func)
        if cls is _Lambda:
            return [(func, 0)]
        if cls is _Name:
            name = func.id
            if name in self.other_bindings:
                return None
            if name in self.functions:
                return [(function, 0) for function in self.functions[name]]
            if name in self.classes:
                inits = self._inits(name, set())
                return [(init, 1) for init in inits] if inits else None
            return None
        if cls is _Attribute and type(func.value) is _Name and func.value.id == self.self_name is not None:
            if func.attr in self.scanner.self_stored_attrs or func.attr not in self.methods:
                return None
            return [(method, 1) for method in self.methods[func.attr]]
        return None


# ---------------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------------


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Names bound to allowed modules by top-level 'import X [as Y]' (used before the scan)."""
    aliases: dict[str, str] = {}
    for statement in tree.body:
        if type(statement) is _Import:
            for alias in statement.names:
                name = alias.name
                if name in _ALLOWED_MODULES and name != "__future__":
                    aliases[alias.asname if alias.asname else name] = name
    return aliases


def _has_future_annotations(tree: ast.Module) -> bool:
    for statement in tree.body:
        if (
            type(statement) is _ImportFrom
            and statement.module == "__future__"
            and any(alias.name == "annotations" for alias in statement.names)
        ):
            return True
    return False


def _syntax_message(error: SyntaxError) -> str:
    where = f"line {error.lineno}" if error.lineno else "unknown line"
    if error.offset:
        where += f", col {error.offset}"
    text = (error.text or "").strip()
    shown = f": {text[:80]}" if text else ""
    return f"{error.msg} ({where}){shown}"


_OK_LINES = {
    step: f"{step}: OK"
    for step in (
        STEP_SCHEMA, STEP_PARSE, STEP_IMPORTS, STEP_BANNED, STEP_CONTRACT, STEP_ENTITY, STEP_INIT,
        STEP_UNBOUND, STEP_AWAIT,
    )
}


class _Run:
    """Accumulates the log of one validation."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def ok(self, step: str, detail: str = "") -> None:
        self.log.append(f"{step}: OK — {detail}" if detail else _OK_LINES[step])

    def fail(
        self, step: str, code: str, message: str, class_name: str | None = None, code_hash: str | None = None
    ) -> GateResult:
        self.log.append(f"{step}: FAILED — {message}")
        return GateResult(False, code, self.log, class_name, code_hash)


# The cyclic GC paused while a validation runs: the parser allocates a few thousand nodes per
# trait, enough to trigger young-generation collections (and, in a small heap, full ones) that
# cost ~25% of ast.parse, while the tree and the walk's state are acyclic and freed by reference
# counting. Paused for the whole process (one switch), by counting so concurrent validations in
# threads resume it only when the last one ends, and never resumed if the caller had paused it.
_GC_LOCK = threading.Lock()
_gc_pauses = 0
_gc_resume = False


def _pause_gc() -> None:
    global _gc_pauses, _gc_resume
    with _GC_LOCK:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1


def _resume_gc() -> None:
    global _gc_pauses
    with _GC_LOCK:
        _gc_pauses -= 1
        if _gc_pauses == 0 and _gc_resume:
            gc.enable()


def _check_escapes(tree: ast.Module, trait: _Trait | None, scanner: _Scanner) -> None:
    """The escape analysis when the scan calls for it, then the verdict on stores into attributes
    of objects other than self: refused unless the object is the entity. Without a trait class
    step 6 rejects the code anyway, with the more useful message."""
    entity_bases: set[int] = set()
    if scanner.needs_escape_analysis or (
        trait is not None and scanner.entity_uses and not _entity_uses_are_direct(scanner, trait)
    ):
        escapes = _Escapes(tree, trait, scanner)
        escapes.run()
        entity_bases = escapes.entity_bases
    for node in scanner.pending_stores if trait is not None else ():
        if id(node) not in entity_bases:
            verb = "assign" if type(node.ctx) is _Store else "delete"
            scanner.found(
                STEP_BANNED, node, AST_BANNED_ATTR,
                f"Cannot {verb} the attribute {node.attr} of {_shown(node.value)}", _STORE_HINT,
            )


_TOO_DEEP = f"the code is nested too deeply to analyse (limit: {MAX_NESTING} levels); flatten it"


def validate(trait_name: str, code: str) -> GateResult:
    """Run steps 2-10 in order and stop at the first failure."""
    _pause_gc()
    try:
        return _validate(trait_name, code)
    finally:
        _resume_gc()


def _validate(trait_name: str, code: str) -> GateResult:
    run = _Run()
    problems = schema_problems(trait_name, code)
    if problems:
        return run.fail(STEP_SCHEMA, SCHEMA_INVALID, "; ".join(problems))
    run.ok(STEP_SCHEMA)

    try:
        tree = ast.parse(code, filename="<trait>", feature_version=rules.trait_language())
    except SyntaxError as error:
        message = _syntax_message(error)
        if "only supported in Python" in message:
            message += "; traits are written in Python %d.%d (the trait runtime's language)" % rules.trait_language()
        return run.fail(STEP_PARSE, SYNTAX_ERROR, message)
    except (RecursionError, MemoryError):  # the parser's own depth limits (MemoryError: its stack)
        return run.fail(STEP_PARSE, SYNTAX_ERROR, _TOO_DEEP)
    except ValueError as error:
        return run.fail(STEP_PARSE, SYNTAX_ERROR, f"the code cannot be parsed: {error}")

    trait, no_trait_reason = _find_trait(tree)
    scanner = _Scanner(trait, _module_aliases(tree), _module_classes(tree))
    try:
        scanner.visit(tree)
        _check_escapes(tree, trait, scanner)
    except (_TooDeep, RecursionError):
        return run.fail(STEP_PARSE, SYNTAX_ERROR, _TOO_DEEP)
    code_hash = scanner.digest()
    findings = scanner.findings

    def failed(step: str, class_name: str | None = None) -> GateResult:
        _, code, message = findings[step]
        return run.fail(step, code, message, class_name, code_hash)

    if STEP_PARSE in findings:
        return failed(STEP_PARSE)
    run.ok(STEP_PARSE)
    if STEP_IMPORTS in findings:
        return failed(STEP_IMPORTS)
    run.ok(STEP_IMPORTS)
    if STEP_BANNED in findings:
        return failed(STEP_BANNED)
    run.ok(STEP_BANNED)

    if trait is None:
        return run.fail(STEP_CONTRACT, AST_NO_TRAIT_CLASS, no_trait_reason, None, code_hash)
    class_name = trait.node.name
    run.ok(STEP_CONTRACT, class_name)

    if STEP_ENTITY in findings:
        return failed(STEP_ENTITY, class_name)
    run.ok(STEP_ENTITY)

    init_problem = _init_problem(tree, trait.node)
    if init_problem is not None:
        return run.fail(STEP_INIT, AST_INIT_REQUIRED_ARGS, init_problem, class_name, code_hash)
    run.ok(STEP_INIT)

    try:
        _FlowChecker(scanner, _has_future_annotations(tree)).check_module(tree)
    except _Unbound as unbound:
        return run.fail(STEP_UNBOUND, AST_UNBOUND_VARIABLE, unbound.message, class_name, code_hash)
    except (_TooDeep, RecursionError):
        return run.fail(STEP_UNBOUND, AST_UNBOUND_VARIABLE, _TOO_DEEP, class_name, code_hash)
    run.ok(STEP_UNBOUND)

    if STEP_AWAIT in findings:
        return failed(STEP_AWAIT, class_name)
    run.ok(STEP_AWAIT)
    return GateResult(True, None, run.log, class_name, code_hash)
