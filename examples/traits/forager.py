# Forager: when it gets hungry, a Molbot walks to the nearest food it can sense and eats it.
#
# Verdict: passes the gatekeeper and the sandbox test.
# Propose it: genesis propose examples/traits/forager.py --name forager --goal "Walk to food when hungry"
#
# What it shows:
# - the trait contract: a BaseTrait stub defined in the file itself (traits import nothing from
#   Genesis) and one class inheriting from it with `async def execute(self, entity) -> None`;
# - reading the entity (energy, max_energy) and calling its methods: nearest_resource(), move(),
#   eat(). Methods are synchronous: call them, never `await` them;
# - module-level constants: the only statements allowed at module level besides imports,
#   definitions and docstrings (nothing may run when the file is loaded).
#
# Every call is an *intent*: the world checks it and applies it after the trait returns, so
# `entity.energy` keeps its value from the start of the tick while execute() runs.

HUNGRY_BELOW = 0.6  # fraction of max_energy under which the Molbot goes looking for food
HURRY_SPEED = 3.0  # distance per tick while heading for food (the world clamps speed to 0..4)


class BaseTrait:
    """Traits define this stub themselves: imports are limited to a few standard modules."""

    pass


class ForagerTrait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy >= HUNGRY_BELOW * entity.max_energy:
            return  # not hungry: leave it to instinct (a random walk)
        food = entity.nearest_resource()  # (dx, dy, distance), or None when nothing is in sight
        if food is None:
            return
        dx, dy, distance = food
        entity.speed = min(HURRY_SPEED, distance)  # no faster than the distance left: stop on the food
        entity.move(dx, dy)
        entity.eat()  # eats the nearest food within reach; does nothing while it is still far
