# Energy saver: when its energy runs low, a Molbot slows down and lowers its metabolism until it
# has eaten enough again, then goes back to the metabolism it had.
#
# Verdict: passes the gatekeeper and the sandbox test.
# Propose it: genesis propose examples/traits/energy_saver.py --name energy_saver --goal "Save energy when low"
#
# What it shows:
# - per-Molbot state: the world creates one instance of the trait class per carrier, so `self`
#   remembers things about this Molbot from one tick to the next;
# - __init__ with parameters that all have defaults (traits are created without arguments);
# - writing the entity's writable attributes: energy_consumption_rate (clamped to 0.5..1.5; it
#   also scales how fast the Molbot can move), speed (0..4) and state (a label of at most 32
#   characters, shown in GET /api/world/entities). Other attributes are read-only.
#
# The two thresholds make a hysteresis: without the gap between them a Molbot near the line
# would switch mode on every tick.


class BaseTrait:
    """Traits define this stub themselves: imports are limited to a few standard modules."""

    pass


class EnergySaverTrait(BaseTrait):
    def __init__(self, rest_below: float = 0.35, wake_above: float = 0.6, resting_rate: float = 0.6):
        self.rest_below = rest_below  # fractions of max_energy
        self.wake_above = wake_above
        self.resting_rate = resting_rate
        self.normal_rate = 1.0  # the metabolism to go back to, remembered when resting starts
        self.resting = False

    async def execute(self, entity) -> None:
        share = entity.energy / entity.max_energy
        if not self.resting and share < self.rest_below:
            self.resting = True
            self.normal_rate = entity.energy_consumption_rate
            entity.energy_consumption_rate = self.resting_rate
            entity.state = "resting"
        elif self.resting and share > self.wake_above:
            self.resting = False
            entity.energy_consumption_rate = self.normal_rate
            entity.state = "active"
        if self.resting:
            entity.speed = 0.5  # moving costs energy per distance: crawl while resting
