"""Proposal rate limits of open-mutation-api.md, checked and taken in one Redis Lua script; and
the lighter limits of checks (POST /api/mutations/check), in another.

Keys (genesis/redis_keys.py):

- ``ratelimit:active:{agent_id}`` — the agent's active mutations: a sorted set of mutation ids
  (its size is the seed's counter) scored by the time the slot lapses on its own. A member is
  removed when the mutation reaches a terminal state (``release``; removing twice is harmless),
  and a slot whose workflow vanished without ending lapses after ``active_slot_ttl_s``.
- ``ratelimit:ip:min:{ip}`` — proposals from one IP in the current minute (counter, TTL 60 s).
- ``ratelimit:agent:hr:{agent_id}`` — proposals of one agent in the current hour (counter, TTL 3600 s).

The script checks all three limits and takes all three (or nothing) atomically, so concurrent
proposals can never exceed a limit, and a refused proposal consumes no quota. It uses Redis'
clock (``TIME``), so several API hosts agree on time. All keys must live on one Redis node.

Checks count in windows of their own, so trying code never uses up proposals (and the other way
round): ``ratelimit:check:agent:min:{agent_id}`` and ``ratelimit:check:ip:min:{ip}``, counters
with a TTL of 60 s, both checked and taken (or neither) by one script. Proposals of rule changes
(manifest patches) by agents count in ``ratelimit:rules:agent:hr:{agent_id}``, registrations of
agents by address in ``ratelimit:register:ip:hr:{ip}`` (both TTL 3600 s).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import redis.asyncio as aioredis

from genesis.redis_keys import (
    ratelimit_active,
    ratelimit_agent_hour,
    ratelimit_check_agent_minute,
    ratelimit_check_ip_minute,
    ratelimit_gepa_hour,
    ratelimit_ip_minute,
    ratelimit_register_ip_hour,
    ratelimit_rules_agent_hour,
)

IP_WINDOW_S = 60
AGENT_WINDOW_S = 3600
CHECK_WINDOW_S = 60

# KEYS: active zset, ip-minute counter, agent-hour counter
# ARGV: mutation_id, active limit, slot ttl s, ip limit, agent limit, active retry hint s,
#       ip window s, agent window s
# Returns {0} taken, {1} this mutation already holds its slot (a retried request: nothing taken),
# or {2, limit name, retry after ms, limit value} refused (nothing taken).
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1}
end
local refused, retry_ms, limit = false, -1, 0
local function refuse(name, ms, value)
  if ms > retry_ms then refused, retry_ms, limit = name, ms, value end
end
local function window_retry(key, window_s)
  local ms = redis.call('PTTL', key)
  if ms < 0 then
    redis.call('EXPIRE', key, window_s)
    ms = window_s * 1000
  end
  return ms
end
local active_limit, ip_limit, agent_limit = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('ZCARD', KEYS[1]) >= active_limit then
  refuse('active', tonumber(ARGV[6]) * 1000, active_limit)
end
if tonumber(redis.call('GET', KEYS[3]) or '0') >= agent_limit then
  refuse('agent_hour', window_retry(KEYS[3], tonumber(ARGV[8])), agent_limit)
end
if tonumber(redis.call('GET', KEYS[2]) or '0') >= ip_limit then
  refuse('ip_minute', window_retry(KEYS[2], tonumber(ARGV[7])), ip_limit)
end
if refused then
  return {2, refused, retry_ms, limit}
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('EXPIRE', KEYS[1], ttl)
if redis.call('INCR', KEYS[2]) == 1 or redis.call('TTL', KEYS[2]) < 0 then
  redis.call('EXPIRE', KEYS[2], ARGV[7])
end
if redis.call('INCR', KEYS[3]) == 1 or redis.call('TTL', KEYS[3]) < 0 then
  redis.call('EXPIRE', KEYS[3], ARGV[8])
end
return {0}
"""

# Give back what ``acquire`` took for a proposal that was then not recorded (e.g. its
# workflow could not be started). KEYS as above; ARGV: mutation_id.
_REFUND = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  for i = 2, 3 do
    if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then redis.call('DECR', KEYS[i]) end
  end
end
return 0
"""


# KEYS: window counters; ARGV: the limit of each key, in order, then the window in seconds.
# Returns {0} taken (every counter counted once), or {1, index of the refusing key (from 1),
# retry after ms, its limit} refused (nothing taken); of several full windows, the one that
# reopens last is named.
_TAKE_WINDOWS = """
local window = tonumber(ARGV[#KEYS + 1])
local refused, retry_ms, limit = 0, -1, 0
for i, key in ipairs(KEYS) do
  local value = tonumber(ARGV[i])
  if tonumber(redis.call('GET', key) or '0') >= value then
    local ms = redis.call('PTTL', key)
    if ms < 0 then
      redis.call('EXPIRE', key, window)
      ms = window * 1000
    end
    if ms > retry_ms then refused, retry_ms, limit = i, ms, value end
  end
end
if refused > 0 then
  return {1, refused, retry_ms, limit}
end
for _, key in ipairs(KEYS) do
  if redis.call('INCR', key) == 1 or redis.call('TTL', key) < 0 then
    redis.call('EXPIRE', key, window)
  end
end
return {0}
"""


@dataclass(frozen=True)
class Limits:
    active_per_agent: int
    per_ip_minute: int
    per_agent_hour: int
    active_slot_ttl_s: int
    active_retry_after_s: int


@dataclass(frozen=True)
class Decision:
    allowed: bool
    already_held: bool = False  # the same mutation asked again (idempotent retry): nothing taken
    limit: str | None = None  # "active", "agent_hour", "ip_minute", "check_*_minute" or "rules_agent_hour"
    limit_value: int = 0
    retry_after_sec: int = 0

    def describe(self, agent_id: str, ip: str) -> str:
        if self.limit == "active":
            return f"Too many active mutations for agent_id '{agent_id}' (limit: {self.limit_value})"
        if self.limit == "agent_hour":
            return f"Too many proposals from agent_id '{agent_id}' this hour (limit: {self.limit_value} per hour)"
        if self.limit == "register_ip_hour":
            return f"Too many agents registered from IP {ip} this hour (limit: {self.limit_value} per hour)"
        if self.limit == "rules_agent_hour":
            return f"Too many rule proposals from agent_id '{agent_id}' this hour (limit: {self.limit_value} per hour)"
        if self.limit in ("gepa_steps_per_hour", "gepa_connects_per_hour"):
            what = "GEPA steps" if self.limit == "gepa_steps_per_hour" else "repository connections"
            who = f"agent_id '{agent_id}'" if agent_id else f"IP {ip}"
            return f"Too many {what} from {who} this hour (limit: {self.limit_value} per hour)"
        if self.limit == "check_agent_minute":
            return f"Too many checks from agent_id '{agent_id}' this minute (limit: {self.limit_value} per minute)"
        if self.limit == "check_ip_minute":
            return f"Too many checks from IP {ip} this minute (limit: {self.limit_value} per minute)"
        return f"Too many proposals from IP {ip} this minute (limit: {self.limit_value} per minute)"


@functools.lru_cache(maxsize=32)
def _script(redis: aioredis.Redis, source: str):
    """The client's Script object for ``source`` (made once: it hashes the source; EVALSHA after)."""
    return redis.register_script(source)


def _keys(agent_id: str, ip: str) -> list[str]:
    return [ratelimit_active(agent_id), ratelimit_ip_minute(ip), ratelimit_agent_hour(agent_id)]


async def acquire(redis: aioredis.Redis, limits: Limits, agent_id: str, ip: str, mutation_id: str) -> Decision:
    """Check every limit and, when all allow it, count the proposal and give it an active slot."""
    result = await _script(redis, _ACQUIRE)(
        keys=_keys(agent_id, ip),
        args=[
            mutation_id,
            limits.active_per_agent,
            limits.active_slot_ttl_s,
            limits.per_ip_minute,
            limits.per_agent_hour,
            limits.active_retry_after_s,
            IP_WINDOW_S,
            AGENT_WINDOW_S,
        ],
    )
    code = int(result[0])
    if code == 0:
        return Decision(allowed=True)
    if code == 1:
        return Decision(allowed=True, already_held=True)
    name = result[1].decode() if isinstance(result[1], bytes) else str(result[1])
    return Decision(
        allowed=False,
        limit=name,
        limit_value=int(result[3]),
        retry_after_sec=max(1, math.ceil(int(result[2]) / 1000)),
    )


@dataclass(frozen=True)
class CheckLimits:
    per_agent_minute: int
    per_ip_minute: int


_CHECK_LIMIT_NAMES = ("check_agent_minute", "check_ip_minute")  # in the order of the script's keys
RULES_WINDOW_S = 3600


async def take_check(redis: aioredis.Redis, limits: CheckLimits, agent_id: str, ip: str) -> Decision:
    """Count one check of ``agent_id`` from ``ip`` if both of its minute windows allow it."""
    result = await _script(redis, _TAKE_WINDOWS)(
        keys=[ratelimit_check_agent_minute(agent_id), ratelimit_check_ip_minute(ip)],
        args=[limits.per_agent_minute, limits.per_ip_minute, CHECK_WINDOW_S],
    )
    if int(result[0]) == 0:
        return Decision(allowed=True)
    return Decision(
        allowed=False,
        limit=_CHECK_LIMIT_NAMES[int(result[1]) - 1],
        limit_value=int(result[3]),
        retry_after_sec=max(1, math.ceil(int(result[2]) / 1000)),
    )


async def take_registration(redis: aioredis.Redis, per_hour: int, ip: str) -> Decision:
    """Count one agent registration from ``ip`` in its hour."""
    return await _take_one(redis, ratelimit_register_ip_hour(ip), per_hour, 3600, "register_ip_hour")


async def take_rule_proposal(redis: aioredis.Redis, per_hour: int, agent_id: str) -> Decision:
    """Count one proposal of a rule change (a manifest patch) by ``agent_id`` in its hour."""
    return await _take_one(redis, ratelimit_rules_agent_hour(agent_id), per_hour, RULES_WINDOW_S, "rules_agent_hour")


async def take_gepa(redis: aioredis.Redis, action: str, per_hour: int, client: str) -> Decision:
    """Count one GEPA ``step`` or ``connect`` of ``client`` (``agent:<id>`` or ``ip:<address>``) in its hour."""
    return await _take_one(redis, ratelimit_gepa_hour(action, client), per_hour, 3600, f"gepa_{action}s_per_hour")


async def _take_one(redis: aioredis.Redis, key: str, limit: int, window_s: int, name: str) -> Decision:
    result = await _script(redis, _TAKE_WINDOWS)(keys=[key], args=[limit, window_s])
    if int(result[0]) == 0:
        return Decision(allowed=True)
    return Decision(
        allowed=False, limit=name, limit_value=int(result[3]), retry_after_sec=max(1, math.ceil(int(result[2]) / 1000))
    )


async def refund(redis: aioredis.Redis, agent_id: str, ip: str, mutation_id: str) -> None:
    await _script(redis, _REFUND)(keys=_keys(agent_id, ip), args=[mutation_id])


async def release(redis: aioredis.Redis, agent_id: str, mutation_id: str) -> bool:
    """Free the active slot of a mutation that reached a terminal state. Idempotent."""
    return bool(await redis.zrem(ratelimit_active(agent_id), mutation_id))


async def usage(redis: aioredis.Redis, agent_id: str) -> dict[str, int]:
    """Current use of the per-agent limits (for GET /v1/agents/me)."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zcount(ratelimit_active(agent_id), "(" + str(await _now(redis)), "+inf")
        pipe.get(ratelimit_agent_hour(agent_id))
        pipe.ttl(ratelimit_agent_hour(agent_id))
        active, hour, ttl = await pipe.execute()
    return {"active": int(active), "proposals_this_hour": int(hour or 0), "hour_resets_in_sec": max(int(ttl), 0)}


async def _now(redis: aioredis.Redis) -> float:
    seconds, micros = await redis.time()
    return seconds + micros / 1_000_000
