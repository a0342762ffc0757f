"""Trait sources used across tests."""

import uuid

# The seed's example, verbatim (open-mutation-api.md).
SEED_EXAMPLE = '''from __future__ import annotations
import math
import random

class BaseTrait:
    """Base trait protocol stub — no import needed."""
    pass

class EnergyHoarderTrait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy < 25:
            entity.energy_consumption_rate *= 0.7
'''

RAISES = """class BaseTrait:
    pass

class ExplodingTrait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy > -1:
            raise ValueError("boom")
"""

INFINITE_LOOP = """class BaseTrait:
    pass

class SpinnerTrait(BaseTrait):
    async def execute(self, entity) -> None:
        while True:
            pass
"""

FORBIDDEN_IMPORT = """import os

class BaseTrait:
    pass

class SneakyTrait(BaseTrait):
    async def execute(self, entity) -> None:
        entity.state = "hi"
"""


def seeker(variant: int) -> str:
    """A valid, distinct trait per variant (distinct code hashes)."""
    return f"""import math

class BaseTrait:
    pass

class SeekerTrait(BaseTrait):
    async def execute(self, entity) -> None:
        found = entity.nearest_resource()
        if found is not None and entity.energy < {30 + variant}:
            entity.move(found[0], found[1])
        else:
            entity.direction = entity.direction + {variant % 7} * 0.01
"""


def unique_seeker() -> str:
    """A seeker no other test proposes: identical code is rejected as DUPLICATE_CODE, and the stack
    tests share one database."""
    return seeker(10_000 + uuid.uuid4().int % 10**9)
