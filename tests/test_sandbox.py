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
from sandbox.container import IsolationLimits, TraitHostContainer, hello_message, memory_bytes
from tests import traits
from tests.isolation import assert_isolated

# Reaches `os` through the classic subclass walk (which the gatekeeper rejects) and reports what
# it could do through the one channel it has: the entity's `state` intent.
ESCAPE_ATTEMPT = '''
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
        entity.state = ";".join(report)
'''


@pytest.fixture(scope="module")
def client():
    client = docker.from_env()
    image.ensure(client)
    return client


def hello(host: TraitHostContainer) -> None:
    host.say_hello(call_timeout_ms=50, deadline_s=20)


def test_container_runs_with_every_isolation_flag(client):
    with TraitHostContainer(client, image.image_tag(), IsolationLimits("64m", 32, 1.0), "test-flags") as host:
        hello(host)
        attrs = client.containers.get(host.id).attrs
    assert_isolated(attrs, 64 * 1024 * 1024)
    assert not attrs["Mounts"], "no host mounts inside the sandbox"


@pytest.mark.parametrize("name", ["cpython", "pypy"])  # the sandbox test's and the live world's
def test_code_past_the_gatekeeper_is_still_contained(client, name):
    runtime = image.runtime(name)
    with TraitHostContainer(client, image.ensure(client, runtime), IsolationLimits("256m", 32, 1.0),
                            "test-escape", runtime) as host:
        hello(host)
        loaded = host.request({"op": "load", "trait": "escape", "source": ESCAPE_ATTEMPT, "class_name": "Escape"}, 10)
        assert loaded["ok"], loaded
        reply = host.request({"op": "tick", "tick": 0, "batches": {"escape": [{"id": 1, "state": ""}]}}, 10)
    result = reply["results"]["escape"]
    assert not result["errors"], result
    [[entity_id, intents]] = result["intents"]
    state = dict(part.split("=", 1) for part in intents[0][2].split(";"))
    assert state["uid"] == "10001", "non-root inside the container"
    assert state["write"] == "Read-only file system"
    # The guarded import refuses `socket`; with no network the host's Postgres is unreachable anyway.
    assert state["net"] in ("ImportError", "ConnectionRefusedError", "OSError")


def test_trial_reports_fps_drop_when_the_trait_costs_too_much(client):
    # A minimum fps no trait can meet exercises the verdict without a timing-sensitive trait.
    settings = Settings(sandbox_min_fps=1e9, sandbox_ticks=5)
    request = SandboxRequest(mutation_id="mut_fpsdrop0001", trait_name="energy_hoarder",
                             class_name="EnergyHoarderTrait", code=traits.SEED_EXAMPLE)
    report = run_trial(request, settings, client)
    assert report.verdict == "SANDBOX_FPS_DROP"
    assert report.ticks_run == 5 and report.calls > 0
    assert "below the minimum" in report.summary


def test_trial_of_a_good_trait_applies_its_intents(client):
    request = SandboxRequest(mutation_id="mut_goodtrait0001", trait_name="seeker", class_name="SeekerTrait",
                             code=traits.seeker(1))
    report = run_trial(request, Settings(sandbox_ticks=20), client)
    assert report.verdict == "ok", report.summary
    assert report.intents_applied > 0
    assert report.baseline_tick_ms > 0 and report.projected_fps > 0
    assert report.state_hash and len(report.state_hash) == 64


@pytest.mark.parametrize("role", ["sandbox", "engine"])
def test_hosts_run_on_the_configured_runtimes(client, role):
    """The sandbox test on GENESIS_SANDBOX_RUNTIME, the live world on GENESIS_TRAIT_HOST_RUNTIME."""
    settings = Settings()
    runtime = image.sandbox_runtime() if role == "sandbox" else image.engine_runtime()
    assert runtime.name == (settings.sandbox_runtime if role == "sandbox" else settings.trait_host_runtime)
    tag = image.ensure(client, runtime)
    with TraitHostContainer(client, tag, IsolationLimits("256m", 32, 1.0), f"test-runtime-{role}", runtime) as host:
        reply = host.request(hello_message(50), 20)
    assert reply["ok"] and reply["implementation"] == runtime.name
    assert tuple(int(part) for part in reply["python"].split(".")[:2]) == runtime.language
    assert rules.trait_language() <= runtime.language  # what the gatekeeper passes parses here


HOARDER = '''
class Hoarder:
    async def execute(self, entity) -> None:
        entity.state = "got %d" % len([0] * 100_000_000)
'''


def test_a_trait_that_hoards_memory_meets_a_memory_error_and_the_host_lives_on(client):
    pypy = image.runtime("pypy")  # PyPy's heap ceiling (PYPY_GC_MAX); CPython has none to set
    limits = IsolationLimits("128m", 32, 1.0)
    assert limits.environment(pypy) == {"PYPY_GC_MAX": "64MB"}
    assert limits.environment(image.runtime("cpython")) == {}
    with TraitHostContainer(client, image.ensure(client, pypy), limits, "test-hoard", pypy) as host:
        hello(host)
        assert host.request({"op": "load", "trait": "hoard", "source": HOARDER, "class_name": "Hoarder"}, 10)["ok"]
        reply = host.request({"op": "tick", "tick": 0, "batches": {"hoard": [{"id": 1, "state": ""}]}}, 20)
        assert reply["ok"], reply
        [error] = reply["results"]["hoard"]["errors"]
        assert error["error"].startswith("MemoryError"), error
        assert host.request(hello_message(50), 10)["ok"], "the host still answers"


@pytest.mark.parametrize("limit, expected", [("64m", 64 * 2**20), ("1g", 2**30), ("512k", 512 * 2**10),
                                             ("1048576", 2**20), ("256MB", 256 * 2**20)])
def test_memory_limits_in_docker_notation(limit, expected):
    assert memory_bytes(limit) == expected


@pytest.mark.parametrize("name", ["pypy", "cpython"])
def test_each_runtime_builds_an_image_that_runs_the_host(client, name):
    """Either runtime can serve either role: one image each, the same protocol; building one
    never removes the other's image."""
    runtime = image.runtime(name)
    tag = image.ensure(client, runtime)
    assert tag.split(":")[1].startswith(f"{name}-")
    out = subprocess.run(
        ["docker", "run", "-i", "--rm", "--network", "none", "--read-only", tag, *runtime.command],
        input=json.dumps(hello_message(50)) + "\n", capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    reply = json.loads(out.splitlines()[0])
    assert reply["ok"] and reply["implementation"] == name
    for other in image.both_runtimes():
        client.images.get(image.image_tag(other))
