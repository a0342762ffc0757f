"""A trait-host container and the JSON-lines channel to it.

Every container runs with the isolation flags of DESIGN.md (no network, read-only root, small
tmpfs, non-root, no capabilities, no-new-privileges, memory/pids/cpu limits) and is killed when
a request misses its wall-clock deadline. Containers carry labels so a crashed worker's leftovers
can be found and removed.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.utils.socket import STDERR, STDOUT, next_frame_header, read_exactly

from genesis import entity_api, rules
from genesis.config import Settings
from sandbox import image as trait_image

LABEL_ROLE = "genesis.role"
LABEL_OWNER = "genesis.owner"
ROLE_TRAIT_HOST = "trait-host"


class HostDeadlineExceeded(Exception):
    """The trait host did not answer in time; the container has been killed."""


class HostCrashed(Exception):
    """The trait host closed its output (crashed, was OOM-killed, or exited)."""


@dataclass(frozen=True)
class IsolationLimits:
    memory: str
    pids_limit: int
    cpus: float
    tmpfs_size: str = "8m"

    @classmethod
    def from_settings(cls, settings: Settings) -> "IsolationLimits":
        return cls(settings.sandbox_memory, settings.sandbox_pids_limit, settings.sandbox_cpus)

    def environment(self, runtime: "trait_image.Runtime") -> dict[str, str]:
        """PyPy's collector is told half the memory limit as its ceiling, so a trait that
        hoards memory meets a MemoryError (reported like any error) before the kernel's OOM
        killer takes the whole host down."""
        if runtime.name != "pypy":
            return {}
        return {"PYPY_GC_MAX": f"{max(memory_bytes(self.memory) // 2 // 2**20, 16)}MB"}


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


def hello_message(call_timeout_ms: float) -> dict[str, Any]:
    """The first request to every host: the Entity API and the rules it enforces."""
    return {
        "op": "hello",
        "entity_api": entity_api.as_wire(),
        "allowed_imports": sorted(rules.ALLOWED_IMPORTS),
        "call_timeout_ms": call_timeout_ms,
    }


class TraitHostContainer:
    """One trait-host process in one container, answering requests in order."""

    def __init__(self, client: docker.DockerClient, image: str, limits: IsolationLimits, owner: str,
                 runtime: "trait_image.Runtime | None" = None):
        """``image`` must hold ``runtime`` (default: the sandbox test's runtime)."""
        runtime = runtime or trait_image.sandbox_runtime()
        self._client = client
        self._container = client.containers.create(
            image,
            name=container_name(owner),
            command=runtime.command,
            stdin_open=True,  # (docker-py also sets StdinOnce: when our attach closes, the host gets
            tty=False,  # EOF on stdin and exits)
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
            labels={LABEL_ROLE: ROLE_TRAIT_HOST, LABEL_OWNER: owner},
            environment=limits.environment(runtime),
        )
        self._socket_io = self._container.attach_socket(
            params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        self._sock: socket.socket = self._socket_io._sock
        self._container.start()
        self._pending = b""
        self.stderr = b""

    @property
    def id(self) -> str:
        return self._container.id

    def say_hello(self, call_timeout_ms: float, deadline_s: float) -> None:
        """Wait until the host answers (it has started) and give it the rules."""
        reply = self.request(hello_message(call_timeout_ms), deadline_s)
        if not reply.get("ok"):
            raise HostCrashed(f"trait host refused hello: {reply}")

    def assign_to(self, owner: str) -> None:
        """A pooled container now serves ``owner``: rename it so leftovers can be found by owner."""
        self._container.rename(container_name(owner))

    def request(self, message: dict[str, Any], deadline_s: float) -> dict[str, Any]:
        """Send one request and wait for its reply line, killing the container past the deadline."""
        try:
            self._sock.settimeout(deadline_s)
            self._sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            return json.loads(self._read_line(time.monotonic() + deadline_s))
        except (socket.timeout, TimeoutError) as exc:
            self.kill()
            raise HostDeadlineExceeded(f"trait host gave no answer within {deadline_s:.2f}s") from exc
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise HostCrashed(f"trait host connection broke: {exc}; stderr: {self.stderr_tail()}") from exc

    def _read_line(self, deadline: float) -> bytes:
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout()
            self._sock.settimeout(remaining)
            header = next_frame_header(self._sock)
            stream, size = header
            if size < 0:
                raise HostCrashed(f"trait host exited; stderr: {self.stderr_tail()}")
            payload = read_exactly(self._sock, size)
            if stream == STDOUT:
                self._pending += payload
            elif stream == STDERR:
                self.stderr = (self.stderr + payload)[-8192:]
        line, _, self._pending = self._pending.partition(b"\n")
        return line

    def stderr_tail(self) -> str:
        return self.stderr.decode(errors="replace")[-500:] or "(empty)"

    def kill(self) -> None:
        try:
            self._container.kill()
        except (APIError, NotFound):
            pass

    def disconnect(self) -> None:
        """Close our end: the host sees EOF and exits. The container remains until removed."""
        try:
            self._sock.close()
        except OSError:
            pass

    def remove(self) -> None:
        try:
            self._container.remove(force=True)
        except (APIError, NotFound):
            pass

    def close(self) -> None:
        """Stop and remove the container; never raises."""
        self.disconnect()
        self.remove()

    def __enter__(self) -> "TraitHostContainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def containers_of(client: docker.DockerClient, owner: str) -> list:
    """Trait-host containers serving ``owner`` (by name, which a pooled container takes on)."""
    return client.containers.list(all=True, sparse=True, filters={"name": f"genesis-sbx-{owner}-"})


def remove_all(containers: list) -> int:
    """Force-remove containers, skipping any that vanished meanwhile; returns how many went."""
    removed = 0
    for container in containers:
        try:
            container.remove(force=True)
            removed += 1
        except (APIError, NotFound):
            pass
    return removed


def remove_containers_of(client: docker.DockerClient, owner: str, keep: str | None = None) -> int:
    """Remove trait-host containers left behind by an earlier attempt for the same owner (all but
    the container ``keep``, the id of the one now serving it)."""
    return remove_all([c for c in containers_of(client, owner) if c.id != keep])


def remove_exited_trait_hosts(client: docker.DockerClient) -> int:
    """Trait hosts whose owner died have exited (their stdin closed). Only exited ones: a
    container in "created" may be another process's, between its create and start."""
    return remove_all(client.containers.list(
        all=True, sparse=True, filters={"label": [f"{LABEL_ROLE}={ROLE_TRAIT_HOST}"], "status": "exited"},
    ))
