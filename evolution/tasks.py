"""Tasks for external agents in Redis (open-mutation-api.md, "Context API" and "How tasks reach
external agents"): the writes of the TaskWorkflow's activities, the reads of
``GET /api/agents/context/tasks`` and the claims.

- ``agent:task:{task_id}``  the task body (JSON), expiring at ``expires_at``
- ``agent:tasks:queue``     sorted set, member ``task_id``, score ``expires_at``
- ``agent:claim:{task_id}`` the claimant's ``agent_id``; its TTL is the claim's lease
- ``ch:agent:tasks``        ``TaskPublished`` / ``TaskExpired`` / ``TaskClosed`` events

Claims and the proposal check are Lua scripts: Redis runs each atomically, so of many agents
claiming at once exactly one wins. Times inside the scripts come from Redis' own clock."""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass
from typing import Any, cast

import redis.asyncio as aioredis
from pydantic import ValidationError

from genesis import redis_keys as keys, rules
from genesis.dto import AgentTask, TaskClose, TaskEndReason
from genesis.redis_keys import Channels
from genesis.workflow_api import TASK_WORKFLOW, search_attributes, task_workflow_id

# What every task reminds its reader of (the seed's SANDBOX_CONSTRAINTS, from the live rules).
TASK_CONSTRAINTS: tuple[str, ...] = (
    "imports only: " + ", ".join(m for m in rules.ALLOWED_IMPORTS if m != "__future__"),
    "define the BaseTrait stub in the file; never import from backend.*",
    f"execute(self, entity) must finish within {rules.TIMEOUT_MS} ms",
)


def new_task_id() -> str:
    return f"task_{secrets.token_hex(6)}"


async def start_workflow(client: Any, task_queue: str, task: AgentTask) -> str:
    """Start the TaskWorkflow of ``task`` (id ``task-<task_id>``), which publishes it within
    moments; returns the workflow id. A task id names one task, ever: raises
    ``temporalio.exceptions.WorkflowAlreadyStartedError`` when it is taken. Used by the operator
    endpoint (``POST /api/agents/tasks``) and the Watcher."""
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

    workflow_id = task_workflow_id(task.task_id)
    await client.start_workflow(
        TASK_WORKFLOW,
        task,
        id=workflow_id,
        task_queue=task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        search_attributes=search_attributes(problem_type=task.problem_type),
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
    )
    return workflow_id


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def published_event(task: AgentTask) -> str:
    """Seed shape: ``{"event": "TaskPublished", "task_id", "problem_type", "expires_at"}``."""
    return _dumps(
        {
            "event": "TaskPublished",
            "task_id": task.task_id,
            "problem_type": task.problem_type,
            "expires_at": task.expires_at,
        }
    )


def closed_event(close: TaskClose) -> str:
    """``TaskExpired`` (seed shape) when the TTL ran out; ``TaskClosed`` with the reason (and who
    resolved it and why, in ``detail``) otherwise."""
    if close.reason == TaskEndReason.expired:
        return _dumps({"event": "TaskExpired", "task_id": close.task_id})
    return _dumps(
        {
            "event": "TaskClosed",
            "task_id": close.task_id,
            "reason": close.reason.value,
            "mutation_id": close.mutation_id,
            "detail": close.detail,
        }
    )


async def publish(redis: aioredis.Redis, task: AgentTask, now: float | None = None) -> bool:
    """Write the body (expiring at ``expires_at``), queue it and announce it, in one transaction.
    Idempotent except for the event. False (nothing written) when the task has already expired."""
    now = time.time() if now is None else now
    if task.expires_at <= now:
        return False
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(keys.agent_task(task.task_id), task.model_dump_json(), pxat=math.ceil(task.expires_at * 1000))
        pipe.zadd(keys.AGENT_TASKS_QUEUE, {task.task_id: task.expires_at})
        pipe.zremrangebyscore(keys.AGENT_TASKS_QUEUE, "-inf", now)  # housekeeping: entries already expired
        pipe.publish(Channels.AGENT_TASKS, published_event(task))
        await pipe.execute()
    return True


async def close(redis: aioredis.Redis, close: TaskClose) -> bool:
    """Take the task out of the queue, drop its body and claim, announce why. True when it was
    still queued (idempotent; the event is sent every time)."""
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zrem(keys.AGENT_TASKS_QUEUE, close.task_id)
        pipe.delete(keys.agent_task(close.task_id), keys.agent_task_claim(close.task_id))
        pipe.publish(Channels.AGENT_TASKS, closed_event(close))
        removed, _, _ = await pipe.execute()
    return bool(removed)


@dataclass(frozen=True)
class Claim:
    agent_id: str
    lease_remaining_s: float


async def queue_entries(
    redis: aioredis.Redis, count: int, after: tuple[float, str] | None = None
) -> list[tuple[float, str]]:
    """Up to ``count`` (expires_at, task_id) of the queue that have not expired, soonest expiry
    first and task ids in order among equal expiries (Redis' own order), strictly after ``after``."""
    now = time.time()
    low = repr(after[0]) if after is not None and after[0] > now else f"({now}"  # ties with ``after`` dropped below
    entries: list[tuple[float, str]] = []
    start = 0
    while len(entries) < count:
        batch = cast(
            list[tuple[bytes | str, float]],
            await redis.zrangebyscore(keys.AGENT_TASKS_QUEUE, low, "+inf", start=start, num=count, withscores=True),
        )
        for member, score in batch:
            entry = (float(score), member.decode() if isinstance(member, bytes) else str(member))
            if after is None or entry > after:
                entries.append(entry)
        if len(batch) < count:
            break
        start += len(batch)
    return entries[:count]


async def live_tasks(redis: aioredis.Redis, task_ids: list[str]) -> list[tuple[AgentTask, Claim | None]]:
    """The tasks of ``task_ids`` (in that order) that have not expired, each with its live claim
    if any. One whose body is gone, or has expired meanwhile, is never returned."""
    if not task_ids:
        return []
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for task_id in task_ids:
            pipe.get(keys.agent_task(task_id))
            pipe.get(keys.agent_task_claim(task_id))
            pipe.pttl(keys.agent_task_claim(task_id))
        results = await pipe.execute()
    out: list[tuple[AgentTask, Claim | None]] = []
    for i in range(len(task_ids)):
        body, holder, pttl = results[3 * i : 3 * i + 3]
        if body is None:
            continue
        try:
            task = AgentTask.model_validate_json(body)
        except ValidationError:  # not written by a TaskWorkflow: never listed
            continue
        if task.expires_at <= now:
            continue
        claim = None
        if holder is not None and pttl is not None and pttl > 0:
            claim = Claim(holder.decode() if isinstance(holder, bytes) else holder, pttl / 1000)
        out.append((task, claim))
    return out


# KEYS: queue, body, claim. ARGV: task_id, agent_id, lease_ms.
# -> {0} no such live task | {1, agent, lease_ms, expires_at} claimed |
#    {2, agent, pttl, expires_at} already the caller's | {3, holder, pttl, expires_at} someone else's
_CLAIM_LUA = """
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not score) or tonumber(score) * 1000 <= now_ms or redis.call('EXISTS', KEYS[2]) == 0 then
  return {0, '', 0, '0'}
end
local holder = redis.call('GET', KEYS[3])
if holder then
  local pttl = redis.call('PTTL', KEYS[3])
  if holder == ARGV[2] then return {2, holder, pttl, score} end
  return {3, holder, pttl, score}
end
local lease = math.min(tonumber(ARGV[3]), math.floor(tonumber(score) * 1000 - now_ms))
if lease < 1 then lease = 1 end
redis.call('SET', KEYS[3], ARGV[2], 'PX', lease)
return {1, ARGV[2], lease, score}
"""

# KEYS: queue, claim. ARGV: task_id, agent_id, lease_ms.
# -> {0} unclaimed | {1, agent, lease_ms} the claimant: lease renewed | {2, holder, pttl} someone else's
_PROPOSAL_LUA = """
local holder = redis.call('GET', KEYS[2])
if not holder then return {0, '', 0, '0'} end
if holder ~= ARGV[2] then return {2, holder, redis.call('PTTL', KEYS[2]), '0'} end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score then lease = math.min(lease, math.floor(tonumber(score) * 1000 - now_ms)) end
if lease < 1 then lease = 1 end
redis.call('PEXPIRE', KEYS[2], lease)
return {1, holder, lease, score or '0'}
"""

CLAIM_NO_TASK, CLAIM_WON, CLAIM_ALREADY_YOURS, CLAIM_TAKEN = 0, 1, 2, 3


@dataclass(frozen=True)
class ClaimOutcome:
    code: int  # CLAIM_* or PROPOSAL_*
    holder: str | None
    lease_remaining_s: float
    task_expires_at: float | None  # None when unknown


def _outcome(result: list) -> ClaimOutcome:
    code, holder, ms, score = int(result[0]), result[1], int(result[2]), float(result[3])
    holder = holder.decode() if isinstance(holder, bytes) else holder
    return ClaimOutcome(code, holder or None, max(ms, 0) / 1000, score or None)


async def claim(redis: aioredis.Redis, task_id: str, agent_id: str, lease_s: float) -> ClaimOutcome:
    """Atomically claim a live task for ``agent_id`` for ``lease_s`` (never past the task's expiry)."""
    result = await redis.eval(
        _CLAIM_LUA,
        3,
        keys.AGENT_TASKS_QUEUE,
        keys.agent_task(task_id),
        keys.agent_task_claim(task_id),
        task_id,
        agent_id,
        max(1, int(lease_s * 1000)),
    )
    return _outcome(result)


PROPOSAL_UNCLAIMED, PROPOSAL_BY_CLAIMANT, PROPOSAL_CLAIMED_BY_OTHER = 0, 1, 2


async def check_proposal(redis: aioredis.Redis, task_id: str, agent_id: str, lease_s: float) -> ClaimOutcome:
    """A mutation is being proposed for ``task_id``: refuse it (code 2) while another agent holds
    the claim; renew the lease when it comes from the claimant (code 1)."""
    result = await redis.eval(
        _PROPOSAL_LUA,
        2,
        keys.AGENT_TASKS_QUEUE,
        keys.agent_task_claim(task_id),
        task_id,
        agent_id,
        max(1, int(lease_s * 1000)),
    )
    return _outcome(result)
