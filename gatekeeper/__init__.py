"""The AST gatekeeper: steps 2-10 of the mutation validation pipeline (open-mutation-api seed).

``validate(trait_name, code)`` parses the submitted source and checks it against the sandbox
rules (genesis/rules.py) without running it; ``schema_problems`` is step 2 alone, for request
validation. The gatekeeper is a first line only: submitted code runs in the sandbox container,
which is the boundary. Its checks reject the published families of AST-filter bypasses.

Where things are: steps.py runs the steps in order; scan.py is the one pass over the tree, whose
checks live by family in imports.py, names.py, attributes.py, definitions.py, statements.py and
entity.py, on the state they share (state.py); escapes.py (with units.py, the file's functions)
follows the entity and the file's classes where the scan cannot; flow.py is the unbound-variable
pass; contract.py finds the trait class; nodes.py answers small questions about the tree;
tables.py holds the rules as data.
"""

from gatekeeper.schema import schema_problems
from gatekeeper.steps import GateResult, validate
from gatekeeper.tables import MAX_NESTING

__all__ = ["MAX_NESTING", "GateResult", "schema_problems", "validate"]
