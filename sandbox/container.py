"""A trait-host container and the JSON-lines channel to it.

Every container runs with the isolation flags of DESIGN.md (no network, read-only root, small
tmpfs, non-root, no capabilities, no-new-privileges, memory/pids/cpu limits) and is killed when
a request misses its wall-clock deadline. Containers carry labels so a crashed worker's leftovers
can be found and removed.

The channel is the container's stdin/stdout through ``docker attach`` (dockerd copies every byte
twice and frames stdout), or, with ``private_socket`` (the live engine's host, which exchanges
about a megabyte per tick at 5,000 entities), a Unix socket: the engine listens on
``host.sock`` in a fresh directory of its own (mode 0700, owned by the sandbox uid, removed with
the container) that is bind-mounted **read-only** at /run/genesis, the container's only mount;
the host connects to it and speaks the same JSON lines. Only a process of the sandbox uid may
connect (checked with SO_PEERCRED), and the host can write nothing into the directory.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import secrets
import shutil
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from docker.types import LogConfig, Mount
from docker.utils.socket import STDERR, STDOUT

from genesis import entity_api, rules
from genesis.config import Settings
from sandbox import image as trait_image

LABEL_ROLE = "genesis.role"
LABEL_OWNER = "genesis.owner"
LABEL_SOCKET_DIR = "genesis.socket_dir"  # the private socket directory to remove with the container
ROLE_TRAIT_HOST = "trait-host"
SOCKET_DIR_IN_CONTAINER = "/run/genesis"
SOCKET_NAME = "host.sock"
SOCKET_DIR_PREFIX = "genesis-host-"
SOCKET_ENV = "GENESIS_HOST_SOCKET"  # tells the trait host (sandbox/traithost/) to connect there
SOCKET_BUFFER = 4 * 2**20
MAX_ATTACHMENT = 64 * 2**20  # a reply's binary part; far above what 100,000 intents need
LIVE_CPU_SHARES = 4096  # the live world's host, against Docker's default of 1024
LOG_MAX_SIZE = "1m"  # the container's log (its stderr) is capped at one file of this size

log = logging.getLogger("genesis.sandbox.container")


class HostDeadlineExceeded(Exception):
    """The trait host did not answer in time; the container has been killed."""


class HostCrashed(Exception):
    """The trait host closed its output (crashed, was OOM-killed, or exited)."""


class RuntimeMismatch(Exception):
    """The trait host runs another Python than the gatekeeper that validated its traits."""


def check_runtime(hello_reply: dict[str, Any]) -> None:
    """The gatekeeper validates traits in this process's interpreter; the host that runs them must
    be the same CPython to the patch level (a bugfix release adds public names to modules)."""
    ours = (sys.implementation.name, platform.python_version())
    theirs = (hello_reply.get("implementation"), hello_reply.get("python"))
    if theirs != ours:
        raise RuntimeMismatch(
            f"the trait host runs {theirs[0]} {theirs[1]} but this process (the gatekeeper's side) runs "
            f"{ours[0]} {ours[1]}: build the trait-host image from the same interpreter "
            "(python -m sandbox.image build, or sandbox/Dockerfile FROM the Genesis image)"
        )


@dataclass(frozen=True)
class IsolationLimits:
    memory: str
    pids_limit: int
    cpus: float
    tmpfs_size: str = "8m"
    # Docker's relative CPU weight (1024 by default): less, and the container yields the CPU to
    # the others when they want it, and still uses what nobody wants.
    cpu_shares: int | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> IsolationLimits:
        """A sandbox test's host: one trait, one worker."""
        return cls(settings.sandbox.memory, settings.sandbox.pids_limit, settings.sandbox.cpus)

    @classmethod
    def for_engine(cls, settings: Settings) -> IsolationLimits:
        """The live world's host: a worker process per agent with live traits. Four times
        Docker's default CPU weight: when sandbox tests and shadows crowd the machine, the live
        world's traits come first (its deadline is the world's pace)."""
        return cls(
            settings.engine.trait_host_memory,
            settings.engine.trait_host_pids,
            settings.engine.trait_host_cpus,
            cpu_shares=LIVE_CPU_SHARES,
        )


# Where the kernel keeps a container's memory accounting: cgroup v1 (cgroupfs or systemd
# driver), then v2. The key is its anonymous memory, what the OOM killer weighs.
_CGROUP_MEMORY_STATS = (
    ("/sys/fs/cgroup/memory/docker/{id}/memory.stat", "total_rss"),
    ("/sys/fs/cgroup/memory/system.slice/docker-{id}.scope/memory.stat", "total_rss"),
    ("/sys/fs/cgroup/system.slice/docker-{id}.scope/memory.stat", "anon"),
    ("/sys/fs/cgroup/docker/{id}/memory.stat", "anon"),
)


def container_memory_bytes(client: docker.DockerClient, container_id: str) -> int | None:
    """A running container's anonymous memory in bytes: from its cgroup when this process can
    read it (instant), else from Docker's stats (about a second); None if it is gone."""
    for path, key in _CGROUP_MEMORY_STATS:
        try:
            with open(path.format(id=container_id)) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except OSError:
            continue
    try:
        answer = client.containers.get(container_id).stats(stream=False)  # one dict (a stream otherwise)
    except (APIError, NotFound):
        return None
    stats = answer.get("memory_stats") if isinstance(answer, dict) else None
    if not isinstance(stats, dict):
        return None
    detail = stats.get("stats", {})
    for key in ("total_rss", "rss", "anon"):
        if key in detail:
            return int(detail[key])
    return int(stats["usage"]) if "usage" in stats else None


def memory_bytes(limit: str) -> int:
    """Docker's memory notation ("64m", "1g", "512k", "1048576") in bytes."""
    text = limit.strip().lower().rstrip("b")
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def container_name(owner: str) -> str:
    """Names say whose container it is: ``genesis-sbx-<owner>-<random>``."""
    return f"genesis-sbx-{owner}-{secrets.token_hex(3)}"


def hello_message(settings: Settings, tick_deadline_s: float, idle: bool = False) -> dict[str, Any]:
    """The first request to every host: the Entity API and the rules and limits it enforces.
    ``tick_deadline_s``: the wall clock the host gives its workers for one tick (less than the
    deadline its caller kills the whole host at). The traits' CPU per tick (``tick_share_ms``)
    is the live host's share of its CPUs over one tick period. ``idle``: a host beside the live
    world (a verdict's or a shadow's fork) runs all its processes in the idle scheduling class,
    so that whatever the live world wakes takes the CPU from them at once."""
    period_ms = 1000.0 / settings.engine.tick_rate
    return {
        "op": "hello",
        "idle": idle,
        "entity_api": entity_api.as_wire(),
        "allowed_imports": sorted(rules.ALLOWED_IMPORTS),
        "call_timeout_ms": settings.sandbox.call_timeout_ms,
        "tick_cpu_ms": settings.trait.tick_cpu_ms,
        "tick_share_ms": settings.trait.tick_cpu_share * period_ms * settings.engine.trait_host_cpus,
        "tick_deadline_ms": tick_deadline_s * 1000.0,
        "worker_memory_mb": settings.trait.worker_memory_mb,
        "max_intents_per_call": rules.MAX_INTENTS_PER_CALL,
    }


class TraitHostContainer:
    """One trait-host process in one container, answering requests in order."""

    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        limits: IsolationLimits,
        owner: str,
        *,
        private_socket: bool = False,
    ):
        """``private_socket``: talk over a Unix socket in a private directory instead of docker
        attach (falls back to attach, with a warning, when this process may not chown the
        directory)."""
        self._client = client
        self._pending = b""
        self.stderr = b""
        self._listener: socket.socket | None = None
        self._socket_dir: str | None = None
        environment: dict[str, str] = {}
        labels = {LABEL_ROLE: ROLE_TRAIT_HOST, LABEL_OWNER: owner}
        mounts = []
        if private_socket:
            try:
                self._socket_dir, self._listener = _listen_privately()
            except PermissionError as exc:  # not root: cannot hand the directory to the sandbox uid
                log.warning("no private socket for the trait host (%s); using docker attach", exc)
            else:
                mounts.append(
                    Mount(target=SOCKET_DIR_IN_CONTAINER, source=self._socket_dir, type="bind", read_only=True)
                )
                environment[SOCKET_ENV] = f"{SOCKET_DIR_IN_CONTAINER}/{SOCKET_NAME}"
                labels[LABEL_SOCKET_DIR] = self._socket_dir
        self.framed = self._listener is None  # docker attach: stdout/stderr frames
        try:
            self._container = self._create(client, image, limits, owner, environment, labels, mounts)
        except BaseException:
            self._remove_socket_dir()
            raise
        self._sock: socket.socket | None = None
        if self.framed:
            self._socket_io = self._container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self._sock = self._socket_io._sock
        try:
            self._container.start()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _create(
        client: docker.DockerClient,
        image: str,
        limits: IsolationLimits,
        owner: str,
        environment: dict[str, str],
        labels: dict[str, str],
        mounts: list[Mount],
    ) -> Any:
        return client.containers.create(
            image,
            name=container_name(owner),
            command=trait_image.COMMAND,
            stdin_open=not mounts,  # (docker-py also sets StdinOnce: when our attach closes, the
            tty=False,  # host gets EOF on stdin and exits; on the socket, at its EOF)
            network_mode="none",
            read_only=True,
            tmpfs={"/tmp": f"rw,noexec,nosuid,size={limits.tmpfs_size}"},
            user="10001:10001",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=limits.memory,
            memswap_limit=limits.memory,
            pids_limit=limits.pids_limit,
            nano_cpus=int(limits.cpus * 1e9),
            cpu_shares=limits.cpu_shares,
            labels=labels,
            environment=environment,
            mounts=mounts,
            # Workers write nowhere; the supervisor's few lines must not grow the host's disk either.
            log_config=LogConfig(type=LogConfig.types.JSON, config={"max-size": LOG_MAX_SIZE, "max-file": "1"}),
        )

    @property
    def id(self) -> str:
        return self._container.id

    def say_hello(self, hello: dict[str, Any], deadline_s: float) -> None:
        """Wait until the host answers (it has started) and give it the rules (``hello_message``);
        the host must run this process's CPython, to the patch level (``check_runtime``)."""
        reply = self.request(hello, deadline_s)
        if not reply.get("ok"):
            raise HostCrashed(f"trait host refused hello: {reply}")
        try:
            check_runtime(reply)
        except RuntimeMismatch:
            self.close()
            raise

    def assign_to(self, owner: str) -> None:
        """A pooled container now serves ``owner``: rename it so leftovers can be found by owner."""
        self._container.rename(container_name(owner))

    def request(
        self,
        message: dict[str, Any],
        deadline_s: float,
        while_waiting: Callable[[], None] | None = None,
        grace_s: float = 0.0,
    ) -> dict[str, Any]:
        """Send one request and wait for its reply, killing the container past the deadline
        (plus ``grace_s``: a reply that comes within it is read and returned, late).

        Bytes values in the request travel as its attachment (see :func:`encode_message`); a
        reply with an attachment has its bytes under ``"attachment"``. ``while_waiting`` runs
        once the request is sent, before the reply is read (the host works meanwhile); its
        exceptions are logged, never raised, so the reply is always read, and the time it takes
        is added to the host's deadline."""
        deadline = time.monotonic() + deadline_s + grace_s
        try:
            sock = self._sock if self._sock is not None else self._accept(deadline)
            sock.settimeout(deadline_s)
            sock.sendall(encode_message(message))
            if while_waiting is not None:
                began = time.monotonic()
                try:
                    while_waiting()
                except Exception:
                    log.exception("work done while waiting for the trait host failed")
                # Our own work does not count against the host's deadline: a snapshot or viewer
                # frame of a large world must not get a host that answered in time killed.
                deadline += time.monotonic() - began
            reply = json.loads(self._read_line(deadline))
            if isinstance(reply, dict) and "attachment" in reply:
                size = reply["attachment"]
                if type(size) is not int or not 0 <= size <= MAX_ATTACHMENT:
                    raise HostCrashed(f"trait host announced an attachment of {size!r} bytes")
                reply["attachment"] = self._read_exactly(size, deadline)
            return reply
        except TimeoutError as exc:
            self.kill()
            raise HostDeadlineExceeded(f"trait host gave no answer within {deadline_s + grace_s:.2f}s") from exc
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise HostCrashed(f"trait host connection broke: {exc}; stderr: {self.stderr_tail()}") from exc

    def _accept(self, deadline: float) -> socket.socket:
        """The host's connection to our private socket (made once, right after it starts)."""
        assert self._listener is not None
        while True:
            _time_left(self._listener, deadline)
            conn, _ = self._listener.accept()
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid == trait_image.SANDBOX_UID:
                break
            conn.close()  # not the sandbox: never a peer
        self._listener.close()
        self._listener = None
        _widen_buffers(conn)
        self._sock = conn
        return conn

    def _read_line(self, deadline: float) -> bytes:
        buf = bytearray(self._pending)
        searched = 0
        while (end := buf.find(b"\n", searched)) < 0:
            searched = len(buf)
            buf += self._read_chunk(deadline)
        self._pending = bytes(buf[end + 1 :])
        return bytes(buf[:end])

    def _read_exactly(self, size: int, deadline: float) -> bytes:
        buf = bytearray(self._pending)
        while len(buf) < size:
            buf += self._read_chunk(deadline)
        self._pending = bytes(buf[size:])
        return bytes(buf[:size])

    def _read_chunk(self, deadline: float) -> bytes:
        """The next bytes of the host's output (docker attach: its next stdout frame)."""
        assert self._sock is not None
        while True:
            _time_left(self._sock, deadline)
            if not self.framed:
                chunk = self._sock.recv(1 << 20)
                if not chunk:
                    raise HostCrashed(f"trait host exited; stderr: {self.stderr_tail()}")
                return chunk
            # Docker's own frame readers poll without a timeout: a hung host would never be killed.
            stream, size = struct.unpack(">BxxxL", self._recv(8, deadline))
            payload = self._recv(size, deadline)
            if stream == STDOUT:
                return payload
            if stream == STDERR:
                self.stderr = (self.stderr + payload)[-8192:]

    def _recv(self, size: int, deadline: float) -> bytes:
        """Exactly ``size`` bytes of the attach stream, by the monotonic ``deadline``."""
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < size:
            _time_left(self._sock, deadline)
            chunk = self._sock.recv(size - len(buf))
            if not chunk:
                raise HostCrashed(f"trait host exited; stderr: {self.stderr_tail()}")
            buf += chunk
        return bytes(buf)

    def stderr_tail(self) -> str:
        if not self.framed:  # stderr is not on our channel: ask Docker (only after a failure)
            try:
                self.stderr = self._container.logs(stdout=False, stderr=True, tail=50)[-8192:]
            except (APIError, NotFound):
                pass
        return self.stderr.decode(errors="replace")[-500:] or "(empty)"

    def kill(self) -> None:
        try:
            self._container.kill()
        except (APIError, NotFound):
            pass

    def disconnect(self) -> None:
        """Close our end: the host sees EOF and exits. The container remains until removed."""
        for sock in (self._sock, self._listener):
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass

    def remove(self) -> None:
        try:
            self._container.remove(force=True)
        except (APIError, NotFound):
            pass
        self._remove_socket_dir()

    def _remove_socket_dir(self) -> None:
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def close(self) -> None:
        """Stop and remove the container; never raises."""
        self.disconnect()
        self.remove()

    def __enter__(self) -> TraitHostContainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encode_message(message: dict[str, Any]) -> bytes:
    """One JSON line; if the message holds ``bytes`` values (anywhere in its dicts and lists),
    each is replaced by ``[offset, length]`` into an attachment of ``"attachment": total`` bytes
    that follows the line. Raw arrays so cross without base64 or JSON escaping."""
    blobs: list[bytes] = []
    at = 0

    def lift(value: Any) -> Any:
        nonlocal at
        if isinstance(value, bytes):
            blobs.append(value)
            at += len(value)
            return [at - len(value), len(value)]
        if isinstance(value, dict):
            return {k: lift(v) for k, v in value.items()}
        if isinstance(value, list):
            return [lift(v) for v in value]
        return value

    lifted = lift(message)
    if blobs:
        lifted["attachment"] = at
    return json.dumps(lifted, separators=(",", ":")).encode() + b"\n" + b"".join(blobs)


def _time_left(sock: socket.socket, deadline: float) -> None:
    """Let ``sock``'s next call block only until the monotonic ``deadline`` (timeout once past it)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError()
    sock.settimeout(remaining)


def _widen_buffers(sock: socket.socket) -> None:
    """Room for a whole request / reply (~1 MB at 5,000 entities) in the socket, so that neither
    side waits for the other to drain it (the kernel caps it at net.core.wmem_max / rmem_max)."""
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        except OSError:
            pass


def _listen_privately() -> tuple[str, socket.socket]:
    """A fresh directory (0700, owned by the sandbox uid) holding our listening ``host.sock``
    (0600, sandbox uid). Raises PermissionError when this process may not chown."""
    uid = trait_image.SANDBOX_UID
    path = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX)  # 0700
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock_path = os.path.join(path, SOCKET_NAME)
        listener.bind(sock_path)
        os.chmod(sock_path, 0o600)
        os.chown(sock_path, uid, uid)
        os.chown(path, uid, uid)
        listener.listen(1)
    except BaseException:
        listener.close()
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path, listener


def remove_socket_dir_of(container: Any) -> None:
    """The private socket directory of a (dead) trait host, if it is one of ours."""
    attrs = container.attrs or {}
    labels = attrs.get("Labels") or (attrs.get("Config") or {}).get("Labels") or {}  # sparse or full
    path = labels.get(LABEL_SOCKET_DIR, "")
    if os.path.basename(path).startswith(SOCKET_DIR_PREFIX) and os.path.dirname(path) == tempfile.gettempdir():
        shutil.rmtree(path, ignore_errors=True)


def containers_of(client: docker.DockerClient, owner: str) -> list:
    """Trait-host containers serving ``owner`` (by name, which a pooled container takes on)."""
    return client.containers.list(all=True, sparse=True, filters={"name": f"genesis-sbx-{owner}-"})


def attached_socket(container: Container, params: dict[str, int]) -> socket.socket:
    """The socket under ``docker attach`` with ``params``: docker-py hands it over wrapped in a
    SocketIO (a local engine's Unix socket)."""
    wrapped = container.attach_socket(params=params)
    if not isinstance(wrapped, socket.SocketIO):
        raise TypeError(f"docker attach answered a {type(wrapped).__name__}, not a local engine's socket")
    return wrapped._sock  # type: ignore[attr-defined]  # typeshed leaves SocketIO's socket out (private)


def remove_all(containers: list) -> int:
    """Force-remove containers, skipping any that vanished meanwhile; returns how many went."""
    removed = 0
    for container in containers:
        try:
            container.remove(force=True)
            removed += 1
        except (APIError, NotFound):
            pass
        remove_socket_dir_of(container)
    return removed


def remove_containers_of(client: docker.DockerClient, owner: str, keep: str | None = None) -> int:
    """Remove trait-host containers left behind by an earlier attempt for the same owner (all but
    the container ``keep``, the id of the one now serving it)."""
    return remove_all([c for c in containers_of(client, owner) if c.id != keep])


CREATED_GRACE_S = 120.0  # far above a container's create-to-start gap (START_DEADLINE_S is 20 s)


def remove_abandoned_trait_hosts(client: docker.DockerClient, created_grace_s: float = CREATED_GRACE_S) -> int:
    """Remove trait hosts nobody will use again: those that exited (their owner died, so their
    stdin closed) and those stuck in "created" for longer than ``created_grace_s`` (their owner
    was killed between create and start, e.g. a worker stopped while its pool was refilling).
    A younger "created" container may be another process's, about to be started."""
    role = {"label": [f"{LABEL_ROLE}={ROLE_TRAIT_HOST}"]}
    exited = client.containers.list(all=True, sparse=True, filters={**role, "status": "exited"})
    created = client.containers.list(all=True, sparse=True, filters={**role, "status": "created"})
    oldest_allowed = time.time() - created_grace_s
    stuck = [c for c in created if (c.attrs or {}).get("Created", oldest_allowed) < oldest_allowed]
    return remove_all([*exited, *stuck])
