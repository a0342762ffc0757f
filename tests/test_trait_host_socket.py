"""The live engine's trait host answers over a private Unix socket (sandbox/container.py) with
every isolation flag of the docker-attach host, one extra read-only mount, and nothing left behind."""

from __future__ import annotations

import os
import stat
import tempfile

import docker
import pytest

from sandbox import image
from tests.isolation import assert_isolated
from sandbox.container import (
    LABEL_OWNER,
    LABEL_ROLE,
    LABEL_SOCKET_DIR,
    ROLE_TRAIT_HOST,
    SOCKET_DIR_IN_CONTAINER,
    SOCKET_DIR_PREFIX,
    HostCrashed,
    HostDeadlineExceeded,
    IsolationLimits,
    TraitHostContainer,
    remove_abandoned_trait_hosts,
)

BUSY = '''class Busy:
    async def execute(self, entity) -> None:
        while True:
            pass
'''

STATE_WRITER = '''class Writer:
    async def execute(self, entity) -> None:
        entity.state = "seen %d" % entity.id
'''


@pytest.fixture(scope="module")
def client():
    client = docker.from_env()
    image.ensure(client, image.engine_runtime())
    return client


def start(client: docker.DockerClient, owner: str) -> TraitHostContainer:
    runtime = image.engine_runtime()
    host = TraitHostContainer(client, image.ensure(client, runtime), IsolationLimits("256m", 32, 1.0), owner, runtime,
                              private_socket=True)
    host.say_hello(call_timeout_ms=50, deadline_s=20)
    return host


def test_socket_host_keeps_every_isolation_flag_and_its_only_mount_is_read_only(client):
    with start(client, "test-socket-flags") as host:
        assert not host.framed, "root may chown the directory: the socket is used"
        socket_dir = host._socket_dir
        info = os.stat(socket_dir)
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == image.SANDBOX_UID
        attrs = client.containers.get(host.id).attrs
        assert_isolated(attrs, 256 * 1024 * 1024)
        mounts = attrs["Mounts"]
        assert [(m["Type"], m["Source"], m["Destination"], m["RW"]) for m in mounts] == [
            ("bind", socket_dir, SOCKET_DIR_IN_CONTAINER, False)
        ]
        loaded = host.request({"op": "load", "trait": "writer", "source": STATE_WRITER, "class_name": "Writer"}, 10)
        assert loaded["ok"], loaded
        reply = host.request({"op": "tick", "tick": 0, "batches": {"writer": [{"id": 7}]}}, 10)
        assert reply["results"]["writer"]["intents"] == [[7, [["set", "state", "seen 7"]]]]
    assert not os.path.exists(socket_dir), "the private directory goes with the container"


def test_socket_host_that_hangs_is_killed_at_the_deadline_and_one_that_dies_is_reported(client):
    host = start(client, "test-socket-hang")
    try:
        assert host.request({"op": "load", "trait": "busy", "source": BUSY, "class_name": "Busy"}, 10)["ok"]
        # the per-call CPU budget stops the busy loop: the host answers with a timeout, not a hang
        reply = host.request({"op": "tick", "tick": 0, "batches": {"busy": [{"id": 1}]}}, 10)
        assert reply["results"]["busy"]["timeouts"] == [1]
        client.containers.get(host.id).kill(signal="SIGSTOP")  # frozen: no answer ever comes
        with pytest.raises(HostDeadlineExceeded):
            host.request({"op": "tick", "tick": 1, "batches": {"busy": [{"id": 1}]}}, 0.5)
    finally:
        host.close()
    dying = start(client, "test-socket-dies")
    try:
        client.containers.get(dying.id).kill()
        with pytest.raises(HostCrashed):
            dying.request({"op": "tick", "tick": 0, "batches": {}}, 5)
    finally:
        dying.close()


def test_work_done_while_waiting_does_not_count_against_the_hosts_deadline(client):
    """The engine builds telemetry while the host computes (engine/loop.py); however long that
    takes, a host that answered in time is not killed, and the work's failure is only logged."""
    import time

    with start(client, "test-socket-while-waiting") as host:
        assert host.request({"op": "load", "trait": "writer", "source": STATE_WRITER, "class_name": "Writer"}, 10)["ok"]
        ran = []

        def slow_work() -> None:
            time.sleep(0.6)  # three times the deadline below
            ran.append(True)

        reply = host.request({"op": "tick", "tick": 0, "batches": {"writer": [{"id": 3}]}}, 0.2, slow_work)
        assert ran and reply["results"]["writer"]["intents"] == [[3, [["set", "state", "seen 3"]]]]

        def failing_work() -> None:
            raise RuntimeError("telemetry broke")

        reply = host.request({"op": "tick", "tick": 1, "batches": {"writer": [{"id": 4}]}}, 5, failing_work)
        assert reply["results"]["writer"]["intents"] == [[4, [["set", "state", "seen 4"]]]]


def test_the_socket_directory_of_a_host_whose_engine_died_is_removed_with_its_container(client):
    host = start(client, "test-socket-orphan")
    socket_dir = host._socket_dir
    container = client.containers.get(host.id)
    try:
        host.disconnect()  # as when the engine is killed: the host reads EOF and exits
        assert container.wait(timeout=20)["StatusCode"] == 0
        assert os.path.isdir(socket_dir)
        remove_abandoned_trait_hosts(client)  # what the next engine does before starting its host
        assert not os.path.exists(socket_dir)
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(host.id)
    finally:
        host.close()


def test_a_host_created_but_never_started_is_removed_once_it_is_older_than_the_grace(client):
    """A worker killed while its pool was refilling leaves a container in "created" behind."""
    socket_dir = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)
    labels = {LABEL_ROLE: ROLE_TRAIT_HOST, LABEL_OWNER: "test-never-started", LABEL_SOCKET_DIR: socket_dir}
    container = client.containers.create(image.ensure(client, image.engine_runtime()), labels=labels,
                                         network_mode="none")
    try:
        remove_abandoned_trait_hosts(client)  # young: may be between another process's create and start
        assert client.containers.get(container.id).status == "created" and os.path.isdir(socket_dir)
        remove_abandoned_trait_hosts(client, created_grace_s=-1)  # as if the grace had passed
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(container.id)
        assert not os.path.exists(socket_dir)
    finally:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
