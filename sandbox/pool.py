"""A warm pool of trait-host containers for sandbox tests.

Starting a container costs ~0.3-0.5 s; a sandbox test itself is ~0.1 s. The pool keeps up to
``size`` containers started and greeted (their host answered ``hello``), so a test takes one at
once. Each container serves exactly one mutation and is then destroyed (nothing of one trait can
linger for the next); a background thread refills the pool. Idle containers never exceed
``size``, however many tests run at once: when the pool is empty a test starts its own container.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import docker
from docker.errors import APIError, NotFound

from sandbox.container import (
    HostCrashed,
    HostDeadlineExceeded,
    IsolationLimits,
    TraitHostContainer,
    remove_abandoned_trait_hosts,
)

log = logging.getLogger("genesis.sandbox.pool")

POOL_OWNER = "pool"
START_DEADLINE_S = 20.0
CHECK_DEADLINE_S = 1.0
QUIET_AFTER_TEST_S = 0.3  # after a test: time for its workflow to record the verdict
MAX_DEFERRED_REMOVALS = 16  # finished (exited) containers left for a quiet moment


class WarmPool:
    def __init__(
        self,
        client: docker.DockerClient,
        image: str,
        limits: IsolationLimits,
        size: int,
        hello: dict[str, Any],
        private_socket: bool = False,
    ):
        self._client, self._image, self._limits = client, image, limits
        self._private_socket = private_socket  # hosts talk over a private Unix socket, not docker attach
        self._size, self._hello = size, hello  # the hello_message every host is given
        self._idle: deque[TraitHostContainer] = deque()
        self._starting = 0
        self._in_use = 0  # hosts handed out and not yet retired (tests running)
        self._quiet_until = 0.0  # monotonic time until which a finished test's verdict is being recorded
        self._closed = False
        self._cond = threading.Condition()
        self.cold_starts = 0  # acquisitions that found the pool empty
        self.warm_hits = 0
        self._refiller = threading.Thread(target=self._refill_forever, name="sandbox-pool", daemon=True)
        self._retired: deque[TraitHostContainer] = deque()
        self._reaper = threading.Thread(target=self._reap_forever, name="sandbox-reaper", daemon=True)
        # Renaming a taken container after its owner is a Docker API call (~15 ms): off the test's path.
        self._renamer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-rename")

    def start(self) -> WarmPool:
        remove_abandoned_trait_hosts(self._client)
        self._refiller.start()
        self._reaper.start()
        return self

    def retire(self, host: TraitHostContainer) -> None:
        """Done with ``host``: its process is told to exit now; the container is removed in the
        background (a removal takes ~100-200 ms that no verdict should wait for)."""
        host.disconnect()
        with self._cond:
            self._retired.append(host)
            self._in_use = max(self._in_use - 1, 0)
            self._quiet_until = time.monotonic() + QUIET_AFTER_TEST_S
            self._cond.notify_all()

    def new_host(self, owner: str) -> TraitHostContainer:
        """A started, greeted host for ``owner``: from the pool if one is idle, else a cold start."""
        while True:
            with self._cond:
                host = self._idle.popleft() if self._idle else None
                self._in_use += 1
                self._cond.notify_all()  # the refiller tops the pool up again
            if host is None:
                self.cold_starts += 1
                try:
                    return self._start(owner)
                except BaseException:
                    self._release()
                    raise
            try:  # an idle host may have died meanwhile; a hello is a cheap liveness check
                host.say_hello(self._hello, CHECK_DEADLINE_S)
                self._renamer.submit(self._assign, host, owner)
                self.warm_hits += 1
                return host
            except (HostCrashed, HostDeadlineExceeded, APIError, NotFound) as exc:
                log.warning("discarding a dead pooled trait host: %s", exc)
                host.close()
                self._release()

    @staticmethod
    def _assign(host: TraitHostContainer, owner: str) -> None:
        """Name the container after its owner, so an attempt's leftovers are found by owner."""
        try:
            host.assign_to(owner)
        except NotFound:  # already removed (a test that ended at once): nothing left to name
            pass
        except APIError as exc:
            log.warning("could not rename trait host %s for %s: %s", host.id[:12], owner, exc)

    def _release(self) -> None:
        with self._cond:
            self._in_use = max(self._in_use - 1, 0)
            self._cond.notify_all()

    def _removal_wait(self) -> float:
        """Seconds a finished container's removal should still wait (0: remove now). Removing
        costs dockerd/containerd a burst of CPU that, on a small machine, slowed the workflow
        task recording a verdict by tens of ms: removals wait while a test runs and for a moment
        after one ends, unless MAX_DEFERRED_REMOVALS have piled up."""
        if len(self._retired) >= MAX_DEFERRED_REMOVALS:
            return 0.0
        if self._in_use > 0:
            return 1.0
        return max(self._quiet_until - time.monotonic(), 0.0)

    def idle_count(self) -> int:
        with self._cond:
            return len(self._idle)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            leftovers = [*self._idle, *self._retired]
            self._idle, self._retired = deque(), deque()
            self._cond.notify_all()
        self._renamer.shutdown(wait=True)
        for host in leftovers:
            host.close()
        # A container being started right now is closed by the refiller once it is up.
        if self._refiller.is_alive():
            self._refiller.join(timeout=START_DEADLINE_S)

    def _reap_forever(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if not self._retired:
                        self._cond.wait()
                        continue
                    wait = self._removal_wait()
                    if wait <= 0:
                        break
                    self._cond.wait(timeout=wait)
                if self._closed:
                    return
                host = self._retired.popleft()
            host.remove()

    def _start(self, owner: str) -> TraitHostContainer:
        host = TraitHostContainer(self._client, self._image, self._limits, owner, private_socket=self._private_socket)
        try:
            host.say_hello(self._hello, START_DEADLINE_S)
        except BaseException:
            host.close()
            raise
        return host

    def _refill_forever(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._idle) + self._starting >= self._size:
                    self._cond.wait()
                if self._closed:
                    return
                self._starting += 1
            host = None
            try:
                host = self._start(POOL_OWNER)
            except Exception as exc:  # Docker hiccup: tests cold-start meanwhile; try again soon
                log.warning("could not start a pooled trait host: %s", exc)
                with self._cond:
                    self._cond.wait(timeout=2.0)
            finally:
                with self._cond:
                    self._starting -= 1
                    if host is not None:
                        if self._closed:
                            host.close()
                        else:
                            self._idle.append(host)
