"""The gatekeeper for agents' round actions: the same first line as for traits (the code parses
in the trait language, imports only allowed modules, uses no banned name or attribute), and the
action's contract instead of a trait's: a top-level ``def agent_action(engine, member_id)``.

Like every check here it never runs the code; the code runs in a one-shot process of the trait
host (``sandbox/traithost/``, ``act``), which is the boundary."""

from __future__ import annotations

import ast

from gatekeeper.escapes import check_escapes
from gatekeeper.imports import module_aliases
from gatekeeper.nodes import TooDeep, module_classes
from gatekeeper.scan import Scanner
from gatekeeper.steps import GateResult
from gatekeeper.tables import MAX_CODE_BYTES, STEP_BANNED, STEP_IMPORTS, STEP_PARSE, STEP_SCHEMA, SYNTAX_ERROR, TOO_DEEP
from genesis import rules

ENTRY_POINT = "agent_action"
STEP_ACTION_CONTRACT = "Action contract"
ACTION_NO_ENTRY_POINT = "ACTION_NO_ENTRY_POINT"
ACTION_INVALID = "ACTION_INVALID"


def _entry_point_problem(tree: ast.Module) -> str | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == ENTRY_POINT:
            args = node.args
            positional = len(args.posonlyargs) + len(args.args)
            if positional != 2 or args.vararg or args.kwonlyargs or args.kwarg:
                return f"{ENTRY_POINT} must take exactly (engine, member_id)"
            return None
    return f"no top-level function {ENTRY_POINT}(engine, member_id)"


def validate_action(code: str) -> GateResult:
    """Check action code without running it; the result names the first step that failed."""
    log: list[str] = []

    def fail(step: str, failure: str, message: str, code_hash: str | None = None) -> GateResult:
        log.append(f"{step}: FAILED — {message}")
        return GateResult(False, failure, log, None, code_hash)

    if not isinstance(code, str) or not code.strip():
        return fail(STEP_SCHEMA, ACTION_INVALID, "code must be a non-empty string")
    size = len(code.encode("utf-8", "surrogatepass"))
    if size > MAX_CODE_BYTES:
        return fail(STEP_SCHEMA, ACTION_INVALID, f"code is {size:,} bytes; the limit is {MAX_CODE_BYTES:,}")
    log.append(f"{STEP_SCHEMA}: OK")
    try:
        tree = ast.parse(code, filename="<action>", feature_version=rules.trait_language())
        scanner = Scanner(None, module_aliases(tree), module_classes(tree))
        scanner.visit(tree)
        check_escapes(tree, None, scanner)
    except SyntaxError as error:
        return fail(STEP_PARSE, SYNTAX_ERROR, f"{error.msg} (line {error.lineno})")
    except (TooDeep, RecursionError, MemoryError):
        return fail(STEP_PARSE, SYNTAX_ERROR, TOO_DEEP)
    except ValueError as error:
        return fail(STEP_PARSE, SYNTAX_ERROR, f"the code cannot be parsed: {error}")
    code_hash = scanner.digest()
    for step in (STEP_PARSE, STEP_IMPORTS, STEP_BANNED):
        if step in scanner.findings:
            _, failure, message = scanner.findings[step]
            return fail(step, failure, message, code_hash)
        log.append(f"{step}: OK")
    problem = _entry_point_problem(tree)
    if problem is not None:
        return fail(STEP_ACTION_CONTRACT, ACTION_NO_ENTRY_POINT, problem, code_hash)
    log.append(f"{STEP_ACTION_CONTRACT}: OK — {ENTRY_POINT}")
    return GateResult(True, None, log, ENTRY_POINT, code_hash)
