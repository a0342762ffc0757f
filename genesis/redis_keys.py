"""Redis key and channel names from the seeds, in one place."""

from __future__ import annotations

# World telemetry (logic-flow.md)
WORLD_TICK = "ws:tick"


def world_snapshot(tick: int) -> str:
    return f"ws:snapshot:{tick}"


WORLD_SNAPSHOT_TTL_S = 300
WORLD_SNAPSHOT_MATCH = "ws:snapshot:*"  # SCAN pattern of the snapshot keys

# The engine process (python -m engine), refreshed about once a second
ENGINE_STATUS = "engine:status"  # hash: tick, ticks_per_second, population, ... (see engine/process/telemetry.py)
ENGINE_PARAMS = "engine:params"  # JSON: the WorldParams of the running world
ENGINE_ENTITIES = "engine:entities"  # JSON: a bounded list of entities (lowest ids first)


# External-agent tasks (open-mutation-api.md)
AGENT_TASKS_QUEUE = "agent:tasks:queue"


def agent_task(task_id: str) -> str:
    return f"agent:task:{task_id}"


def agent_task_claim(task_id: str) -> str:
    """The claimant's agent_id, with the lease as the key's TTL (never past the task's expiry)."""
    return f"agent:claim:{task_id}"


# Rate limits (open-mutation-api.md)
def ratelimit_active(agent_id: str) -> str:
    return f"ratelimit:active:{agent_id}"


def ratelimit_ip_minute(ip: str) -> str:
    return f"ratelimit:ip:min:{ip}"


def ratelimit_agent_hour(agent_id: str) -> str:
    return f"ratelimit:agent:hr:{agent_id}"


# Checks (POST /api/mutations/check) have windows of their own, apart from proposals'.
def ratelimit_register_ip_hour(ip: str) -> str:
    return f"ratelimit:register:ip:hr:{ip}"


def invitation(digest: str) -> str:
    """An operator's unused invitation to register, by the sha256 of its code (expires on its own)."""
    return f"invitation:{digest}"


def ratelimit_rules_agent_hour(agent_id: str) -> str:
    return f"ratelimit:rules:agent:hr:{agent_id}"


def ratelimit_gepa_hour(action: str, client: str) -> str:
    """GEPA ``step`` or ``connect`` starts of one caller (``agent:<id>`` or ``ip:<address>``) in its hour."""
    return f"ratelimit:gepa:{action}:hr:{client}"


def ratelimit_check_agent_minute(agent_id: str) -> str:
    return f"ratelimit:check:agent:min:{agent_id}"


def ratelimit_check_ip_minute(ip: str) -> str:
    return f"ratelimit:check:ip:min:{ip}"


# Trait registry (logic-flow.md)
REGISTRY_TRAITS = "meta:registry:traits"
REGISTRY_VERSION = "meta:registry:version"

# Watcher (logic-flow.md)
WATCHER_TRIGGER_COUNTER = "watcher:trigger_counter"
WATCHER_CIRCUIT_BREAKER = "watcher:circuit_breaker"
WATCHER_FORCED_COUNTER = "watcher:forced_counter"  # operators' forced triggers (a window of their own)


def evolution_trigger(trigger_id: str) -> str:
    return f"evo:trigger:{trigger_id}"


class Channels:
    TELEMETRY = "ch:telemetry"
    AGENT_TASKS = "ch:agent:tasks"
    MUTATION_APPLIED = "ch:mutation:applied"
    MUTATION_ROLLBACK = "ch:mutation:rollback"
    FEED = "ch:feed"
    WORLD_FRAMES = "ch:world:frames"  # compact frames for viewers, every 2nd tick


# Evolution Feed: every message is also kept in a capped stream, so a viewer or a
# CLI can read what it missed (GET /api/feed?after=<id>) before following ch:feed live.
FEED_STREAM = "feed:stream"
FEED_STREAM_MAXLEN = 1000  # approximate (XADD MAXLEN ~)

# World parameters changed by evolution cycles (adjust_params): JSON {"overrides": {name: value},
# "version": n, "cycle_id", "workflow_id", "previous": {...}}; the engine applies it about once a
# second on top of its configured WorldParams.
WORLD_PARAMS_OVERRIDES = "meta:world:params"

# Rollbacks of the world to a kept snapshot (engine/process/rollbacks.py): requests queue as JSON
# {request_id, snapshot | tick | mutation_id, reason, requested_by, requested_at}; the engine
# answers each under world:rollback:{request_id} (JSON: status requested | applied | refused, ...).
WORLD_ROLLBACK_REQUESTS = "world:rollback:requests"
WORLD_ROLLBACK_TTL_S = 7 * 24 * 3600
# JSON: the journal's disk use, archive and retention in force (engine/process/retention.py), with a TTL
JOURNAL_STATUS = "engine:journal"
# JSON list of the snapshots the engine keeps (name, epoch, tick, journal_seq, state_hash, ...).
ENGINE_SNAPSHOTS = "engine:snapshots"
# JSON: the engine's live fitness ledger (engine/core/ledger.py), every trait's evidence since its
# verdict, rewritten at each telemetry snapshot
LEDGER_TRAITS = "ledger:traits"


def world_rollback(request_id: str) -> str:
    return f"world:rollback:{request_id}"
