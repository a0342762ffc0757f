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

SANDBOX_RULES_VERSION = "6"  # 6: each allowed module's names listed explicitly (ALLOWED_MODULE_NAMES)

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


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The names of each allowed module a trait may use: an explicit, reviewed list, never what an
# interpreter happens to define (a bugfix release can add a public name, as 3.11.7 added
# enum.pickle_by_enum_name, which hands out the builtin getattr). Anything not listed is refused.
# tests/unit/test_module_names.py fails when an allowed module of an installed CPython 3.11
# defines a public name that is neither here nor in MODULE_ATTR_DENYLIST: a review is due.
ALLOWED_MODULE_NAMES: dict[str, frozenset[str]] = {
    "__future__": _names(
        "nested_scopes generators division absolute_import with_statement print_function "
        "unicode_literals barry_as_FLUFL generator_stop annotations"
    ),
    "math": _names(
        "acos acosh asin asinh atan atan2 atanh cbrt ceil comb copysign cos cosh degrees dist e erf "
        "erfc exp exp2 expm1 fabs factorial floor fmod frexp fsum gamma gcd hypot inf isclose "
        "isfinite isinf isnan isqrt lcm ldexp lgamma log log10 log1p log2 modf nan nextafter perm pi "
        "pow prod radians remainder sin sinh sqrt tan tanh tau trunc ulp"
    ),
    "random": _names(
        "BPF LOG4 NV_MAGICCONST RECIP_BPF Random SG_MAGICCONST SystemRandom TWOPI betavariate choice "
        "choices expovariate gammavariate gauss getrandbits getstate lognormvariate normalvariate "
        "paretovariate randbytes randint random randrange sample shuffle triangular uniform "
        "vonmisesvariate weibullvariate"
    ),
    "dataclasses": _names(
        "Field FrozenInstanceError GenericAlias InitVar KW_ONLY MISSING asdict astuple field fields "
        "is_dataclass replace"
    ),
    "typing": _names(
        "AbstractSet Annotated Any AnyStr AsyncContextManager AsyncGenerator AsyncIterable "
        "AsyncIterator Awaitable BinaryIO ByteString CT_co Callable ChainMap ClassVar Collection "
        "Concatenate Container ContextManager Coroutine Counter DefaultDict Deque Dict Final "
        "FrozenSet Generator Generic GenericAlias Hashable IO ItemsView Iterable Iterator KT KeysView "
        "List Literal LiteralString Mapping MappingView Match MethodDescriptorType MethodWrapperType "
        "MutableMapping MutableSequence MutableSet NamedTuple Never NewType NoReturn NotRequired "
        "Optional OrderedDict ParamSpec ParamSpecArgs ParamSpecKwargs Pattern Protocol Required "
        "Reversible Self Sequence Set Sized SupportsAbs SupportsBytes SupportsComplex SupportsFloat "
        "SupportsIndex SupportsInt SupportsRound T TYPE_CHECKING T_co T_contra Text TextIO Tuple Type "
        "TypeAlias TypeGuard TypeVar TypeVarTuple TypedDict Union Unpack VT VT_co V_co ValuesView "
        "WrapperDescriptorType abstractmethod assert_never assert_type cast defaultdict get_args "
        "get_origin is_typeddict"
    ),
    "enum": _names(
        "CONFORM CONTINUOUS EJECT Enum EnumCheck Flag FlagBoundary IntEnum IntFlag KEEP "
        "MappingProxyType NAMED_FLAGS ReprEnum STRICT StrEnum UNIQUE auto bin member nonmember reduce "
        "show_flag_values unique verify"
    ),
    "collections": _names("ChainMap Counter OrderedDict UserDict UserList UserString defaultdict deque namedtuple"),
    "functools": _names(
        "GenericAlias RLock WRAPPER_ASSIGNMENTS WRAPPER_UPDATES cache cmp_to_key get_cache_token "
        "lru_cache namedtuple partial partialmethod reduce"
    ),
    "itertools": _names(
        "accumulate chain combinations combinations_with_replacement compress count cycle dropwhile "
        "filterfalse groupby islice pairwise permutations product repeat starmap takewhile tee "
        "zip_longest"
    ),
}

# Public names of allowed modules that are refused, with the reason (shown to agents). They
# evaluate strings as code, copy attributes by name, build functions from code objects, make
# attribute access run code, change the object they are given in place (a class of a module is
# shared by every trait in the process), keep process-wide registries, reach other modules'
# namespaces, or reseed the RNG that traits in a process share. Modules themselves (typing.sys,
# enum.bltns) are never names a trait may use.
_CLASS_FACTORY = "creates classes from a dictionary of members, like type()"
_IN_PLACE = "changes the class or function it is given in place, which may be shared with other traits"
_REGISTRY = "reads or changes a registry shared by every trait in the process"
_DESCRIPTOR = "is a descriptor: attribute access would run code, like property"
_OTHER_MODULES = "reads or writes another module's namespace"
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
        "io": "is a deprecated namespace of other names; import those names from typing",
        "re": "is a deprecated namespace of other names; import those names from typing",
    },
    "enum": {
        "EnumMeta": _CLASS_FACTORY,
        "EnumType": _CLASS_FACTORY,
        "global_enum": _OTHER_MODULES,
        "global_enum_repr": _OTHER_MODULES,
        "global_flag_repr": _OTHER_MODULES,
        "global_str": _OTHER_MODULES,
        "pickle_by_enum_name": "hands out the builtin getattr (pickling support)",
        "pickle_by_global_name": "pickling support that names objects of other modules",
        "property": _DESCRIPTOR,
        "DynamicClassAttribute": _DESCRIPTOR,
    },
    "functools": {
        "singledispatch": "evaluates annotation strings as code",
        "singledispatchmethod": "evaluates annotation strings as code",
        "update_wrapper": "copies attributes named by strings",
        "wraps": "copies attributes named by strings",
        "recursive_repr": "copies attributes named by strings",
        "total_ordering": _IN_PLACE,
        "cached_property": _DESCRIPTOR,
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
# Loops are bounded by time, not by count: every call has TIMEOUT_MS of CPU, loops, comprehensions
# and recursion included. A count would add a cost to every iteration and refuse a trait that looks
# at more than so many neighbours in a crowded world, which its sandbox test could not foresee; the
# sandbox-api document says so (``max_loop_iterations`` null, ``loop_bound``).
LOOP_BOUND = f"none by count: every call of execute() has {TIMEOUT_MS} ms of CPU, loops included"
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
        "max_loop_iterations": None,
        "no_module_level_code": True,
        "example": TRAIT_EXAMPLE,
        # Extras beyond the seed.
        "loop_bound": LOOP_BOUND,
        "max_code_bytes": MAX_CODE_BYTES,
        "max_intents_per_call": MAX_INTENTS_PER_CALL,
        "trait_name_pattern": TRAIT_NAME_PATTERN,
        "allowed_builtins": sorted(ALLOWED_BUILTINS),
        "allowed_module_names": {module: sorted(names) for module, names in ALLOWED_MODULE_NAMES.items()},
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
