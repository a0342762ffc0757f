"""Step 5, statements that escape the checks or the sandbox's deadline: ``global``/``nonlocal``,
``match`` (class patterns read attributes named in strings), ``yield`` (generators expose their
frames), a bare ``except:`` and catching the host's deadline exceptions. Also the compile-time
errors ``ast.parse`` lets through (``break``/``continue`` outside a loop, ``return`` outside a
function), and the scopes of comprehensions and ``:=`` that step 9 reads."""

from __future__ import annotations

import ast
from ast import Break, Name, Tuple, While

from gatekeeper.nodes import Comprehension
from gatekeeper.state import ScanState
from gatekeeper.tables import (
    AST_BANNED_CALL,
    BANNED_EXCEPTIONS,
    DEADLINE_HINT,
    REFUSED_STATEMENTS,
    STEP_BANNED,
    STEP_PARSE,
    SYNTAX_ERROR,
)


class StatementChecks(ScanState):
    """The scanner's handlers for control flow and scoping statements (part of scan.Scanner)."""

    def _refused(self, node: ast.Global | ast.Nonlocal | ast.Match | ast.Yield | ast.YieldFrom) -> None:
        self.found(STEP_BANNED, node, AST_BANNED_CALL, *REFUSED_STATEMENTS[type(node)])
        self.generic(node)

    def _except_handler(self, node: ast.ExceptHandler) -> None:
        caught = node.type
        if caught is None:
            self.found(STEP_BANNED, node, AST_BANNED_CALL, "Bare 'except:' is not allowed", DEADLINE_HINT)
        else:
            for item in caught.elts if type(caught) is Tuple else (caught,):
                if type(item) is Name and item.id in BANNED_EXCEPTIONS:
                    self.found(STEP_BANNED, node, AST_BANNED_CALL, f"Catching {item.id} is not allowed", DEADLINE_HINT)
        if node.name:
            self.bind(node.name, node)
        self.generic(node)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        if isinstance(node, While):
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
            keyword = "break" if type(node) is Break else "continue"
            self.found(STEP_PARSE, node, SYNTAX_ERROR, f"'{keyword}' outside loop")

    def _return(self, node: ast.Return) -> None:
        if not self.in_function:
            self.found(STEP_PARSE, node, SYNTAX_ERROR, "'return' outside function")
        self.generic(node)

    def _comprehension(self, node: Comprehension) -> None:
        saved = self.scope
        self.scope = set()  # comprehension variables do not leak into the function
        self.generic(node)
        self.scope = saved

    def _named_expr(self, node: ast.NamedExpr) -> None:
        # ':=' binds in the enclosing function even inside a comprehension.
        self.function_scope.add(node.target.id)
        self.generic(node)
