"""Warm program-host containers, one per (client, environment), serving many steps at once.

A container mounts only its own client's worktrees (read-only) and its environment (read-only),
joins the internal egress network, and keeps DSPy imported: each step is a request line that the
host forks a process for (gepa_steps/program_host.py). Requests carry ids; one reader thread per
container hands each reply to the step waiting for it. A container idle for longer than
``idle_s`` is removed; a dead one is replaced on the next request."""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.utils.socket import STDERR, STDOUT, next_frame_header, read_exactly

from gepa_steps import image as program_image
from gepa_steps.egress import EgressGateway
from sandbox.container import attached_socket, remove_all

log = logging.getLogger("genesis.program_hosts")

LABEL_ROLE = "genesis.role"
LABEL_CLIENT = "genesis.gepa.client"
ROLE = "gepa-program-host"
READY_TIMEOUT_S = 60.0
WAIT_SLICE_S = 3.0  # how often a waiting step reports that it is alive


class ProgramHostDied(RuntimeError):
    pass


@dataclass(frozen=True)
class HostLimits:
    memory: str = "2g"
    pids_limit: int = 512
    cpus: float = 2.0
    tmpfs_size: str = "256m"


class ProgramHost:
    def __init__(
        self,
        client: docker.DockerClient,
        client_id: str,
        worktrees: Path,
        env_dir: Path,
        network: str,
        environment: dict[str, str],
        limits: HostLimits,
    ):
        self.client_id = client_id
        self.env_dir = env_dir
        self.last_used = time.monotonic()
        self._waiting: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._ready: Future = Future()
        self.stderr = b""
        self.address = ""  # on the egress network, once started
        self._container = client.containers.create(
            program_image.ensure(client),
            name=f"genesis-gepa-{client_id}-{secrets.token_hex(3)}",
            stdin_open=True,
            tty=False,
            network=network,
            read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_size}"},
            volumes={
                str(worktrees): {"bind": program_image.WORKTREES_IN_IMAGE, "mode": "ro"},
                str(env_dir): {"bind": program_image.ENV_IN_IMAGE, "mode": "ro"},
            },
            user="10001:10001",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mem_limit=limits.memory,
            memswap_limit=limits.memory,
            pids_limit=limits.pids_limit,
            nano_cpus=int(limits.cpus * 1e9),
            environment=environment,
            labels={LABEL_ROLE: ROLE, LABEL_CLIENT: client_id},
        )
        self._sock = attached_socket(self._container, {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        self._container.start()
        self._reader = threading.Thread(target=self._read_replies, name=f"program-host-{client_id}", daemon=True)
        self._reader.start()

    def network_address(self, network: str) -> str:
        self._container.reload()
        return self._container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]

    @property
    def alive(self) -> bool:
        return self._reader.is_alive()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S, waiting: Callable[[], None] = lambda: None) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._ready.result(min(WAIT_SLICE_S, max(deadline - time.monotonic(), 0)))
            except FutureTimeout:
                if time.monotonic() >= deadline:
                    self.close()
                    raise ProgramHostDied(
                        f"the program host did not start within {timeout:.0f}s; stderr: {self.stderr_tail()}"
                    ) from None
                waiting()

    def run(
        self, request: dict[str, Any], timeout: float, waiting: Callable[[], None] = lambda: None
    ) -> dict[str, Any]:
        """Send one run request and wait for its reply (the host kills the step itself at
        ``request['timeout_s']``; ``timeout`` here is the last resort if the host hangs).
        ``waiting`` is called every few seconds meanwhile (activity heartbeats)."""
        self.last_used = time.monotonic()
        request_id = secrets.token_hex(8)
        future: Future = Future()
        with self._lock:
            if not self.alive:
                raise ProgramHostDied(f"the program host has exited; stderr: {self.stderr_tail()}")
            self._waiting[request_id] = future
            self._sock.sendall(json.dumps({**request, "id": request_id}).encode() + b"\n")
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    return future.result(min(WAIT_SLICE_S, max(deadline - time.monotonic(), 0)))
                except FutureTimeout:
                    if time.monotonic() >= deadline:
                        raise ProgramHostDied(f"no answer from the program host within {timeout:.0f}s") from None
                    waiting()
        finally:
            with self._lock:
                self._waiting.pop(request_id, None)
            self.last_used = time.monotonic()

    def _read_replies(self) -> None:
        pending = b""
        try:
            self._sock.settimeout(None)
            while True:
                stream, size = next_frame_header(self._sock)
                if size < 0:
                    break
                payload = read_exactly(self._sock, size)
                if stream == STDERR:
                    self.stderr = (self.stderr + payload)[-16384:]
                    continue
                if stream != STDOUT:
                    continue
                pending += payload
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    self._dispatch(json.loads(line))
        except (OSError, ValueError) as exc:
            log.warning("program host of %s: reader stopped: %s", self.client_id, exc)
        finally:
            error = ProgramHostDied(f"the program host exited; stderr: {self.stderr_tail()}")
            if not self._ready.done():
                self._ready.set_exception(error)
            with self._lock:
                for future in self._waiting.values():
                    if not future.done():
                        future.set_exception(error)

    def _dispatch(self, reply: dict) -> None:
        if reply.get("ready"):
            self._ready.set_result(reply)
            return
        reply_id = reply.get("id")
        with self._lock:
            future = self._waiting.get(reply_id) if isinstance(reply_id, str) else None
        if future is not None and not future.done():
            future.set_result(reply)

    def stderr_tail(self) -> str:
        return self.stderr.decode(errors="replace")[-1500:] or "(empty)"

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            self._container.remove(force=True)
        except (APIError, NotFound):
            pass


class ProgramHosts:
    """The warm hosts of this worker, keyed by (client_id, environment directory)."""

    def __init__(
        self,
        client: docker.DockerClient,
        network: str,
        environment: dict[str, str],
        limits: HostLimits,
        idle_s: float = 600.0,
        gateway: EgressGateway | None = None,
    ):
        self._client, self._network, self._environment, self._limits, self._idle_s = (
            client,
            network,
            environment,
            limits,
            idle_s,
        )
        self._gateway = gateway  # told each host's address and its client's own allow-list
        self._hosts: dict[tuple[str, str], ProgramHost] = {}
        self._starting: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._reap_periodically, name="program-host-reaper", daemon=True).start()

    def _reap_periodically(self) -> None:
        while not self._closed.wait(min(self._idle_s / 4, 60.0)):
            try:
                self.reap_idle()
            except Exception:  # noqa: BLE001 - Docker hiccups: try again next round
                log.exception("reaping idle program hosts failed")

    def host_for(
        self,
        client_id: str,
        worktrees: Path,
        env_dir: Path,
        waiting: Callable[[], None] = lambda: None,
        egress_allow: frozenset[tuple[str, int]] = frozenset(),
    ) -> ProgramHost:
        key = (client_id, str(env_dir))
        with self._lock:
            start_lock = self._starting.setdefault(key, threading.Lock())
        while not start_lock.acquire(timeout=WAIT_SLICE_S):  # one start per key; the client's other steps wait
            waiting()
        try:
            host = self._hosts.get(key)
            if host is not None and host.alive:
                host.last_used = time.monotonic()
                if self._gateway is not None:  # the client's list as of now
                    self._gateway.allow_peer(host.address, egress_allow)
                return host
            if host is not None:
                self._retire(host)
            host = ProgramHost(
                self._client, client_id, worktrees, env_dir, self._network, self._environment, self._limits
            )
            try:
                host.wait_ready(waiting=waiting)
            except ProgramHostDied:
                host.close()
                raise
            host.last_used = time.monotonic()
            if self._gateway is not None:
                host.address = host.network_address(self._network)
                self._gateway.allow_peer(host.address, egress_allow)
            with self._lock:
                self._hosts[key] = host
            return host
        finally:
            start_lock.release()

    def reap_idle(self) -> None:
        now = time.monotonic()
        with self._lock:
            idle = [k for k, h in self._hosts.items() if now - h.last_used > self._idle_s and not h._waiting]
            hosts = [self._hosts.pop(k) for k in idle]
        for host in hosts:
            self._retire(host)

    def _retire(self, host: ProgramHost) -> None:
        if self._gateway is not None and host.address:
            self._gateway.forget_peer(host.address)
        host.close()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            hosts, self._hosts = list(self._hosts.values()), {}
        with ThreadPoolExecutor(max_workers=8) as pool:  # each removal is a Docker round trip
            list(pool.map(self._retire, hosts))


def remove_exited_hosts(client: docker.DockerClient) -> int:
    """Program hosts of a worker that died: their stdin closed with it, so they exited. Only
    exited ones, so another worker's live hosts stay."""
    return remove_all(
        client.containers.list(all=True, sparse=True, filters={"label": [f"{LABEL_ROLE}={ROLE}"], "status": "exited"})
    )
