# Careful forager: a hungry Molbot walks to food it can reach soon and eats it; food far away it
# leaves to instinct, so carriers do not all crowd onto the same resource (crowds collide, and
# collisions cost energy).
#
# Verdict: passes the gatekeeper and the sandbox test.
# Propose it: genesis propose examples/traits/careful_forager.py --name careful_forager --goal "Eat food nearby"
#
# What it shows: a trait selection keeps. Its experiment (docs/evolution.md, "Verdicts") finds its
# carriers' fitness well above their twins' without it while the world's population holds, and
# judges it `positive`. (examples/traits/forager.py walks to any food it senses: its carriers gain
# as much, but in a crowded world its crowds collide, and the world's population can fall.)

HUNGRY_BELOW = 50.0  # energy
NEAR = 30.0  # distance: food further than this is left to instinct


class BaseTrait:
    pass


class CarefulForagerTrait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy >= HUNGRY_BELOW:
            return
        food = entity.nearest_resource()
        if food is not None and food[2] < NEAR:
            entity.move_towards(entity.x + food[0], entity.y + food[1])
            entity.eat()
