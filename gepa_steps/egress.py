"""Network egress of GEPA containers: nothing but the allow-list.

- Program and coding-agent containers join one Docker network, ``--internal`` (no route out of
  the host) with inter-container traffic off (one client's container cannot reach another's).
- On the host side of that bridge only the egress gateway's port is open: an iptables chain
  (``GENESIS-GEPA``) drops everything else the containers send to the host (Postgres, Redis,
  Temporal, the Docker API, ...).
- The gateway (this module, run by the worker) forwards ``/lm-<random>/...`` to the configured LM
  endpoint, ``/coder-<random>/...`` to the coding model and ``/claude-<random>/...`` to the
  Anthropic API of the Claude Agent SDK backend (each container is told only its own route),
  adding their API keys on the way (the keys never enter a container), and acts as an HTTP proxy
  (CONNECT or absolute URLs) for the ``host:port`` pairs of ``GENESIS_GEPA_EGRESS_ALLOW`` (and of
  a client's own ``egress_allow``, for that client's containers). Each proxied connection is
  checked again (genesis/netpolicy.py):
  a listed host that is or resolves to a private address is refused unless the operator's
  ``GENESIS_OUTBOUND_PRIVATE_ALLOW`` covers it, and the connection goes to the checked address.
  Everything else gets a 403 and a log line.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import docker
import httpx
from docker.errors import APIError, NotFound

from genesis import netpolicy

log = logging.getLogger("genesis.egress")

BRIDGE_INTERFACE = "genesis-gepa0"
IPTABLES_CHAIN = "GENESIS-GEPA"
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
UPSTREAM_TIMEOUT_S = 300.0
UPSTREAM_CONNECT_TIMEOUT_S = 10.0


class EgressSetupError(RuntimeError):
    pass


def ensure_network(client: docker.DockerClient, name: str) -> str:
    """The internal, no-ICC network (created if missing); returns its gateway IP on the host."""
    try:
        network = client.networks.get(name)
    except NotFound:
        try:
            network = client.networks.create(
                name,
                driver="bridge",
                internal=True,
                check_duplicate=True,
                options={
                    "com.docker.network.bridge.name": BRIDGE_INTERFACE,
                    "com.docker.network.bridge.enable_icc": "false",
                },
                labels={"genesis.role": "gepa-egress"},
            )
        except APIError:  # another worker created it meanwhile
            network = client.networks.get(name)
    if not network.attrs.get("Internal"):
        raise EgressSetupError(
            f"docker network {name!r} exists but is not --internal: remove it and restart the worker"
        )
    network.reload()
    configs = network.attrs.get("IPAM", {}).get("Config") or []
    gateway = next((c.get("Gateway") for c in configs if c.get("Gateway")), None)
    if not gateway:
        raise EgressSetupError(f"docker network {name!r} has no gateway address")
    return gateway.split("/")[0]


def _iptables(*args: str, check: bool = True) -> bool:
    try:
        done = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise EgressSetupError(
            "iptables is not installed (scripts/services.sh installs it); GEPA containers' "
            "egress cannot be limited. Set GENESIS_GEPA_ENFORCE_EGRESS=false to run without"
        ) from None
    if check and done.returncode != 0:
        raise EgressSetupError(
            f"iptables {' '.join(args)} failed: {done.stderr.strip()} (the worker needs root for "
            "the GEPA egress rules; GENESIS_GEPA_ENFORCE_EGRESS=false runs without them)"
        )
    return done.returncode == 0


def _bridge_interface(client: docker.DockerClient, name: str) -> str:
    options = client.networks.get(name).attrs.get("Options") or {}
    return options.get("com.docker.network.bridge.name") or BRIDGE_INTERFACE


def open_host_port(client: docker.DockerClient, network: str, port: int) -> None:
    """Containers on the network may reach this host only on ``port`` (the gateway)."""
    interface = _bridge_interface(client, network)
    if not _iptables("-n", "-L", IPTABLES_CHAIN, check=False) and not _iptables("-N", IPTABLES_CHAIN, check=False):
        _iptables("-n", "-L", IPTABLES_CHAIN)  # not created by another worker either: raise with iptables' reason
    if not _iptables("-C", IPTABLES_CHAIN, "-j", "DROP", check=False):
        _iptables("-A", IPTABLES_CHAIN, "-j", "DROP")
    accept = ["-p", "tcp", "--dport", str(port), "-j", "ACCEPT"]
    if not _iptables("-C", IPTABLES_CHAIN, *accept, check=False):
        _iptables("-I", IPTABLES_CHAIN, "1", *accept)
    jump = ["-i", interface, "-j", IPTABLES_CHAIN]
    if not _iptables("-C", "INPUT", *jump, check=False):
        _iptables("-I", "INPUT", "1", *jump)


def prune_stale_ports(gateway_ip: str) -> list[int]:
    """Remove the ACCEPT rules of gateways that are gone (a worker killed before it closed its
    port): a port nothing listens on must not stay open for the containers to whatever binds it
    next. Returns the ports removed."""
    listed = subprocess.run(["iptables", "-w", "-S", IPTABLES_CHAIN], capture_output=True, text=True).stdout
    removed = []
    for port in (int(p) for p in re.findall(r"--dport (\d+) -j ACCEPT", listed)):
        try:
            socket.create_connection((gateway_ip, port), timeout=0.2).close()
        except OSError:
            close_host_port(port)
            removed.append(port)
    return removed


def close_host_port(port: int) -> None:
    _iptables("-D", IPTABLES_CHAIN, "-p", "tcp", "--dport", str(port), "-j", "ACCEPT", check=False)


def parse_allow_list(text: str) -> frozenset[tuple[str, int]]:
    """``host:port`` pairs, comma separated (port defaults to 443), hosts in canonical form
    (genesis/netpolicy.py: ``0x7f.1`` is ``127.0.0.1``, IPv6 without brackets)."""
    pairs = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        bracketed_without_port = item.startswith("[") and item.endswith("]")
        if bracketed_without_port or ":" not in item:
            item += ":443"
        try:
            pairs.add(netpolicy.split_host_port(item))
        except ValueError as exc:
            raise EgressSetupError(f"egress allow-list entry {item!r}: {exc}") from None
    return frozenset(pairs)


@dataclass
class Route:
    """A reverse-proxied upstream: requests to ``/<prefix>/rest`` go to ``base_url/rest``."""

    base_url: str
    api_key: str = ""
    key_header: str = "authorization"  # "authorization" (Bearer, OpenAI style) or "x-api-key" (Anthropic)


@dataclass
class EgressGateway:
    host: str
    port: int
    routes: dict[str, Route] = field(default_factory=dict)
    allow: frozenset[tuple[str, int]] = frozenset()
    refused: int = 0
    # A client's own allow-list (POST /connect-git egress_allow), by the address of its container.
    allow_by_peer: dict[str, frozenset[tuple[str, int]]] = field(default_factory=dict)
    # Every proxied connection is checked again here (even to a listed host): only global
    # addresses, or private ones the operator's GENESIS_OUTBOUND_PRIVATE_ALLOW covers, and the
    # connection goes to the address that was checked.
    policy: netpolicy.NetPolicy = field(default_factory=netpolicy.NetPolicy)

    def allow_peer(self, address: str, pairs: frozenset[tuple[str, int]]) -> None:
        self.allow_by_peer[address] = pairs

    def forget_peer(self, address: str) -> None:
        self.allow_by_peer.pop(address, None)

    def start(self) -> EgressGateway:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            self._http = httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT_S, trust_env=False)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, self.host, self.port))
            self.port = self._server.sockets[0].getsockname()[1]  # port 0: the one the system chose
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="gepa-egress", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise EgressSetupError(f"the egress gateway did not start on {self.host}:{self.port}")
        log.info(
            "egress gateway on %s:%d, routes %s, allow %s",
            self.host,
            self.port,
            sorted(self.routes),
            sorted(self.allow),
        )
        for host, port in sorted(self.allow):  # addresses can be judged now; names when asked for
            if netpolicy.literal_address(host) is not None:
                try:
                    netpolicy.check(host, port, self.policy)
                except netpolicy.Refused as exc:
                    log.warning("GENESIS_GEPA_EGRESS_ALLOW entry %s:%d will be refused: %s", host, port, exc)
        return self

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            # Open tunnels end here, while their loop still runs (their sockets close cleanly).
            handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await self._http.aclose()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > MAX_HEAD_BYTES:
                return await self._reply(writer, 431, "request head too large")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _version = request_line.split(" ", 2)
            headers = {}
            for line in header_lines:
                if ":" in line:
                    key, value = line.split(":", 1)
                    headers[key.strip().lower()] = value.strip()
            if method == "CONNECT":
                return await self._tunnel(target, reader, writer, peer)
            if target.startswith("http://"):
                return await self._forward_absolute(method, target, headers, reader, writer, peer)
            prefix, _, rest = target.lstrip("/").partition("/")
            route = self.routes.get(prefix)
            if route is None:
                self.refused += 1
                log.warning("egress refused: %s %s from %s (no such route)", method, target, peer)
                return await self._reply(writer, 403, f"no egress route for {target.split('?')[0]!r}")
            length = int(headers.get("content-length") or 0)
            if length > MAX_BODY_BYTES:
                return await self._reply(writer, 413, "request body too large")
            body = await reader.readexactly(length) if length else b""
            upstream_headers = {
                k: v
                for k, v in headers.items()
                if k
                not in (
                    "host",
                    "authorization",
                    "api-key",
                    "x-api-key",
                    "content-length",
                    "connection",
                    "accept-encoding",
                )
            }
            if route.api_key:
                bearer = route.key_header == "authorization"
                upstream_headers[route.key_header] = f"Bearer {route.api_key}" if bearer else route.api_key
            url = route.base_url.rstrip("/") + "/" + rest
            log.info("egress %s %s -> %s", method, target.split("?")[0], urlsplit(url).netloc)
            response = await self._http.request(method, url, content=body, headers=upstream_headers)
            await self._reply(
                writer,
                response.status_code,
                response.content,
                response.headers.get("content-type", "application/octet-stream"),
            )
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, ConnectionError):
            pass
        except httpx.HTTPError as exc:
            await self._reply(writer, 502, f"upstream error: {type(exc).__name__}")
        finally:
            if not writer.is_closing():
                writer.close()

    async def _destination(self, host: str, port: int, peer, what: str) -> netpolicy.Destination | str:
        """The checked destination of a proxied request, or why it is refused."""
        try:
            name = netpolicy.canonical_host(host)
        except netpolicy.Refused as exc:
            return self._refuse(what, host, port, peer, str(exc))
        pair = (name, port)
        if pair not in self.allow and pair not in self.allow_by_peer.get(peer[0] if peer else "", frozenset()):
            return self._refuse(what, name, port, peer, f"egress to {name}:{port} is not in the allow-list")
        try:
            destination = await netpolicy.check_async(name, port, self.policy)
        except netpolicy.Refused as exc:
            return self._refuse(what, name, port, peer, f"egress to {name}:{port} is refused: {exc}")
        log.info("egress %s %s:%d (%s) from %s", what, name, port, destination.address, peer)
        return destination

    def _refuse(self, what: str, host: str, port: int, peer, reason: str) -> str:
        self.refused += 1
        log.warning("egress refused: %s %s:%d from %s (%s)", what, host, port, peer, reason)
        return reason

    async def _connect(self, destination: netpolicy.Destination, writer):
        """A connection to the checked address (not a new lookup of the name), or None after
        answering 502: which of refused, silent or unreachable it was stays in the log."""
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(str(destination.address), destination.port), UPSTREAM_CONNECT_TIMEOUT_S
            )
        except (TimeoutError, OSError) as exc:
            log.warning(
                "egress to %s:%d (%s) failed: %s",
                destination.host,
                destination.port,
                destination.address,
                type(exc).__name__,
            )
            await self._reply(writer, 502, f"no connection to {destination.host}:{destination.port}")
            return None

    async def _tunnel(self, target: str, reader, writer, peer) -> None:
        host, _, port = target.rpartition(":")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            return await self._reply(writer, 400, "CONNECT needs host:port")
        destination = await self._destination(host, int(port), peer, "CONNECT")
        if isinstance(destination, str):
            return await self._reply(writer, 403, destination)
        upstream = await self._connect(destination, writer)
        if upstream is None:
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await _pipe_both(reader, writer, *upstream)

    async def _forward_absolute(self, method, target, headers, reader, writer, peer) -> None:
        parts = urlsplit(target)
        try:
            port = parts.port or 80
        except ValueError:
            return await self._reply(writer, 400, "the URL's port is not a number in 1-65535")
        destination = await self._destination(parts.hostname or "", port, peer, method)
        if isinstance(destination, str):
            return await self._reply(writer, 403, destination)
        upstream = await self._connect(destination, writer)
        if upstream is None:
            return
        upstream_reader, upstream_writer = upstream
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items() if not k.startswith("proxy-")]
        upstream_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await _pipe_both(reader, writer, upstream_reader, upstream_writer)

    @staticmethod
    async def _reply(writer, status: int, body: bytes | str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode() if isinstance(body, str) else body
        writer.write(
            f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {len(data)}\r\n"
            "connection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()


async def _pipe_both(reader, writer, upstream_reader, upstream_writer) -> None:
    async def pipe(source, sink) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except ConnectionError:
            pass
        finally:
            if not sink.is_closing():
                sink.close()

    await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
