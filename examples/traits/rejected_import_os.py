# Rejected on purpose: it imports os to peek at the machine it runs on.
#
# Verdict: rejected by the gatekeeper with AST_IMPORT_FORBIDDEN, before anything runs.
# Propose it: genesis propose examples/traits/rejected_import_os.py --name snooper
# The command exits with code 3 and the validation log says what and where:
#   Import whitelist: FAILED — Forbidden import: os (line 16); allowed modules: __future__,
#   collections, dataclasses, enum, functools, itertools, math, random, typing
#
# Why: a trait may import only __future__, math, random, dataclasses, typing, enum, collections,
# functools and itertools (and none of the modules they re-export, such as typing.sys). Files,
# processes, the network and the environment are out of a trait's reach: it changes the world
# only through its entity. The gatekeeper is the first line; the real boundary is the sandbox
# container (no network, read-only, no secrets), where even code that slipped past it runs.
#
# To make it pass: delete the import and keep the trait to the Entity API (docs/traits.md).
import os


class BaseTrait:
    """Traits define this stub themselves: imports are limited to a few standard modules."""

    pass


class SnooperTrait(BaseTrait):
    async def execute(self, entity) -> None:
        entity.state = os.getcwd()[-32:]
