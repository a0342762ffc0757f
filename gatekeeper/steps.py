"""The validation pipeline, steps 2-10 in order: schema, parse, then one scan of the tree whose
findings decide steps 3-5, 7 and 10, the trait contract (6), the init signature (8) and the
unbound-variable pass (9). Validation stops at the first failing step and reports every step
that ran in the log.

Pure: no I/O, and the submitted code is never executed."""

from __future__ import annotations

import ast
import gc
import threading
from dataclasses import dataclass

from gatekeeper.contract import find_trait, init_problem
from gatekeeper.escapes import check_escapes
from gatekeeper.flow import FlowChecker, Unbound, has_future_annotations
from gatekeeper.imports import module_aliases
from gatekeeper.nodes import TooDeep, module_classes
from gatekeeper.scan import Scanner
from gatekeeper.schema import schema_problems
from gatekeeper.tables import (
    AST_INIT_REQUIRED_ARGS,
    AST_NO_TRAIT_CLASS,
    AST_UNBOUND_VARIABLE,
    SCHEMA_INVALID,
    STEP_AWAIT,
    STEP_BANNED,
    STEP_CONTRACT,
    STEP_ENTITY,
    STEP_IMPORTS,
    STEP_INIT,
    STEP_PARSE,
    STEP_SCHEMA,
    STEP_UNBOUND,
    STEPS,
    SYNTAX_ERROR,
    TOO_DEEP,
)
from genesis import rules


@dataclass(frozen=True)
class GateResult:
    ok: bool
    failure_code: str | None  # None when ok
    validation_log: list[str]  # one line per step that ran
    class_name: str | None  # the trait class (once step 6 passed)
    code_hash: str | None  # sha256 of the normalised AST (comments/formatting ignored)


_OK_LINES = {step: f"{step}: OK" for step in STEPS}


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


def _syntax_message(error: SyntaxError) -> str:
    where = f"line {error.lineno}" if error.lineno else "unknown line"
    if error.offset:
        where += f", col {error.offset}"
    text = (error.text or "").strip()
    shown = f": {text[:80]}" if text else ""
    return f"{error.msg} ({where}){shown}"


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
        return run.fail(STEP_PARSE, SYNTAX_ERROR, TOO_DEEP)
    except ValueError as error:
        return run.fail(STEP_PARSE, SYNTAX_ERROR, f"the code cannot be parsed: {error}")

    trait, no_trait_reason = find_trait(tree)
    scanner = Scanner(trait, module_aliases(tree), module_classes(tree))
    try:
        scanner.visit(tree)
        check_escapes(tree, trait, scanner)
    except (TooDeep, RecursionError):
        return run.fail(STEP_PARSE, SYNTAX_ERROR, TOO_DEEP)
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

    problem = init_problem(tree, trait.node)
    if problem is not None:
        return run.fail(STEP_INIT, AST_INIT_REQUIRED_ARGS, problem, class_name, code_hash)
    run.ok(STEP_INIT)

    try:
        FlowChecker(scanner, has_future_annotations(tree)).check_module(tree)
    except Unbound as unbound:
        return run.fail(STEP_UNBOUND, AST_UNBOUND_VARIABLE, unbound.message, class_name, code_hash)
    except (TooDeep, RecursionError):
        return run.fail(STEP_UNBOUND, AST_UNBOUND_VARIABLE, TOO_DEEP, class_name, code_hash)
    run.ok(STEP_UNBOUND)

    if STEP_AWAIT in findings:
        return failed(STEP_AWAIT, class_name)
    run.ok(STEP_AWAIT)
    return GateResult(True, None, run.log, class_name, code_hash)
