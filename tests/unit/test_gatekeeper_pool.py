"""The gatekeeper process pool (genesis/gatekeeper_pool.py) the worker validates with: real
helper processes over real pipes; the same verdicts as in-process; helpers that die are
replaced without losing a request, and an input that kills helpers is rejected, not retried
forever. No services."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from genesis import gatekeeper
from genesis.gatekeeper_pool import CRASHES, GatekeeperPool, GatekeeperUnavailable
from tests.unit.test_gatekeeper_native import corpus


@pytest.fixture
async def pool():
    gate_pool = GatekeeperPool(2)
    yield gate_pool
    await gate_pool.close()


async def wait_for_new_pids(gate_pool: GatekeeperPool, old: list[int]) -> list[int]:
    for _ in range(200):
        if set(gate_pool.pids) - set(old):
            return gate_pool.pids
        await asyncio.sleep(0.01)
    raise AssertionError(f"no helper replaced {old}")


async def test_pool_gives_the_in_process_verdicts_concurrently(pool: GatekeeperPool) -> None:
    sources = list(corpus().items()) * 5
    results = await asyncio.gather(*(pool.validate("probe", code) for _, code in sources))
    for (name, code), result in zip(sources, results):
        assert result == gatekeeper.validate("probe", code), name
    assert {result.failure_code for result in results} >= {None, "SYNTAX_ERROR", "AST_IMPORT_FORBIDDEN"}
    await pool.parse("x = 1")  # the benchmark's baseline request


async def test_a_killed_helper_loses_no_request_and_is_replaced(pool: GatekeeperPool) -> None:
    code = corpus()["SEED_EXAMPLE"]
    expected = gatekeeper.validate("seed", code)
    await pool.validate("seed", code)  # both helpers attached
    victim = pool.pids[0]
    os.kill(victim, signal.SIGSTOP)  # requests queue in its pipe, unanswered
    requests = [asyncio.ensure_future(pool.validate("seed", code)) for _ in range(20)]
    await asyncio.sleep(0.05)
    os.kill(victim, signal.SIGKILL)
    results = await asyncio.wait_for(asyncio.gather(*requests), timeout=30)
    assert all(result == expected for result in results)
    assert victim not in await wait_for_new_pids(pool, [victim])
    assert await pool.validate("seed", code) == expected


async def test_an_input_that_kills_helpers_is_rejected_not_retried_forever() -> None:
    """Stand-in for a crashing input: the helper holding the request dies each time."""
    gate_pool = GatekeeperPool(1)
    try:
        code = corpus()["SEED_EXAMPLE"]
        await gate_pool.validate("seed", code)
        victims = [gate_pool.pids[0]]
        os.kill(victims[0], signal.SIGSTOP)
        request = asyncio.ensure_future(gate_pool.validate("seed", code))
        await asyncio.sleep(0.05)
        for crash in range(CRASHES):
            os.kill(victims[-1], signal.SIGKILL)
            if crash + 1 < CRASHES:  # the request moves to a fresh helper, still importing: kill it too
                victims.append((await wait_for_new_pids(gate_pool, victims))[0])
        result = await asyncio.wait_for(request, timeout=30)
        assert not result.ok
        assert result.failure_code == "SYNTAX_ERROR"
        assert result.validation_log[-1].startswith(f"AST parse: FAILED — the gatekeeper process died {CRASHES} times")
        assert await gate_pool.validate("seed", code) == gatekeeper.validate("seed", code)  # the pool recovered
    finally:
        await gate_pool.close()


async def test_close_fails_pending_requests_and_stops_the_helpers() -> None:
    gate_pool = GatekeeperPool(1)
    await gate_pool.validate("seed", corpus()["SEED_EXAMPLE"])
    helper = gate_pool.pids[0]
    os.kill(helper, signal.SIGSTOP)
    pending = asyncio.ensure_future(gate_pool.validate("seed", corpus()["SEED_EXAMPLE"]))
    await asyncio.sleep(0.05)
    os.kill(helper, signal.SIGCONT)
    await gate_pool.close()
    with pytest.raises(GatekeeperUnavailable):
        await pending
    with pytest.raises(GatekeeperUnavailable):
        await gate_pool.validate("seed", "x = 1")
    with pytest.raises(ProcessLookupError):
        os.kill(helper, 0)
