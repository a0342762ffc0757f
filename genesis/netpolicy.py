"""Which destinations the server itself may connect to on a client's behalf: repository clones
(POST /connect-git), webhook deliveries (notify_url) and the GEPA egress gateway's proxy.

A client names a host; the server must not become its way into the machines next to it. So a
host is resolved, every address it resolves to is canonicalised and checked, and the connection
then goes to an address that was checked (never to a second resolution, which a DNS-rebinding
host could answer differently). Only global unicast addresses pass: loopback, private,
link-local (cloud metadata lives there), unique-local, site-local, shared (CGNAT), multicast,
unspecified, reserved and documentation ranges are refused, and so is every network of this
machine's own interfaces (Docker bridges, a host's own public address).

Host literals are read the way the C resolver reads them, so ``2130706433``, ``127.1``,
``0x7f.1`` and ``0177.0.0.1`` are 127.0.0.1 here too, and an IPv6 address that embeds an IPv4
one (``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) is judged by the IPv4 one.

The operator's allow-list (``GENESIS_OUTBOUND_PRIVATE_ALLOW``) covers the rare legitimate
private destination: ``host:port`` entries (a name or an address) and networks in CIDR form (or a
bare address: every port)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import psutil

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

SETTING = "GENESIS_OUTBOUND_PRIVATE_ALLOW"
DEFAULT_PORTS = {"http": 80, "https": 443}
RESOLVE_TIMEOUT_S = 5.0
LOCAL_NETWORKS_TTL_S = 30.0

# Cloud instance metadata services (AWS, GCP, Azure, OpenStack: 169.254.169.254; AWS over
# IPv6: fd00:ec2::254; Alibaba: 100.100.100.200). Named first so a refusal says so.
METADATA = tuple(ipaddress.ip_network(n) for n in ("169.254.169.254/32", "fd00:ec2::254/128", "100.100.100.200/32"))
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated ::a.b.c.d


class Refused(ValueError):
    """The destination may not be reached; the message says which host and why."""


class Unresolvable(Refused):
    """The name did not resolve (now): callers that retry later may try again."""


class NotGlobal(Refused):
    """The host is, or resolves to, an address the server does not connect to. ``reason`` says
    which ("127.0.0.1 is a loopback address"); the message adds how an operator allows it."""

    def __init__(self, reason: str):
        super().__init__(
            f"{reason}; the server connects only to global addresses unless the operator allows the host ({SETTING})"
        )
        self.reason = reason


# --- literals and canonical forms -----------------------------------------------------------

_DIGITS = {8: frozenset("01234567"), 10: frozenset("0123456789"), 16: frozenset("0123456789abcdefABCDEF")}


def _ipv4_number(part: str) -> int | None:
    """One part of an IPv4 literal as inet_aton reads it: decimal, 0x hex or 0-prefixed octal."""
    if part[:2] in ("0x", "0X"):
        digits, base = part[2:] or "0", 16  # inet_aton takes a bare "0x" as zero
    elif len(part) > 1 and part[0] == "0":
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if not set(digits) <= _DIGITS[base]:
        return None
    return int(digits, base)


def parse_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """``text`` as an IPv4 address in any form the C library accepts (``a``, ``a.b``, ``a.b.c``,
    ``a.b.c.d``, each part decimal, hex or octal), or None when it is not one."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or any(p == "" for p in parts):
        return None
    numbers: list[int] = []
    for part in parts:
        number = _ipv4_number(part)
        if number is None:
            return None
        numbers.append(number)
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 1 << (8 * (5 - len(parts))):
        return None
    value = last
    for index, number in enumerate(leading):
        value |= number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def literal_address(host: str) -> Address | None:
    """The address ``host`` spells (brackets, a trailing dot and an IPv6 zone allowed), or None
    for a name."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0].rstrip(".")
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            return None
    return parse_ipv4(text)


def canonical_host(host: str) -> str:
    """The one spelling of ``host``: an address in its standard form (IPv6 without brackets),
    a name in lower-case ASCII (IDNA) without a trailing dot. Raises Refused for anything else."""
    if not isinstance(host, str) or not host or len(host) > 255 or any(c.isspace() or ord(c) < 32 for c in host):
        raise Refused(f"{host!r} is not a host name or address")
    address = literal_address(host)
    if address is not None:
        return str(address)
    try:
        name = host.rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise Refused(f"{host!r} is not a valid host name") from None
    address = literal_address(name)  # IDNA maps full-width digits and dots to ASCII ones
    if address is not None:
        return str(address)
    labels = name.split(".")
    if not name or any(
        not label
        or len(label) > 63
        or label.startswith("-")
        or label.endswith("-")
        or not all(c.isalnum() or c in "-_" for c in label)
        for label in labels
    ):
        raise Refused(f"{host!r} is not a valid host name")
    return name


# --- the address check ----------------------------------------------------------------------


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, NAT64, 6to4, IPv4-compatible), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64 or (address in IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


_local_networks: tuple[float, tuple[Network, ...]] = (0.0, ())


def local_networks() -> tuple[Network, ...]:
    """The networks of this machine's interfaces (Docker bridges included), read again every
    ``LOCAL_NETWORKS_TTL_S`` seconds: networks come and go with containers."""
    global _local_networks
    read_at, networks = _local_networks
    if time.monotonic() - read_at < LOCAL_NETWORKS_TTL_S:
        return networks
    found = []
    for addresses in psutil.net_if_addrs().values():
        for entry in addresses:
            if entry.family not in (socket.AF_INET, socket.AF_INET6) or not entry.netmask:
                continue
            try:
                prefix = bin(int(ipaddress.ip_address(entry.netmask))).count("1")
                interface = ipaddress.ip_interface(f"{entry.address.split('%', 1)[0]}/{prefix}")
            except ValueError:
                continue
            # A "network" wider than this (a tunnel with a default-route mask) is no local segment:
            # only the address itself is this machine's.
            wide = interface.network.prefixlen < (8 if interface.version == 4 else 32)
            found.append(ipaddress.ip_network(interface.ip) if wide else interface.network)
    _local_networks = (time.monotonic(), tuple(dict.fromkeys(found)))
    return _local_networks[1]


def address_problem(address: Address, own_networks: tuple[Network, ...] | None = None) -> str | None:
    """What kind of non-global address ``address`` is ("a loopback address", ...), or None when
    the server may connect to it. ``own_networks``: this machine's (default: read from its
    interfaces)."""
    inner = embedded_ipv4(address)
    if inner is not None:
        problem = address_problem(inner, own_networks)
        return f"{problem} (it stands for {inner})" if problem else None
    if any(address in network for network in METADATA):
        return "a cloud metadata address"
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (isinstance(address, ipaddress.IPv4Address) and address in SHARED, "a shared (carrier-grade NAT) address"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "a site-local address"),
        (isinstance(address, ipaddress.IPv6Address) and address in UNIQUE_LOCAL, "a unique-local address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a global address"),
    )
    for refused, reason in checks:
        if refused:
            return reason
    for network in local_networks() if own_networks is None else own_networks:
        if address.version == network.version and address in network:
            return f"on a network of this machine ({network})"
    return None


# --- the operator's allow-list -------------------------------------------------------------


def split_host_port(entry: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` as (canonical host, port); ValueError says what is wrong."""
    host, sep, port = entry.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("no port (1-65535) after the last ':'")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise ValueError("an IPv6 address goes in brackets, [address]:port")
    try:
        return canonical_host(host), int(port)
    except Refused as exc:
        raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class AllowList:
    """Private destinations the operator allows: exact ``host:port`` pairs and whole networks."""

    pairs: frozenset[tuple[str, int]] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> AllowList:
        """Comma-separated ``host:port``, ``[v6]:port``, CIDR networks or bare addresses."""
        pairs, networks = set(), []
        for entry in filter(None, (part.strip() for part in (text or "").split(","))):
            bare = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
            if "/" in bare:
                try:
                    networks.append(ipaddress.ip_network(bare, strict=False))
                except ValueError as exc:
                    raise ValueError(f"{entry!r} is not a network in CIDR form: {exc}") from None
            elif (address := literal_address(bare)) is not None and (":" in bare) == (address.version == 6):
                networks.append(ipaddress.ip_network(address))
            else:
                try:
                    pairs.add(split_host_port(entry))
                except ValueError as exc:
                    raise ValueError(f"{entry!r} is not host:port, a CIDR network or an address: {exc}") from None
        return cls(frozenset(pairs), tuple(networks))

    def covers(self, host: str, port: int, address: Address) -> bool:
        return (
            (host, port) in self.pairs
            or (str(address), port) in self.pairs
            or any(address.version == n.version and address in n for n in self.networks)
        )


@dataclass(frozen=True)
class NetPolicy:
    """The check every server-side connection to a client-named host goes through.
    ``allow_any``: no address check at all (webhook receivers on a trusted network, tests)."""

    allow: AllowList = field(default_factory=AllowList)
    allow_any: bool = False
    resolver: Resolver | None = None  # None: the system resolver (getaddrinfo)

    @classmethod
    def from_settings(cls, settings, *, webhooks: bool = False) -> NetPolicy:
        """The operator's policy; for webhook receivers ``GENESIS_WEBHOOK_ALLOW_PRIVATE`` lifts it."""
        return cls(
            AllowList.parse(settings.outbound_private_allow), allow_any=webhooks and settings.webhook.allow_private
        )


@dataclass(frozen=True)
class Destination:
    """A host that passed the check, and the addresses to connect to (and only those)."""

    host: str  # canonical
    port: int
    addresses: tuple[Address, ...]

    @property
    def address(self) -> Address:
        return self.addresses[0]

    def pinned_url(self, url: str) -> str:
        """``url`` with its host replaced by the checked address (send the original host in the
        Host header and as the TLS server name)."""
        parts = urlsplit(url)
        address = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        netloc = f"{address}:{parts.port}" if parts.port else address
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def curl_resolve(self) -> str | None:
        """The entry of libcurl's resolve list (git's ``http.curloptResolve``) that pins this
        host to its checked addresses; None for an address (nothing to resolve)."""
        if literal_address(self.host) is not None:
            return None
        addresses = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in self.addresses)
        return f"{self.host}:{self.port}:{addresses}"


# Lookups of client-named hosts get threads of their own: a flood of names that resolve slowly
# then delays only other such lookups (which time out: the connection-time check still runs),
# never the rest of the process's thread work.
_RESOLVERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="netpolicy-resolve")


def _system_resolve(host: str, port: int) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _judge(host: str, port: int, resolved: list[str], policy: NetPolicy) -> Destination:
    addresses: list[Address] = []
    for text in resolved:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Unresolvable(f"cannot resolve {host}")
    if not policy.allow_any:
        for address in addresses:
            problem = address_problem(address)
            if problem and not policy.allow.covers(host, port, address):
                shown = host if host == str(address) else f"{host} ({address})"
                raise NotGlobal(f"{shown} is {problem}")
    return Destination(host, port, tuple(addresses))


def _prepare(host: str, port: int, policy: NetPolicy) -> tuple[str, Address | None]:
    if not isinstance(port, int) or not 1 <= port <= 65535:
        raise Refused(f"port {port!r} is not 1-65535")
    name = canonical_host(host)
    address = literal_address(name)
    loopback_name = name == "localhost" or name.endswith(".localhost")  # RFC 6761: whatever a resolver answers
    if (
        address is None
        and loopback_name
        and not policy.allow_any
        and not policy.allow.covers(name, port, ipaddress.ip_address("127.0.0.1"))
    ):
        raise NotGlobal(f"{name} is a loopback name")
    return name, address


def check(host: str, port: int, policy: NetPolicy) -> Destination:
    """Resolve and check ``host:port`` (blocking); raise Refused (Unresolvable) or return the
    Destination to connect to."""
    name, address = _prepare(host, port, policy)
    if address is not None:
        return _judge(name, port, [str(address)], policy)
    try:
        resolved = (policy.resolver or _system_resolve)(name, port)
    except OSError as exc:
        raise Unresolvable(f"cannot resolve {name}: {exc.strerror or exc}") from None
    return _judge(name, port, resolved, policy)


async def check_async(host: str, port: int, policy: NetPolicy, timeout: float = RESOLVE_TIMEOUT_S) -> Destination:
    """``check`` for the event loop (resolution in a thread of its own pool, at most ``timeout``
    seconds)."""
    name, address = _prepare(host, port, policy)
    if address is not None:
        return _judge(name, port, [str(address)], policy)
    lookup = asyncio.get_running_loop().run_in_executor(_RESOLVERS, policy.resolver or _system_resolve, name, port)
    try:
        resolved = await asyncio.wait_for(lookup, timeout)
    except TimeoutError:
        raise Unresolvable(f"cannot resolve {name}: no answer within {timeout:g}s") from None
    except OSError as exc:
        raise Unresolvable(f"cannot resolve {name}: {exc.strerror or exc}") from None
    return _judge(name, port, resolved, policy)


def url_host_port(url: str) -> tuple[str, int]:
    """The host and port an http(s) URL connects to."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise Refused("the URL has no host")
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        raise Refused("the URL's port is not a number in 1-65535") from None
    if port is None:
        raise Refused(f"no default port for scheme {parts.scheme!r}")
    return parts.hostname, port
