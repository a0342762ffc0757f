"""Step 12: the sandbox test. The live architecture in miniature.

The world core (trusted, ours) runs a seeded test world here in the worker; the trait runs in a
fresh trait-host container speaking the same per-tick protocol as the live engine. The report
compares tick time against a baseline run of the same world without the trait.
"""

from __future__ import annotations

import functools
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import docker
from docker.errors import ImageNotFound
from temporalio import activity

from activities import names
from engine.core.world import World, WorldParams
from genesis.config import Settings
from genesis.dto import FailureCode, SandboxReport, SandboxRequest
from sandbox import image
from sandbox.container import (
    HostCrashed,
    HostDeadlineExceeded,
    IsolationLimits,
    TraitHostContainer,
    hello_message,
    remove_containers_of,
)
from sandbox.host_client import MISSED, HostClient
from sandbox.pool import WarmPool

HOST_START_DEADLINE_S = 20.0  # first answer includes container start on a busy machine
LOST_TICK_RETRIES = 3  # a tick the busy machine kept from finishing is run again
MEMORY_FROM_TICK = 10  # memory growth is measured from here (start-up allocations are done)
BYTES_PER_BLOCK = 64  # a generous mean size of one of Python's memory blocks


def test_world_params() -> WorldParams:
    return WorldParams()


def test_world(seed: int) -> World:
    """The seeded test world, its Molbots of every age up to their lifespans (as in a live world
    that has run a while), so that code gated on an age runs in the test too."""
    world = World(test_world_params(), seed=seed)
    ages = random.Random(seed)
    for entity_id in sorted(world.entities):
        entity = world.entities[entity_id]
        entity.age = ages.randrange(max(1, entity.max_age))
    return world


def sandbox_hello(settings: Settings) -> dict:
    """The hello of a sandbox test's host: its workers get most of the tick deadline."""
    return hello_message(settings, settings.sandbox.tick_deadline_s * 0.8)


def baseline_tick_ms(seed: int, ticks: int) -> float:
    """Mean world-step time without any trait: what the trait's cost is compared against."""
    world = test_world(seed)
    started = time.perf_counter()
    for _ in range(ticks):
        world.step({})
    return (time.perf_counter() - started) * 1000 / ticks


class HostSource(Protocol):
    def new_host(self, owner: str) -> TraitHostContainer: ...
    def retire(self, host: TraitHostContainer) -> None: ...


class ColdHosts:
    """A fresh container per test, removed before the verdict (no pool)."""

    def __init__(self, client: docker.DockerClient, settings: Settings):
        self._client, self._settings = client, settings

    def new_host(self, owner: str) -> TraitHostContainer:
        host = TraitHostContainer(
            self._client,
            image.image_tag(),
            IsolationLimits.from_settings(self._settings),
            owner,
            private_socket=self._settings.sandbox.host_socket,
        )
        try:
            host.say_hello(sandbox_hello(self._settings), HOST_START_DEADLINE_S)
        except BaseException:
            host.close()
            raise
        return host

    def retire(self, host: TraitHostContainer) -> None:
        host.close()


@functools.lru_cache(maxsize=8)
def cached_baseline_tick_ms(seed: int, ticks: int) -> float:
    """The baseline depends only on the (deterministic) test world: measure it once per worker."""
    baseline_tick_ms(seed, ticks)  # warm-up run: first runs pay for imports and allocations
    return baseline_tick_ms(seed, ticks)


def run_trial(
    request: SandboxRequest,
    settings: Settings,
    client: docker.DockerClient,
    heartbeat: Callable[[str], None] = lambda _: None,
    hosts: HostSource | None = None,
) -> SandboxReport:
    """Run the trait for ``settings.sandbox.ticks`` ticks; return the verdict and measurements.

    Raises only for infrastructure problems (Docker unavailable, image cannot be built), which
    the workflow retries; anything the trait does becomes a verdict."""
    owner = request.mutation_id
    tag = image.image_tag()
    if hosts is None:  # a pool checked (or built) its image when it started
        try:
            client.images.get(tag)
        except ImageNotFound:
            heartbeat("building the trait-host image")
            image.build(client)

    # Not a number a trait can count to: between ticks and twice that, drawn for each test.
    ticks = settings.sandbox.ticks + secrets.randbelow(settings.sandbox.ticks)
    baseline_ms = cached_baseline_tick_ms(settings.sandbox.seed, settings.sandbox.ticks)
    world = test_world(settings.sandbox.seed)
    world.give_trait_to_all(request.trait_name)
    report = SandboxReport(verdict="ok", summary="", ticks_run=0, baseline_tick_ms=round(baseline_ms, 3), image=tag)
    call_us_total = call_us_max = 0.0
    trait_us_per_tick: list[float] = []
    roundtrip_ms: list[float] = []
    world_ms: list[float] = []
    rejected: Counter[str] = Counter()

    def finish(verdict: str, summary: str) -> SandboxReport:
        report.verdict, report.summary = verdict, summary
        report.call_us_mean = round(call_us_total / report.calls, 2) if report.calls else 0.0
        report.call_us_max = round(call_us_max, 1)
        report.intents_rejected = dict(rejected)
        if world_ms:  # at least one full tick ran
            report.trait_tick_ms = round(sum(trait_us_per_tick) / len(trait_us_per_tick) / 1000, 4)
            report.roundtrip_ms = round(sum(roundtrip_ms) / len(roundtrip_ms), 3)
            world_step_ms = sum(world_ms) / len(world_ms)
            report.projected_fps = round(1000 / max(world_step_ms + report.trait_tick_ms, 1e-3), 1)
        report.state_hash = world.state_hash()
        return report

    heartbeat("trait host starting")
    hosts = hosts or ColdHosts(client, settings)
    try:
        host = hosts.new_host(owner)
    except (HostDeadlineExceeded, HostCrashed) as exc:  # the host never came up: infrastructure
        raise RuntimeError(f"the trait host did not start: {exc}") from exc
    # A killed earlier attempt may have left containers of this mutation: they go while the test
    # runs (Docker API calls on the critical path cost ~10-30 ms of a verdict).
    leftovers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-leftovers")
    removed = leftovers.submit(remove_containers_of, client, owner, keep=host.id)
    leftovers.shutdown(wait=False)
    try:
        report.container_id = host.id
        trusted = HostClient(host)
        try:
            error = trusted.load(
                request.trait_name, request.code, request.class_name, deadline_s=settings.sandbox.tick_deadline_s
            )
        except HostDeadlineExceeded:
            return finish(FailureCode.SANDBOX_TIMEOUT.value, "loading the trait did not finish in time")
        except HostCrashed as exc:
            return finish(FailureCode.SANDBOX_EXCEPTION.value, f"trait host crashed while loading: {exc}")
        if error is not None:
            report.exceptions = 1
            report.first_error = error
            return finish(FailureCode.SANDBOX_EXCEPTION.value, f"loading the trait failed: {error}")

        run = [request.trait_name]
        prepare_ms = 0.0

        def prepare_step() -> None:
            """As the engine does: the step's preparation overlaps the host's work (timed, as
            part of the world's step)."""
            nonlocal prepare_ms
            began = time.perf_counter()
            world.prepare_step()
            prepare_ms = (time.perf_counter() - began) * 1000

        blocks: dict[int, int] = {}  # tick -> memory blocks of the trait's process after it
        for tick in range(ticks):
            # The live engine's request, through the same client: one protocol, used twice. A tick
            # the busy machine kept from finishing (a lost result) is run again.
            prepare_ms = 0.0
            reply = trusted.tick(
                world.tick,
                world.trait_views(run, raw=True),
                run,
                settings.sandbox.tick_deadline_s,
                agent_of={request.trait_name: ""},  # loaded without an owner: a worker of its own
                complete=True,
                count_blocks=True,
                lost_retries=LOST_TICK_RETRIES,
                while_waiting=prepare_step,
            )
            if isinstance(reply.failure, HostDeadlineExceeded):
                report.timeouts += 1
                return finish(
                    FailureCode.SANDBOX_TIMEOUT.value,
                    f"tick {tick}: the trait host gave no answer within {settings.sandbox.tick_deadline_s}s "
                    "and its container was killed",
                )
            if reply.outcome == MISSED:
                return finish(FailureCode.SANDBOX_EXCEPTION.value, f"tick {tick}: trait host crashed: {reply.why}")
            if not reply.ok:
                return finish(
                    FailureCode.SANDBOX_EXCEPTION.value,
                    f"tick {tick}: the trait host sent malformed intents: {reply.why}",
                )
            elapsed_ms = reply.elapsed_s * 1000
            result = reply.results.get(request.trait_name, {})
            if result.get("killed"):
                report.timeouts += 1
                return finish(
                    FailureCode.SANDBOX_TIMEOUT.value,
                    f"tick {tick}: execute() was stopped from outside its process: {result['killed']}",
                )
            if result.get("lost"):  # nobody's fault, every time
                raise RuntimeError(f"tick {tick} could not finish {reply.lost_retries + 1} times: {result['lost']}")
            blocks[tick] = result.get("blocks", 0)
            report.calls += result.get("calls", 0)
            call_us_total += result.get("total_us", 0.0)
            call_us_max = max(call_us_max, result.get("max_us", 0.0))
            trait_us_per_tick.append(result.get("total_us", 0.0))
            roundtrip_ms.append(max(elapsed_ms - result.get("total_us", 0.0) / 1000, 0.0))
            report.ticks_run = tick + 1
            if result.get("timeouts"):
                report.timeouts += len(result["timeouts"])
                return finish(
                    FailureCode.SANDBOX_TIMEOUT.value,
                    f"tick {tick}: execute() exceeded {settings.sandbox.call_timeout_ms:g} ms of CPU "
                    f"for {len(result['timeouts'])} entit{'y' if len(result['timeouts']) == 1 else 'ies'}",
                )
            if result.get("errors"):
                report.exceptions += result.get("error_count", len(result["errors"]))
                report.first_error = result["errors"][0]["error"]
                return finish(
                    FailureCode.SANDBOX_EXCEPTION.value, f"tick {tick}: execute() raised {report.first_error}"
                )
            intents = reply.intents
            stepped = time.perf_counter()
            tick_report = world.step(intents, lazy_write_back=True)
            world_ms.append((time.perf_counter() - stepped) * 1000 + prepare_ms)
            for _entity_id, reason in tick_report.rejected_intents:
                rejected[reason] += 1
            report.intents_applied += sum(len(v) for v in intents.values()) - len(tick_report.rejected_intents)
            if tick % 10 == 0:
                heartbeat(f"tick {tick}/{ticks}")
    finally:
        hosts.retire(host)
        if removed.result():
            heartbeat(f"removed {removed.result()} container(s) of an earlier attempt")

    finish("ok", "")
    first, last = min(MEMORY_FROM_TICK, ticks - 1), ticks - 1
    if last > first and first in blocks and last in blocks:
        report.memory_blocks_per_tick = round((blocks[last] - blocks[first]) / (last - first), 2)
    projected_mb = report.memory_blocks_per_tick * BYTES_PER_BLOCK * settings.sandbox.memory_horizon_ticks / 2**20
    if projected_mb > settings.trait.worker_memory_mb:
        report.verdict = FailureCode.SANDBOX_MEMORY.value
        report.summary = (
            f"the trait's memory grew by {report.memory_blocks_per_tick:g} blocks per tick for "
            f"{len(world.entities)} entities: about {projected_mb:.0f} MB within "
            f"{settings.sandbox.memory_horizon_ticks} live ticks, over the {settings.trait.worker_memory_mb} MB "
            "a trait's process may use (keep per-entity state bounded)"
        )
    elif report.intents_applied == 0 and report.intents_rejected:
        report.verdict = FailureCode.SANDBOX_INTENTS_REFUSED.value
        report.summary = (
            f"every one of its {sum(report.intents_rejected.values())} intents was refused "
            f"({refusals(report.intents_rejected)}): it would do nothing live either; write values of the "
            "types and ranges GET /api/agents/context/sandbox-api gives, to writable attributes only"
        )
    elif report.projected_fps < settings.sandbox.min_fps:
        report.verdict = FailureCode.SANDBOX_FPS_DROP.value
        report.summary = (
            f"the trait costs {report.trait_tick_ms:.2f} ms per tick for {len(world.entities)} entities: "
            f"projected {report.projected_fps:.0f} fps, below the minimum of {settings.sandbox.min_fps:g}"
        )
    else:
        report.summary = (
            f"{report.ticks_run} ticks, {report.calls} calls, mean {report.call_us_mean:g} µs per call, "
            f"projected {report.projected_fps:.0f} fps"
        )
        refused = sum(report.intents_rejected.values())
        if refused:
            report.warnings.append(
                f"{refused} of its {refused + report.intents_applied} intents were refused "
                f"({refusals(report.intents_rejected)})"
            )
        elif report.intents_applied == 0:
            report.warnings.append(
                f"it never acted: no intent in {report.calls} calls (it changed nothing in the test world)"
            )
    return report


def refusals(rejected: dict[str, int]) -> str:
    """The refused intents by reason, most first: ``bad_type 2000, read_only_attr 3``."""
    return ", ".join(f"{reason} {count}" for reason, count in sorted(rejected.items(), key=lambda kv: -kv[1]))


class SandboxActivities:
    def __init__(self, settings: Settings):
        self._settings = settings
        self._client = docker.from_env(timeout=60)
        self.pool: WarmPool | None = None
        if settings.sandbox.pool_size > 0:
            self.pool = WarmPool(
                self._client,
                image.ensure(self._client),
                IsolationLimits.from_settings(settings),
                settings.sandbox.pool_size,
                sandbox_hello(settings),
                settings.sandbox.host_socket,
            ).start()

    @property
    def client(self) -> docker.DockerClient:
        return self._client

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    @activity.defn(name=names.RUN_SANDBOX_TEST)
    def run_sandbox_test(self, request: SandboxRequest) -> SandboxReport:
        """Sync activity (the Docker SDK blocks) on the worker's thread pool, with heartbeats.
        Returns the verdict and writes nothing: the mutation's status is its workflow's to record."""
        info = activity.info()
        activity.logger.info("sandbox test of %s, attempt %d", request.mutation_id, info.attempt)
        report = run_trial(
            request,
            self._settings,
            self._client,
            heartbeat=activity.heartbeat,
            hosts=self.pool,
        )
        activity.logger.info("sandbox verdict %s for %s: %s", report.verdict, request.mutation_id, report.summary)
        return report
