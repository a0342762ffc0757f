"""The live engine's trait host answers over a private Unix socket (sandbox/container.py) with
every isolation flag of the docker-attach host, one extra read-only mount, and nothing left behind."""

from __future__ import annotations

import os
import stat
import tempfile

import docker
import pytest

from genesis.trait_wire import decode_intent_groups
from sandbox import image
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
from tests import trait_hosts
from tests.isolation import assert_isolated

BUSY = """class Busy:
    async def execute(self, entity) -> None:
        while True:
            pass
"""

STATE_WRITER = """class Writer:
    async def execute(self, entity) -> None:
        entity.state = "seen %d" % entity.id
"""


@pytest.fixture(scope="module")
def client():
    client = docker.from_env()
    image.ensure(client)
    return client


def start(client: docker.DockerClient, owner: str) -> TraitHostContainer:
    return trait_hosts.start(client, owner, IsolationLimits("256m", 32, 1.0), private_socket=True)


def writer_tick(host: TraitHostContainer, deadline_s: float = 10.0, while_waiting=None) -> dict:
    """One tick of a one-entity world carrying the writer: its intents by entity id."""
    world = trait_hosts.world(["writer"], population=1)
    reply = host.request(
        {"op": "views", "tick": 0, **world.trait_views(["writer"], raw=True), "run": ["writer"]},
        deadline_s,
        while_waiting,
    )
    assert reply["ok"], reply
    [entity_id] = world.entities
    intents = dict(decode_intent_groups(reply["intent_groups"], reply.get("attachment")))
    assert intents == {entity_id: [["set", "state", f"seen {entity_id}"]]}, intents
    return intents


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
        loaded = trait_hosts.load(host, "writer", STATE_WRITER)
        assert loaded["ok"], loaded
        writer_tick(host)  # over the socket, with binary attachments both ways
    assert not os.path.exists(socket_dir), "the private directory goes with the container"


def test_socket_host_that_hangs_is_killed_at_the_deadline_and_one_that_dies_is_reported(client):
    host = start(client, "test-socket-hang")
    try:
        assert trait_hosts.load(host, "busy", BUSY)["ok"]
        world = trait_hosts.world(["busy"], population=1)
        # the per-call CPU budget stops the busy loop: the host answers with a timeout, not a hang
        reply = trait_hosts.tick(host, world, ["busy"])
        assert reply["results"]["busy"]["timeouts"] == list(world.entities)
        client.containers.get(host.id).kill(signal="SIGSTOP")  # frozen: no answer ever comes
        with pytest.raises(HostDeadlineExceeded):
            host.request({"op": "views", "tick": 1, **world.trait_views(["busy"]), "run": ["busy"]}, 0.5)
    finally:
        host.close()
    dying = start(client, "test-socket-dies")
    try:
        client.containers.get(dying.id).kill()
        with pytest.raises(HostCrashed):
            dying.request({"op": "stats"}, 5)
    finally:
        dying.close()


def test_work_done_while_waiting_does_not_count_against_the_hosts_deadline(client):
    """The engine builds telemetry while the host computes (engine/process/loop.py); however long that
    takes, a host that answered in time is not killed, and the work's failure is only logged."""
    import time

    with start(client, "test-socket-while-waiting") as host:
        assert trait_hosts.load(host, "writer", STATE_WRITER)["ok"]
        ran = []

        def slow_work() -> None:
            time.sleep(0.6)  # three times the deadline below
            ran.append(True)

        writer_tick(host, 0.2, slow_work)
        assert ran

        def failing_work() -> None:
            raise RuntimeError("telemetry broke")

        writer_tick(host, 5, failing_work)


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
    container = client.containers.create(image.ensure(client), labels=labels, network_mode="none")
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
