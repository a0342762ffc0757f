# Flocking: Molbots that carry it gather and circle the middle of the world together, like a
# school of fish milling around.
#
# Verdict: passes the gatekeeper and the sandbox test.
# Propose it: genesis propose examples/traits/flocking.py --name flocking --goal "Move together as a flock"
#
# A Molbot senses how many others are near it (`entity.neighbors`, within the sensing range), not
# where they are, so the three classic flocking rules are built from that count and from a
# heading every carrier agrees on:
# - cohesion: alone (few neighbours), it heads for the middle of the world, where the flock is;
# - separation: crowded (many neighbours), it turns outwards and speeds up, since Molbots that
#   touch each other lose energy in collisions;
# - alignment: otherwise it turns a little at a time towards the heading that circles the middle
#   anticlockwise, so neighbours travel side by side instead of crossing paths.
#
# What it shows: importing an allowed standard module (math), helper functions beside the trait
# class, move_towards(), and writing direction (radians; the world wraps it into -pi..pi).
import math

ALONE_AT_MOST = 1  # this many neighbours or fewer: look for the flock
CROWDED_ABOVE = 8  # more neighbours than this: make room
MAX_TURN = 0.2  # radians per tick when aligning: a smooth turn, not a jump


def angle_between(target: float, current: float) -> float:
    """The signed smallest turn from ``current`` to ``target`` (radians, -pi..pi)."""
    return math.remainder(target - current, math.tau)


class BaseTrait:
    """Traits define this stub themselves: imports are limited to a few standard modules."""

    pass


class FlockingTrait(BaseTrait):
    async def execute(self, entity) -> None:
        centre_x = entity.world_width / 2
        centre_y = entity.world_height / 2
        outwards = math.atan2(entity.y - centre_y, entity.x - centre_x)  # heading away from the middle
        if entity.neighbors <= ALONE_AT_MOST:
            entity.speed = 2.5
            entity.move_towards(centre_x, centre_y)
        elif entity.neighbors > CROWDED_ABOVE:
            entity.speed = 3.0
            entity.direction = outwards
        else:
            circling = outwards + math.pi / 2  # a quarter turn from outwards: around the middle
            turn = angle_between(circling, entity.direction)
            entity.speed = 1.5
            entity.direction = entity.direction + max(-MAX_TURN, min(MAX_TURN, turn))
