"""Sandbox rules v3: what submitted trait code may contain.

One source of truth for the AST gatekeeper (``gatekeeper/``), the sandbox and
``GET /api/agents/context/sandbox-api``. Bump ``SANDBOX_RULES_VERSION`` whenever the imports,
banned names/attributes, entity API, timeout or the ``execute`` signature change, so agents
that cache the rules refresh them.

The gatekeeper is the first line only; the boundary is the sandbox container (DESIGN.md,
"Untrusted code never runs in a trusted process"). Its own data (messages, hints, the bounds of
its analysis) is in ``gatekeeper/tables.py``.
"""

from __future__ import annotations

from typing import Any

from genesis import entity_api

SANDBOX_RULES_VERSION = "5"  # 5: one runtime (CPython 3.11), at most 16 intents per call, entity aliases,
# stores outside self, in-place class changers

# The Python language traits are written in: the one trait runtime's (CPython 3.11, in the
# sandbox test and live). The gatekeeper parses at this level and sandbox/image.py checks the
# runtime really speaks it.
TRAIT_LANGUAGE = (3, 11)

# A call that records more intents than this fails (an error of the trait, like an exception).
MAX_INTENTS_PER_CALL = 16


def trait_language() -> tuple[int, int]:
    return TRAIT_LANGUAGE


# Modules a trait may import (seed order). Only the module itself, never a submodule.
ALLOWED_IMPORTS: tuple[str, ...] = (
    "__future__",
    "math",
    "random",
    "dataclasses",
    "typing",
    "enum",
    "collections",
    "functools",
    "itertools",
)

# Examples shown to agents; anything not in ALLOWED_IMPORTS is forbidden.
FORBIDDEN_IMPORTS_EXAMPLES: tuple[str, ...] = ("os", "sys", "subprocess", "socket", "shutil", "backend")

# Public, non-module names of allowed modules that are still refused, with the reason.
# They evaluate strings as code, copy attributes by name, build functions from code objects,
# change the object they are given in place (a class of a module is shared by every trait in
# the process), keep process-wide registries, or reseed the RNG that traits in a process share.
_CLASS_FACTORY = "creates classes from a dictionary of members, like type()"
_IN_PLACE = "changes the class or function it is given in place, which may be shared with other traits"
_REGISTRY = "reads or changes a registry shared by every trait in the process"
MODULE_ATTR_DENYLIST: dict[str, dict[str, str]] = {
    "typing": {
        "get_type_hints": "evaluates annotation strings as code",
        "ForwardRef": "holds code that get_type_hints would evaluate",
        "ABCMeta": _CLASS_FACTORY,
        "NamedTupleMeta": _CLASS_FACTORY,
        "EXCLUDED_ATTRIBUTES": "is a mutable list shared by every user of typing",
        "final": _IN_PLACE,
        "no_type_check": _IN_PLACE,
        "no_type_check_decorator": _IN_PLACE,
        "runtime_checkable": _IN_PLACE,
        "dataclass_transform": _IN_PLACE,
        "overload": _REGISTRY,
        "get_overloads": _REGISTRY,
        "clear_overloads": _REGISTRY,
        "reveal_type": "writes to the process's error output; traits have no console",
    },
    "enum": {
        "EnumMeta": _CLASS_FACTORY,
        "EnumType": _CLASS_FACTORY,
        "global_enum": "writes the members into another module's namespace",
    },
    "functools": {
        "singledispatch": "evaluates annotation strings as code",
        "singledispatchmethod": "evaluates annotation strings as code",
        "update_wrapper": "copies attributes named by strings",
        "wraps": "copies attributes named by strings",
        "total_ordering": _IN_PLACE,
    },
    "dataclasses": {
        "FunctionType": "builds functions from code objects",
        "make_dataclass": _CLASS_FACTORY,
        "dataclass": _IN_PLACE,
    },
    "random": {
        "seed": "reseeds the random generator shared with other traits; use random.Random(seed)",
        "setstate": "rewinds the random generator shared with other traits",
    },
}

# Names that may not appear at all (as a call, a reference, or a binding of your own).
BANNED_CALLS: frozenset[str] = frozenset(
    {
        # seed
        "eval",
        "exec",
        "compile",
        "open",
        "__import__",
        "print",
        "globals",
        # introspection and attribute access by string
        "locals",
        "vars",
        "dir",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "type",
        "super",
        "memoryview",
        # descriptors: make attribute access run code
        "classmethod",
        "staticmethod",
        "property",
        # interpreter and terminal
        "input",
        "breakpoint",
        "help",
        "exit",
        "quit",
        "copyright",
        "credits",
        "license",
        "__build_class__",
    }
)

# Exception classes a trait may not name: the host's deadline/kill signals derive from
# BaseException and must never be caught (``except:`` is banned for the same reason).
BANNED_EXCEPTION_NAMES: frozenset[str] = frozenset(
    {
        "BaseException",
        "BaseExceptionGroup",
        "SystemExit",
        "KeyboardInterrupt",
        "GeneratorExit",
    }
)

# Attributes that are refused on any object. Every ``_``-prefixed attribute is refused as well.
BANNED_ATTRS: frozenset[str] = frozenset(
    {
        # seed
        "__subclasses__",
        "__globals__",
        "__code__",
        "__builtins__",
        "__dict__",
        # frames, generators, coroutines, async generators, tracebacks, code objects, cells
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "gi_running",
        "gi_suspended",
        "cr_frame",
        "cr_code",
        "cr_await",
        "cr_origin",
        "cr_running",
        "cr_suspended",
        "ag_frame",
        "ag_code",
        "ag_await",
        "ag_running",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "f_trace",
        "f_lasti",
        "f_lineno",
        "tb_frame",
        "tb_next",
        "tb_lasti",
        "tb_lineno",
        "co_code",
        "co_consts",
        "co_names",
        "co_varnames",
        "co_filename",
        "co_lines",
        "co_positions",
        "cell_contents",
        # attribute traversal driven by strings and objects handed out by exceptions
        "format",
        "format_map",
        "obj",
        "mro",
    }
)

# Builtins a trait may use. Anything else (and anything not defined in the trait) is an
# undefined name.
ALLOWED_BUILTINS: frozenset[str] = frozenset(
    {
        "abs",
        "all",
        "any",
        "bin",
        "bool",
        "bytes",
        "callable",
        "chr",
        "complex",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "frozenset",
        "hash",
        "hex",
        "int",
        "isinstance",
        "issubclass",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "next",
        "object",
        "oct",
        "ord",
        "pow",
        "range",
        "repr",
        "reversed",
        "round",
        "set",
        "slice",
        "sorted",
        "str",
        "sum",
        "tuple",
        "zip",
        "NotImplemented",
        "Ellipsis",
        # exceptions a trait may raise or catch
        "ArithmeticError",
        "AssertionError",
        "AttributeError",
        "Exception",
        "FloatingPointError",
        "IndexError",
        "KeyError",
        "LookupError",
        "NotImplementedError",
        "OverflowError",
        "RuntimeError",
        "StopIteration",
        "TypeError",
        "ValueError",
        "ZeroDivisionError",
    }
)

TIMEOUT_MS = 5
MAX_LOOP_ITERATIONS = 100
MAX_CODE_BYTES = 32 * 1024
TRAIT_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"

# Base class names that mark a trait class (the stub is defined inline in the submission).
TRAIT_BASE_NAMES: tuple[str, ...] = ("BaseTrait", "Trait")

TRAIT_PATTERN = "define class BaseTrait stub inline, then inherit from it"
REQUIRED_METHOD = "async execute(self, entity) -> None"

TRAIT_EXAMPLE = (
    "class BaseTrait:\n"
    "    pass\n"
    "\n"
    "class MyTrait(BaseTrait):\n"
    "    async def execute(self, entity) -> None:\n"
    "        if entity.energy < 30:\n"
    "            entity.energy_consumption_rate *= 0.8"
)

# Human descriptions of the hardening rules, for agents (sandbox-api ``banned_constructs``).
BANNED_CONSTRUCTS: tuple[str, ...] = (
    "module level: only docstrings, imports, class/function definitions and constant "
    "assignments (no calls, loops or other code that runs on load)",
    "class bodies: only docstrings, method definitions, pass and constant assignments",
    "class keywords such as metaclass=...; class bases other than plain names",
    "decorators",
    "special methods other than __init__ (e.g. __init_subclass__, __getattr__, __eq__, __del__)",
    "names and attributes starting with '_' (the throwaway name '_' itself is fine)",
    "string literals naming special attributes such as '__eq__' (they define or reach special "
    "methods through dictionaries)",
    "an imported module used other than as module.public_name (no aliasing or passing it around)",
    "module attributes that are modules themselves (typing.sys, enum.bltns, dataclasses.inspect)",
    "assigning to attributes of imported modules or of objects imported from them",
    "assigning or deleting attributes of anything but self (a method's first parameter, which may not "
    "be rebound) and the entity's writable attributes",
    "the entity used other than as entity.<name>, a plain alias (e = entity, a, b = entity, 1, "
    "(e := entity), for e in (entity,)), a comparison, or an argument of a function, method or class "
    "defined in the trait: aliases and the parameters that receive it are checked as the entity, and "
    "self.<name> once self.<name> = entity; putting it in a container, returning it or passing it to "
    "anything else is refused",
    "a class defined in the trait used as a value (aliased, stored, returned, passed to your own "
    "functions) or a method read through its class (ClassName.method): methods run on instances",
    "match statements, global, nonlocal, yield, yield from",
    "bare 'except:' and catching BaseException/SystemExit/KeyboardInterrupt/GeneratorExit",
    "default argument values other than constant literals",
    "annotations other than plain type expressions",
    "str.format / format_map (use f-strings)",
    "await on entity methods (they are synchronous)",
)

# Failure codes the gatekeeper emits, with how to fix them (seed table).
GATEKEEPER_FAILURE_CODES: dict[str, str] = {
    "SCHEMA_INVALID": "trait_name must be snake_case and code a non-empty string of at most 32 KB",
    "SYNTAX_ERROR": "fix the syntax",
    "AST_IMPORT_FORBIDDEN": "import only the allowed modules; never import from backend.*",
    "AST_BANNED_CALL": "remove banned calls and constructs",
    "AST_BANNED_ATTR": "remove access to dunder/private/introspection attributes",
    "AST_NO_TRAIT_CLASS": "add a class inheriting the inline BaseTrait stub with async execute(self, entity)",
    "AST_ENTITY_ATTR_FORBIDDEN": "use only the entity attributes and methods of the entity API",
    "AST_INIT_REQUIRED_ARGS": "give every __init__ parameter a default: traits are created without arguments",
    "AST_UNBOUND_VARIABLE": "assign every variable on every path before reading it",
    "AST_AWAIT_ON_SYNC": "remove 'await' before entity method calls",
}


def sandbox_api_document() -> dict[str, Any]:
    """The ``GET /api/agents/context/sandbox-api`` document (seed keys first, then extras)."""
    return {
        "api_version": entity_api.API_VERSION,
        "sandbox_rules_version": SANDBOX_RULES_VERSION,
        "trait_language": {
            "python": "%d.%d" % trait_language(),
            "runtime": "cpython",
            "note": "traits are parsed as this Python version and run on it, in the sandbox test and live alike",
        },
        "trait_pattern": TRAIT_PATTERN,
        "required_method": REQUIRED_METHOD,
        "allowed_imports": list(ALLOWED_IMPORTS),
        "forbidden_imports": list(FORBIDDEN_IMPORTS_EXAMPLES),
        "forbidden_calls": sorted(BANNED_CALLS | BANNED_EXCEPTION_NAMES),
        "forbidden_attrs": sorted(BANNED_ATTRS),
        "entity_allowed_attrs": sorted(entity_api.READABLE_ATTRS) + sorted(entity_api.METHODS),
        "timeout_ms": TIMEOUT_MS,
        "max_loop_iterations": MAX_LOOP_ITERATIONS,
        "no_module_level_code": True,
        "example": TRAIT_EXAMPLE,
        # Extras beyond the seed.
        "max_code_bytes": MAX_CODE_BYTES,
        "max_intents_per_call": MAX_INTENTS_PER_CALL,
        "trait_name_pattern": TRAIT_NAME_PATTERN,
        "allowed_builtins": sorted(ALLOWED_BUILTINS),
        "forbidden_module_attrs": {module: sorted(names) for module, names in sorted(MODULE_ATTR_DENYLIST.items())},
        "entity_api": entity_api.as_wire(),
        "entity_readable_attrs": {
            name: {"type": kind, "description": description}
            for name, (kind, description) in sorted(entity_api.READABLE_ATTRS.items())
        },
        "entity_writable_attrs": {
            name: {"type": kind, "min": low, "max": high}
            for name, (kind, low, high) in sorted(entity_api.WRITABLE_ATTRS.items())
        },
        "entity_methods": {
            name: {"signature": signature, "description": description}
            for name, (signature, description) in sorted(entity_api.METHODS.items())
        },
        "banned_constructs": list(BANNED_CONSTRUCTS),
        "failure_codes": dict(GATEKEEPER_FAILURE_CODES),
    }
