"""The container is the boundary: even code that slips past the gatekeeper is contained.

These tests talk to a trait-host container directly (bypassing the gatekeeper on purpose) and
run the sandbox trial outside Temporal."""

from __future__ import annotations

import json
import subprocess

import docker
import pytest

from activities.sandbox import run_trial
from genesis import rules
from genesis.config import Settings
from genesis.dto import SandboxRequest
from sandbox import image
from sandbox.container import IsolationLimits, TraitHostContainer, memory_bytes
from tests import trait_hosts, traits
from tests.isolation import assert_isolated

# Reaches `os` through the classic subclass walk (which the gatekeeper rejects) and reports what
# it could do through the one channel it has: the entity's `state` intent.
ESCAPE_ATTEMPT = """
class Escape:
    async def execute(self, entity) -> None:
        os_globals = None
        for cls in ().__class__.__base__.__subclasses__():
            if cls.__name__ == "_wrap_close":
                os_globals = cls.__init__.__globals__
        report = ["uid=%d" % os_globals["getuid"]()]
        try:
            os_globals["open"]("/opt/genesis/pwned", os_globals["O_CREAT"] | os_globals["O_WRONLY"])
            report.append("write=ok")
        except OSError as exc:
            report.append("write=%s" % exc.strerror)
        try:
            import socket
            socket.create_connection(("127.0.0.1", 5432), timeout=0.2)
            report.append("net=ok")
        except Exception as exc:
            report.append("net=%s" % type(exc).__name__)
        for name, call in (("kill", lambda: os_globals["kill"](1, 0)), ("fork", os_globals["fork"])):
            try:
                if call() == 0 and name == "fork":
                    os_globals["_exit"](0)
                report.append(name + "=ok")
            except OSError as exc:
                report.append("%s=%s" % (name, exc.strerror))
        entity.state = ";".join(report)
"""


@pytest.fixture(scope="module")
def client():
    client = docker.from_env()
    image.ensure(client)
    return client


def test_container_runs_with_every_isolation_flag(client):
    with TraitHostContainer(client, image.image_tag(), IsolationLimits("64m", 32, 1.0), "test-flags") as host:
        host.say_hello(trait_hosts.hello(), 20)
        attrs = client.containers.get(host.id).attrs
    assert_isolated(attrs, 64 * 1024 * 1024)
    assert not attrs["Mounts"], "no host mounts inside the sandbox"


def test_code_past_the_gatekeeper_is_still_contained(client):
    with trait_hosts.start(client, "test-escape") as host:
        loaded = trait_hosts.load(host, "escape", ESCAPE_ATTEMPT)
        assert loaded["ok"], loaded
        world = trait_hosts.world(["escape"], population=1)
        reply = trait_hosts.tick(host, world, ["escape"])
    result = reply["results"]["escape"]
    assert not result["errors"], result
    [intents] = reply["intents"].values()
    state = dict(part.split("=", 1) for part in intents[0][2].split(";"))
    assert state["uid"] == "10001", "non-root inside the container"
    assert state["write"] == "Read-only file system"
    # The guarded import refuses `socket`; with no network the host's Postgres is unreachable anyway.
    assert state["net"] in ("ImportError", "ConnectionRefusedError", "OSError")
    # Its process may not signal another (another agent's, the supervisor) nor start one.
    assert state["kill"] == state["fork"] == "Operation not permitted", state


def test_trial_reports_fps_drop_when_the_trait_costs_too_much(client):
    # A minimum fps no trait can meet exercises the verdict without a timing-sensitive trait.
    settings = Settings().override(sandbox_min_fps=1e9, sandbox_ticks=5)
    request = SandboxRequest(
        mutation_id="mut_fpsdrop0001",
        trait_name="energy_hoarder",
        class_name="EnergyHoarderTrait",
        code=traits.SEED_EXAMPLE,
    )
    report = run_trial(request, settings, client)
    assert report.verdict == "SANDBOX_FPS_DROP"
    assert 5 <= report.ticks_run < 10 and report.calls > 0
    assert "below the minimum" in report.summary


def test_trial_of_a_good_trait_applies_its_intents(client):
    request = SandboxRequest(
        mutation_id="mut_goodtrait0001", trait_name="seeker", class_name="SeekerTrait", code=traits.seeker(1)
    )
    report = run_trial(request, Settings().override(sandbox_ticks=20), client)
    assert report.verdict == "ok", report.summary
    assert report.intents_applied > 0
    assert report.baseline_tick_ms > 0 and report.projected_fps > 0
    assert report.state_hash and len(report.state_hash) == 64
    assert abs(report.memory_blocks_per_tick) < 50, report.memory_blocks_per_tick


# Remembers everything it ever saw: its memory grows every call, without bound.
MEMORY_GROWER = """
class MemoryGrower:
    def __init__(self):
        self.seen = []

    async def execute(self, entity) -> None:
        self.seen.append([entity.x, entity.y, entity.energy, entity.age])
"""


def test_trial_fails_a_trait_whose_memory_grows_without_bound(client):
    request = SandboxRequest(
        mutation_id="mut_memgrow0001", trait_name="memory_grower", class_name="MemoryGrower", code=MEMORY_GROWER
    )
    report = run_trial(request, Settings().override(sandbox_ticks=40), client)
    assert report.verdict == "SANDBOX_MEMORY", report.summary
    assert report.memory_blocks_per_tick > 10
    assert "keep per-entity state bounded" in report.summary


def test_the_host_runs_the_python_the_gatekeeper_validates(client):
    """One runtime: the sandbox test and the live world run traits on the same CPython."""
    with TraitHostContainer(client, image.ensure(client), IsolationLimits("256m", 32, 1.0), "test-runtime") as host:
        reply = host.request(trait_hosts.hello(), 20)
    assert reply["ok"] and reply["implementation"] == "cpython"
    assert tuple(int(part) for part in reply["python"].split(".")[:2]) == rules.TRAIT_LANGUAGE == rules.trait_language()


HOARDER = """
class Hoarder:
    async def execute(self, entity) -> None:
        entity.state = "got %d" % len([0] * 100_000_000)
"""


def test_a_trait_that_hoards_memory_meets_a_memory_error_and_the_host_lives_on(client):
    """Each agent's process has an address-space limit of its own (trait_worker_memory_mb): the
    hoarder's allocation fails inside its call, long before the container's limit."""
    with trait_hosts.start(client, "test-hoard", IsolationLimits("256m", 32, 1.0)) as host:
        assert trait_hosts.load(host, "hoard", HOARDER)["ok"]
        reply = trait_hosts.tick(host, trait_hosts.world(["hoard"], population=1), ["hoard"], deadline_s=20)
        [error] = reply["results"]["hoard"]["errors"]
        assert error["error"].startswith("MemoryError"), error
        assert host.request(trait_hosts.hello(), 10)["ok"], "the host still answers"


@pytest.mark.parametrize(
    "limit, expected",
    [("64m", 64 * 2**20), ("1g", 2**30), ("512k", 512 * 2**10), ("1048576", 2**20), ("256MB", 256 * 2**20)],
)
def test_memory_limits_in_docker_notation(limit, expected):
    assert memory_bytes(limit) == expected


def test_the_image_runs_the_host_as_its_command(client):
    tag = image.ensure(client)
    assert tag.split(":")[1].startswith("cpython-")
    out = subprocess.run(
        ["docker", "run", "-i", "--rm", "--network", "none", "--read-only", tag, *image.COMMAND],
        input=json.dumps(trait_hosts.hello()) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    reply = json.loads(out.splitlines()[0])
    assert reply["ok"] and reply["implementation"] == "cpython"


# Harmless while its carriers are young; raises once they are old (as a live world's are).
OLD_AGE_BOMB = """
class OldAgeBomb:
    async def execute(self, entity) -> None:
        if entity.age > 200:
            raise RuntimeError("old enough")
"""


def test_trial_runs_molbots_of_every_age_for_a_length_no_trait_can_count_to(client):
    """The test world's Molbots are of every age (code gated on an age runs in the test), and the
    test's length is drawn anew each time between sandbox_ticks and twice that."""
    request = SandboxRequest(
        mutation_id="mut_agebomb00001", trait_name="old_age_bomb", class_name="OldAgeBomb", code=OLD_AGE_BOMB
    )
    report = run_trial(request, Settings().override(sandbox_ticks=5), client)
    assert report.verdict == "SANDBOX_EXCEPTION" and "old enough" in (report.first_error or ""), report
    good = SandboxRequest(
        mutation_id="mut_goodtrait0002", trait_name="seeker", class_name="SeekerTrait", code=traits.seeker(1)
    )
    lengths = {
        run_trial(good, Settings().override(sandbox_ticks=5, sandbox_min_fps=1), client).ticks_run for _ in range(6)
    }
    assert lengths <= set(range(5, 10)) and len(lengths) > 1, lengths
