"""The task board as stack tests use it: a valid task, publishing one, waiting until it is listed or gone."""

from __future__ import annotations

import asyncio
import time

VALID = {"problem_type": "starvation", "severity": "high", "description": "Average energy fell to 20%."}


async def listed(http) -> dict[str, dict]:
    response = await http.get("/api/agents/context/tasks")
    assert response.status_code == 200, response.text
    return {t["task_id"]: t for t in response.json()["tasks"]}


async def wait_listed(http, task_id: str, present: bool = True, timeout_s: float = 15) -> dict | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tasks_now = await listed(http)
        if (task_id in tasks_now) == present:
            return tasks_now.get(task_id)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{task_id} {'never appeared' if present else 'still listed'} after {timeout_s}s")


async def publish(http, **fields) -> dict:
    response = await http.post("/api/agents/tasks", json={**VALID, **fields})
    assert response.status_code == 201, response.text
    body = response.json()
    await wait_listed(http, body["task_id"])
    return body
