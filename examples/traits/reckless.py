# Reckless: a Molbot burns energy at the highest rate the world allows, runs at full speed, and
# runs *away* from the food it senses. Its carriers starve within a few hundred ticks.
#
# Verdict: passes the gatekeeper and the sandbox test (it breaks no rule: it is only a bad idea).
# Propose it: genesis propose examples/traits/reckless.py --name reckless --goal "Run from food"
#
# What it shows: selection. The sandbox test judges whether code is safe to run, not whether it
# is good for a Molbot; that is the verdict's job. Once live, its experiment runs forks of the
# world with and without it (docs/evolution.md, "Verdicts"), finds its carriers' fitness far
# below their twins' without it, judges it `negative` and rolls it back: the status says by how
# much, with its interval.

FULL_SPEED = 4.0  # the world clamps speed to 0..4
HIGHEST_RATE = 1.5  # energy_consumption_rate is clamped to 0.5..1.5


class BaseTrait:
    pass


class RecklessTrait(BaseTrait):
    async def execute(self, entity) -> None:
        entity.energy_consumption_rate = HIGHEST_RATE
        entity.speed = FULL_SPEED
        food = entity.nearest_resource()
        if food is not None:
            entity.move(-food[0], -food[1])  # away from it
