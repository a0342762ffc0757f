"""The warm sandbox pool (sandbox/pool.py) on the real Docker engine: a test takes a started,
greeted container at once; each container serves one mutation and is then destroyed; the pool
refills in the background and never holds more than its size, however many tests run at once."""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import docker
import pytest

from genesis.config import Settings
from sandbox import image
from sandbox.container import IsolationLimits, containers_of
from sandbox.pool import WarmPool
from tests import trait_hosts

SIZE = 2


@pytest.fixture(scope="module")
def client():
    client = docker.from_env()
    image.ensure(client)
    return client


@pytest.fixture
def pool(client):
    # As the worker runs it: hosts on a private Unix socket (GENESIS_SANDBOX_HOST_SOCKET, default on)
    pool = WarmPool(
        client,
        image.image_tag(),
        IsolationLimits("256m", 32, 1.0),
        SIZE,
        trait_hosts.hello(),
        private_socket=Settings().sandbox.host_socket,
    ).start()
    yield pool
    pool.close()


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_test_gets_a_warm_greeted_container_that_serves_only_its_mutation(client, pool):
    wait_for(lambda: pool.idle_count() == SIZE, 60, "the pool to fill")
    owner = f"mut_{uuid.uuid4().hex[:12]}"
    started = time.perf_counter()
    host = pool.new_host(owner)
    taken_ms = (time.perf_counter() - started) * 1000
    assert pool.warm_hits == 1 and pool.cold_starts == 0
    assert taken_ms < 300, f"a warm container should be handed out at once, took {taken_ms:.0f} ms"
    assert host.request(trait_hosts.hello(), 5)["ok"]
    assert not host.framed, "the test talks to its host over the private socket, not docker attach"
    socket_dir = host._socket_dir
    # renamed for the mutation it serves (in the background: the test does not wait for Docker)
    wait_for(
        lambda: [c.id for c in containers_of(client, owner)] == [host.id],
        10,
        "the container to be named after its mutation",
    )
    pool.retire(host)
    wait_for(lambda: not containers_of(client, owner), 30, "the used container to be destroyed")
    wait_for(lambda: not os.path.exists(socket_dir), 10, "its private socket directory to go with it")
    again = pool.new_host(f"mut_{uuid.uuid4().hex[:12]}")
    assert again.id != host.id, "a container never serves a second mutation"
    pool.retire(again)


def test_under_load_the_pool_never_exceeds_its_size_and_refills(client, pool):
    wait_for(lambda: pool.idle_count() == SIZE, 60, "the pool to fill")
    owners = [f"mut_{uuid.uuid4().hex[:12]}" for _ in range(6)]
    peak = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak[0] = max(peak[0], pool.idle_count())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:

        def one_test(owner: str) -> str:
            host = pool.new_host(owner)
            try:
                assert host.request(trait_hosts.hello(), 10)["ok"]
                time.sleep(0.2)  # a test's worth of work
                return host.id
            finally:
                pool.retire(host)

        with ThreadPoolExecutor(max_workers=len(owners)) as executor:
            ids = list(executor.map(one_test, owners))
        assert len(set(ids)) == len(owners), "every test had a container of its own"
        assert pool.warm_hits + pool.cold_starts == len(owners) and pool.warm_hits <= SIZE
        wait_for(lambda: pool.idle_count() == SIZE, 60, "the pool to refill")
        for owner in owners:
            wait_for(lambda owner=owner: not containers_of(client, owner), 30, f"{owner}'s container to go")
    finally:
        sampling.set()
        sampler.join()
    assert peak[0] <= SIZE, f"the pool held {peak[0]} idle containers (size {SIZE})"
