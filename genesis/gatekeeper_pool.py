"""Gatekeeper process pool: validations on every core, for the worker's validate activity.

One validation is about half a millisecond of CPU in one thread (ast.parse plus the compiled
walk), so the worker's event loop alone would validate on one core. The pool keeps N helper
processes (``python -m genesis.gatekeeper_pool``), each validating the requests written to its
stdin and answering on its stdout, in order: length-prefixed ``marshal`` frames (no pickle),
pipelined (several requests may wait in a helper's pipe), read in the parent by an asyncio
protocol, so a validation costs the parent a few tens of microseconds, not a thread hop.

A helper that dies (killed, out of memory, or crashed by an input) never takes the worker with
it: the requests queued behind the one it was working on go to another helper, that one is
retried once on a fresh helper, and if it kills that one too it is rejected as SYNTAX_ERROR (it
cannot be analysed safely). Dead helpers are replaced on the next request.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import marshal
import os
import signal
import struct
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from genesis import gatekeeper
from genesis.dto import FailureCode

log = logging.getLogger("genesis.gatekeeper_pool")

ROOT = Path(__file__).resolve().parent.parent  # helpers import the same checkout as the parent
HEADER = struct.Struct("<I")  # frame = payload length, then a marshal payload
OP_VALIDATE = "validate"
OP_PARSE = "parse"  # ast.parse only: the benchmark's baseline, measured through the same pipes
CRASHES = 2  # helpers a request may see die while working on it before it is rejected


class GatekeeperUnavailable(RuntimeError):
    """The pool is closed."""


@dataclass
class _Request:
    frame: bytes
    future: asyncio.Future
    crashes: int = 0  # helpers that died while working on it


class _Helper:
    """One helper process and the requests it has been sent, oldest (in progress) first."""

    def __init__(self, pool: GatekeeperPool) -> None:
        self.pool = pool
        self.process = subprocess.Popen(
            [sys.executable, "-m", "genesis.gatekeeper_pool"], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        self.pending: deque[_Request] = deque()
        self.buffer = bytearray()
        self.outbox = bytearray()  # requests not yet written
        self.writer: asyncio.WriteTransport | None = None
        self.reader: asyncio.ReadTransport | None = None
        self.alive = True

    async def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reader, _ = await loop.connect_read_pipe(lambda: _Reader(self), self.process.stdout)
        self.writer, _ = await loop.connect_write_pipe(asyncio.Protocol, self.process.stdin)

    def send(self, request: _Request) -> None:
        """Queue a request; the requests of one event-loop iteration go out in one write."""
        self.pending.append(request)
        if not self.outbox:
            asyncio.get_running_loop().call_soon(self.flush)
        self.outbox += request.frame

    def flush(self) -> None:
        if self.outbox and self.alive:
            self.writer.write(bytes(self.outbox))
        self.outbox.clear()

    def received(self, data: bytes) -> None:
        self.buffer += data
        while (payload := _next_frame(self.buffer)) is not None:
            status, value = marshal.loads(payload)
            future = self.pending.popleft().future
            if future.done():  # the caller was cancelled
                continue
            if status == "ok":
                future.set_result(value)
            else:
                future.set_exception(RuntimeError(f"gatekeeper helper failed: {value}"))

    def lost(self) -> None:
        """The helper's stdout closed: it exited. Hand its requests on."""
        if not self.alive:
            return
        self.alive = False
        if self.writer is not None:
            self.writer.close()
        try:  # its stdout closes as it exits: the exit status follows at once
            status = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:  # closed its stdout but still running: unusable
            self.process.kill()
            status = self.process.wait()
        pending, self.pending = self.pending, deque()
        if pending and not self.pool.closed:
            log.warning("gatekeeper helper %d exited with status %s with %d request(s) pending",
                        self.process.pid, status, len(pending))
        for index, request in enumerate(pending):
            if request.future.done():
                continue
            if self.pool.closed:
                request.future.set_exception(GatekeeperUnavailable("the gatekeeper pool is closed"))
                continue
            if index == 0:  # the one it was working on
                request.crashes += 1
                if request.crashes >= CRASHES:
                    request.future.set_result(_crash_verdict(status))
                    continue
            asyncio.ensure_future(self.pool._dispatch(request))

    def close(self) -> None:
        self.alive = False
        for transport in (self.writer, self.reader):
            if transport is not None:
                transport.close()
        if self.process.poll() is None:
            self.process.terminate()


def _crash_verdict(status: int) -> tuple:
    message = (
        f"AST parse: FAILED — the gatekeeper process died {CRASHES} times analysing this code "
        f"(exit status {status}); it cannot be validated safely, simplify it"
    )
    return (False, FailureCode.SYNTAX_ERROR.value, ["Schema: OK", message], None, None)


class _Reader(asyncio.Protocol):
    def __init__(self, helper: _Helper) -> None:
        self.helper = helper

    def data_received(self, data: bytes) -> None:
        self.helper.received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.helper.lost()


class GatekeeperPool:
    """``await pool.validate(trait_name, code)``: gatekeeper.validate in a helper process.

    Helpers start when the pool is created (they warm up while the caller does other things)
    and are attached to the event loop of the first request; use the pool from that loop."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError("a gatekeeper pool needs at least one process")
        self.closed = False
        self._helpers = [_Helper(self) for _ in range(processes)]
        log.info("gatekeeper pool: %d helper processes (%s gatekeeper)", processes,
                 "compiled" if gatekeeper.COMPILED else "pure-Python")
        self._attached: set[_Helper] = set()
        self._lock: asyncio.Lock | None = None

    @property
    def pids(self) -> list[int]:
        return [helper.process.pid for helper in self._helpers]

    async def validate(self, trait_name: str, code: str) -> gatekeeper.GateResult:
        fields = await self._request((OP_VALIDATE, trait_name, code))
        return gatekeeper.GateResult(*fields)

    async def parse(self, code: str) -> None:
        await self._request((OP_PARSE, "", code))

    async def _request(self, message: tuple[str, str, str]) -> tuple:
        payload = marshal.dumps(message)
        request = _Request(HEADER.pack(len(payload)) + payload, asyncio.get_running_loop().create_future())
        await self._dispatch(request)
        return await request.future

    async def _dispatch(self, request: _Request) -> None:
        if self.closed:
            request.future.set_exception(GatekeeperUnavailable("the gatekeeper pool is closed"))
            return
        helper = min(self._helpers, key=lambda h: len(h.pending))
        if not helper.alive or helper not in self._attached:
            helper = await self._ready_helper()
        helper.send(request)

    async def _ready_helper(self) -> _Helper:
        """Replace dead helpers and attach new ones (once, under a lock), then pick the least busy."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            loop = asyncio.get_running_loop()
            for index, helper in enumerate(self._helpers):
                if not helper.alive:
                    self._attached.discard(helper)
                    helper = self._helpers[index] = _Helper(self)
                if helper not in self._attached:
                    await helper.attach(loop)
                    self._attached.add(helper)
        return min(self._helpers, key=lambda h: len(h.pending))

    async def close(self) -> None:
        self.closed = True
        for helper in self._helpers:
            pending, helper.pending = helper.pending, deque()
            helper.close()
            for request in pending:
                if not request.future.done():
                    request.future.set_exception(GatekeeperUnavailable("the gatekeeper pool is closed"))
        await asyncio.to_thread(lambda: [helper.process.wait() for helper in self._helpers])


# ---------------------------------------------------------------------------------------------
# The helper process
# ---------------------------------------------------------------------------------------------


def _next_frame(buffer: bytearray) -> bytes | None:
    """Take the first complete frame's payload off the buffer, if there is one."""
    if len(buffer) < HEADER.size:
        return None
    end = HEADER.size + HEADER.unpack_from(buffer)[0]
    if len(buffer) < end:
        return None
    payload = bytes(buffer[HEADER.size:end])
    del buffer[:end]
    return payload


def _write_all(fd: int, data: bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _answer(payload: bytes) -> bytes:
    op, trait_name, code = marshal.loads(payload)
    try:
        if op == OP_VALIDATE:
            result = gatekeeper.validate(trait_name, code)
            value = (result.ok, result.failure_code, list(result.validation_log), result.class_name,
                     result.code_hash)
        else:
            ast.parse(code)
            value = None
        answer = marshal.dumps(("ok", value))
    except Exception as error:  # noqa: BLE001 - reported to the caller, the helper carries on
        answer = marshal.dumps(("error", f"{type(error).__name__}: {error}"))
    return HEADER.pack(len(answer)) + answer


def serve() -> None:
    """Answer framed requests from stdin on stdout until stdin closes (the parent went away).

    Answers are written when no complete request is left to work on: one at a time when the
    parent waits for each, in batches (one write, one wake-up of the parent) when it is ahead."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the worker, which closes our stdin
    requests, answers = os.dup(0), os.dup(1)
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the answer stream
    received, outbox = bytearray(), bytearray()
    while True:
        payload = _next_frame(received)
        if payload is not None:
            outbox += _answer(payload)
            continue
        if outbox:
            _write_all(answers, outbox)
            outbox.clear()
        chunk = os.read(requests, 1 << 16)
        if not chunk:
            return
        received += chunk


if __name__ == "__main__":
    serve()
