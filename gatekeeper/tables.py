"""The gatekeeper's rules as data: what it allows and refuses, its limits, and the words it uses.

The lists that agents and the sandbox also read (allowed imports, banned names and attributes,
allowed builtins, refused module names, the size limit, the trait name pattern) are the sandbox
rules contract in ``genesis/rules.py`` and the entity API in ``genesis/entity_api.py``; this
module holds the forms the checks look them up in, plus what only the gatekeeper needs: the step
names of the validation log, the failure codes, the hints its messages end with, and the bounds
of its own analysis.
"""

from __future__ import annotations

import re
from ast import (
    Assert,
    AsyncFor,
    AsyncWith,
    ClassDef,
    Delete,
    Expr,
    For,
    Global,
    If,
    Match,
    Nonlocal,
    Raise,
    Return,
    Try,
    While,
    With,
    Yield,
    YieldFrom,
)

from genesis import entity_api, rules
from genesis.dto import FailureCode

# -- the steps, in pipeline order, as they appear in the validation log -----------------------

STEP_SCHEMA = "Schema"
STEP_PARSE = "AST parse"
STEP_IMPORTS = "Import whitelist"
STEP_BANNED = "Banned calls/attrs"
STEP_CONTRACT = "Trait contract"
STEP_ENTITY = "Entity attribute whitelist"
STEP_INIT = "Init signature"
STEP_UNBOUND = "Unbound variables"
STEP_AWAIT = "Await-on-sync"
STEPS = (
    STEP_SCHEMA,
    STEP_PARSE,
    STEP_IMPORTS,
    STEP_BANNED,
    STEP_CONTRACT,
    STEP_ENTITY,
    STEP_INIT,
    STEP_UNBOUND,
    STEP_AWAIT,
)

# -- failure codes (defined once, in genesis.dto.FailureCode; plain strings here) -------------

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

# -- the sandbox rules, as the checks look them up --------------------------------------------

TRAIT_NAME = re.compile(rules.TRAIT_NAME_PATTERN)
MAX_CODE_BYTES = rules.MAX_CODE_BYTES
ALLOWED_MODULES = frozenset(rules.ALLOWED_IMPORTS)
ALLOWED_MODULES_TEXT = ", ".join(sorted(ALLOWED_MODULES))
MODULE_NAMES = rules.ALLOWED_MODULE_NAMES  # module -> the names a trait may use
MODULE_ATTR_DENYLIST = rules.MODULE_ATTR_DENYLIST  # module -> refused public name -> why
BANNED_CALLS = rules.BANNED_CALLS  # names that may not appear at all
BANNED_EXCEPTIONS = rules.BANNED_EXCEPTION_NAMES
SUSPECT_NAMES = BANNED_CALLS | BANNED_EXCEPTIONS
BANNED_ATTRS = rules.BANNED_ATTRS  # refused on any object, besides every '_'-prefixed attribute
BUILTINS = rules.ALLOWED_BUILTINS
TRAIT_BASES = frozenset(rules.TRAIT_BASE_NAMES)

# The entity API: what ``entity.<name>`` may read, call and assign.
ENTITY_NAMES = entity_api.allowed_entity_names()
ENTITY_WRITABLE = frozenset(entity_api.WRITABLE_ATTRS)
WRITABLE_TEXT = ", ".join(sorted(ENTITY_WRITABLE))

# A string literal naming a special attribute ('__eq__'): dictionaries handed to enum.Enum(),
# class factories or update_wrapper define or reach special methods by name.
DUNDER = re.compile(r"__\w+__")

# -- bounds of the analysis -------------------------------------------------------------------

# The deepest nesting of the tree the analysis follows; deeper code is a SYNTAX_ERROR. Every
# recursive walk counts its depth against this bound, so the verdict on deeply nested code is the
# same whatever the caller's recursion limit and stack; real traits nest a few dozen levels.
MAX_NESTING = 400
TOO_DEEP = f"the code is nested too deeply to analyse (limit: {MAX_NESTING} levels); flatten it"

# Units the escape analysis walks before it gives up (per unit of the file): ample for real code,
# a bound for code built to make it run long.
MAX_WALKS_PER_UNIT = 20

# -- hints: how to fix what was refused -------------------------------------------------------

NAME_HINTS = {
    "eval": "code must be static",
    "exec": "code must be static",
    "compile": "code must be static",
    "print": "traits have no console; expose a label through entity.state instead",
    "open": "traits have no file system",
    "__import__": "use a plain import of an allowed module",
    "getattr": "access attributes directly (obj.name)",
    "setattr": "assign attributes directly (obj.name = value)",
    "hasattr": "access attributes directly (obj.name)",
    "delattr": "attributes cannot be deleted by name",
    "type": "use isinstance()",
    "super": "the BaseTrait stub has nothing to initialise; drop the super() call",
    "classmethod": "use plain methods",
    "staticmethod": "use plain methods",
    "property": "use plain methods",
    "globals": "introspection is not available",
    "locals": "introspection is not available",
    "vars": "introspection is not available",
    "dir": "introspection is not available",
}
DEFAULT_NAME_HINT = "it is a banned builtin; if this is your own variable, choose another name"
FRAME_HINT = "frame, generator, coroutine and code introspection is not available"
ATTR_HINTS = {
    "format": "use an f-string instead of str.format",
    "format_map": "use an f-string instead of str.format_map",
    "obj": "exception objects may not hand out other objects",
    "mro": "class introspection is not available",
}
DEADLINE_HINT = "it would swallow the sandbox's deadline signal; catch Exception or a specific error"
MODULE_CODE_HINT = (
    "the module may only hold imports, classes, functions and constant assignments; move the code into a method"
)
CLASS_CODE_HINT = "class bodies may only hold methods, docstrings, pass and constant assignments"
ENTITY_USE_HINT = (
    "use the entity only as entity.<attribute>, entity.<method>(...), a plain name (e = entity), in a "
    "comparison, or as an argument of a function or method defined in the trait (its parameter is then "
    "checked as the entity); anywhere else the gatekeeper cannot check what is done with it"
)
CLASS_USE_HINT = (
    "a class defined in the trait may be instantiated, subclassed, named in annotations, compared, "
    "iterated, passed to builtins and module functions, and read for its constants; keep instances "
    "rather than classes in variables"
)
STORE_HINT = (
    "only attributes of self (the first parameter of a method, never rebound) and the entity's writable "
    "attributes may be assigned or deleted; other objects, classes and objects of modules in particular, "
    "may be shared with other traits"
)
NO_TRAIT_CLASS = (
    "No trait class found: define the stub 'class BaseTrait: pass' in the file and a class "
    "inheriting from it with 'async def execute(self, entity) -> None'"
)

# Statements refused wherever they are: (problem, hint).
REFUSED_STATEMENTS = {
    Global: ("'global' is not allowed", "keep state on self instead"),
    Nonlocal: ("'nonlocal' is not allowed", "keep state on self instead"),
    Match: ("'match' statements are not allowed", "class patterns read attributes named in strings; use if/elif"),
    Yield: ("'yield' is not allowed", "generators expose their frames; build and return a list"),
    YieldFrom: ("'yield from' is not allowed", "generators expose their frames; build and return a list"),
}

# How a refused statement at module or class level is named in its message.
STATEMENT_NAMES = {
    For: "a for loop",
    AsyncFor: "an async for loop",
    While: "a while loop",
    If: "an if statement",
    Try: "a try statement",
    With: "a with statement",
    AsyncWith: "an async with statement",
    Expr: "an expression statement",
    Return: "a return statement",
    Delete: "a del statement",
    Raise: "a raise statement",
    Assert: "an assert statement",
    ClassDef: "a nested class",
}
