"""Server-side requests to hosts a client names (genesis/netpolicy.py): every spelling of a private
address is recognised, names are judged by what they resolve to, the operator's allow-list opens
exactly what it names, and the connections (git clones, the egress gateway) go to the address that
was checked. Real git, real sockets, real HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import subprocess
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from doubles.gepa_repo import make_repo
from genesis import netpolicy
from gepa_steps import egress, gitops, programs
from tests.netpolicy_servers import Silent

STRICT = netpolicy.NetPolicy()


@pytest.mark.parametrize(
    "spelling, address",
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0X7F.0.0.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("10.0x1.0377", "10.1.0.255"),
        ("[::1]", "::1"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("[fe80::1%25eth0]", "fe80::1"),
        ("\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11", "127.0.0.1"),  # full-width digits and dots
    ],
)
def test_every_spelling_of_an_address_has_one_canonical_form(spelling, address):
    assert netpolicy.canonical_host(spelling) == address


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("Example.COM.", "example.com"),
        ("b\u00fccher.example", "xn--bcher-kva.example"),
        ("09.1.1.1", "09.1.1.1"),
        ("256.1.1.1", "256.1.1.1"),
        ("1.2.3.4.5", "1.2.3.4.5"),  # not addresses to the C resolver either: names
    ],
)
def test_names_are_lower_case_ascii_without_a_trailing_dot(name, canonical):
    assert netpolicy.canonical_host(name) == canonical


@pytest.mark.parametrize("bad", ["", "a b", "exa\x00mple.com", "-lead.example", "a..b", "x" * 64 + ".example", "[::1"])
def test_what_is_neither_a_name_nor_an_address_is_refused(bad):
    with pytest.raises(netpolicy.Refused):
        netpolicy.canonical_host(bad)


@pytest.mark.parametrize(
    "host, why",
    [
        ("127.0.0.1", "a loopback address"),
        ("0x7f.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("0.0.0.0", "the unspecified address"),
        ("::", "the unspecified address"),
        ("10.1.2.3", "a private address"),
        ("172.16.0.1", "a private address"),
        ("172.31.255.254", "a private address"),
        ("192.168.1.1", "a private address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("169.254.10.1", "a link-local address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("fe80::1", "a link-local address"),
        ("fd12:3456::1", "a unique-local address"),
        ("fec0::1", "a site-local address"),
        ("100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("240.0.0.1", "a private address"),
        ("255.255.255.255", "a private address"),
        ("192.0.2.1", "a private address"),  # documentation
        ("2001:db8::1", "a private address"),  # documentation
        ("::ffff:10.0.0.1", "a private address (it stands for 10.0.0.1)"),
        ("64:ff9b::a9fe:a9fe", "a cloud metadata address (it stands for 169.254.169.254)"),
        ("2002:7f00:1::", "a loopback address (it stands for 127.0.0.1)"),
        ("::127.0.0.1", "a loopback address (it stands for 127.0.0.1)"),
    ],
)
def test_non_global_addresses_are_refused_with_the_reason(host, why):
    with pytest.raises(netpolicy.NotGlobal) as refused:
        netpolicy.check(host, 443, STRICT)
    assert why in refused.value.reason
    assert netpolicy.SETTING in str(refused.value)


@pytest.mark.parametrize("host", ["8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", "::ffff:8.8.8.8", "64:ff9b::808:808"])
def test_global_addresses_pass(host):
    destination = netpolicy.check(host, 443, STRICT)
    assert destination.port == 443 and destination.addresses == (ipaddress.ip_address(host),)
    assert destination.curl_resolve() is None  # an address needs no pinning


def test_this_machines_own_networks_are_refused():
    """Docker bridges and the machine's own addresses: whatever range they use."""
    networks = netpolicy.local_networks()
    assert ipaddress.ip_network("127.0.0.0/8") in networks
    docker0 = [n for n in networks if n.version == 4 and not n.is_loopback]
    for network in docker0:
        with pytest.raises(netpolicy.NotGlobal):
            netpolicy.check(str(network.network_address + 1), 80, STRICT)
    public = ipaddress.ip_address("198.51.99.7")  # a global address, as if it were this machine's
    assert netpolicy.address_problem(public) is None
    own = (*networks, ipaddress.ip_network("198.51.99.0/24"))
    assert netpolicy.address_problem(public, own) == "on a network of this machine (198.51.99.0/24)"
    assert netpolicy.address_problem(ipaddress.ip_address("::ffff:198.51.99.7"), own) == (
        "on a network of this machine (198.51.99.0/24) (it stands for 198.51.99.7)"
    )


def test_names_are_judged_by_every_address_they_resolve_to():
    with pytest.raises(netpolicy.NotGlobal, match="localhost is a loopback name"):
        netpolicy.check("localhost", 80, STRICT)
    with pytest.raises(netpolicy.NotGlobal, match="localhost is a loopback name"):
        netpolicy.check("api.LOCALHOST.", 80, STRICT)
    with pytest.raises(netpolicy.Unresolvable, match=r"cannot resolve nowhere\.genesis\.invalid"):
        netpolicy.check("nowhere.genesis.invalid", 80, STRICT)
    # One private address among global ones is enough to refuse (a rebinding host answers both).
    mixed = netpolicy.NetPolicy(resolver=lambda host, port: ["8.8.8.8", "10.0.0.7"])
    with pytest.raises(netpolicy.NotGlobal, match=r"mixed.example \(10.0.0.7\) is a private address"):
        netpolicy.check("mixed.example", 443, mixed)
    public = netpolicy.NetPolicy(resolver=lambda host, port: ["8.8.8.8", "2001:4860:4860::8888"])
    destination = netpolicy.check("Public.Example.", 443, public)
    assert destination.host == "public.example"
    assert destination.curl_resolve() == "public.example:443:8.8.8.8,[2001:4860:4860::8888]"
    assert destination.pinned_url("https://Public.Example./a?b") == "https://8.8.8.8/a?b"


async def test_the_async_check_resolves_with_a_deadline():
    slow = netpolicy.NetPolicy(resolver=lambda host, port: time.sleep(2) or ["8.8.8.8"])
    started = time.monotonic()
    with pytest.raises(netpolicy.Unresolvable, match=r"no answer within 0\.2s"):
        await netpolicy.check_async("slow.example", 443, slow, timeout=0.2)
    assert time.monotonic() - started < 1.5
    with pytest.raises(netpolicy.NotGlobal):
        await netpolicy.check_async("0x7f.1", 443, STRICT)


def test_the_allow_list_opens_exactly_what_it_names():
    allow = netpolicy.AllowList.parse("127.0.0.1:8080, git.internal:443, 10.20.0.0/16, [fd00::5]:80, 192.168.7.7")
    policy = netpolicy.NetPolicy(allow)
    assert netpolicy.check("0x7f.1", 8080, policy).address == ipaddress.ip_address("127.0.0.1")
    with pytest.raises(netpolicy.NotGlobal):
        netpolicy.check("127.0.0.1", 8081, policy)  # another port
    assert netpolicy.check("10.20.3.4", 5432, policy)  # a network: every port
    with pytest.raises(netpolicy.NotGlobal):
        netpolicy.check("10.21.0.1", 5432, policy)
    assert netpolicy.check("[fd00::5]", 80, policy)
    assert netpolicy.check("192.168.7.7", 22, policy)
    internal = netpolicy.NetPolicy(allow, resolver=lambda host, port: ["10.99.0.3"])
    assert netpolicy.check("GIT.internal", 443, internal).address == ipaddress.ip_address("10.99.0.3")
    with pytest.raises(netpolicy.NotGlobal):
        netpolicy.check("other.internal", 443, internal)
    for bad in ("10.0.0.0/33", "host-without-port", "[::1]:99999", "a b:1"):
        with pytest.raises(ValueError, match="is not"):
            netpolicy.AllowList.parse(bad)


def test_egress_allow_entries_are_canonical():
    assert programs.check_egress_allow(["0x7f.1:6379", "2130706433:6379", "[0::1]:80", "Api.Example.com.:443"]) == [
        "127.0.0.1:6379",
        "[::1]:80",
        "api.example.com:443",
    ]
    for bad, why in (("evil.example.com", "no port"), ("::1:80", "brackets"), ("a b:1", "not a host name")):
        with pytest.raises(programs.InvalidId, match=why):
            programs.check_egress_allow([bad])
    assert egress.parse_allow_list("0x7f.1:80, api.example.com, [::1]") == {
        ("127.0.0.1", 80),
        ("api.example.com", 443),
        ("::1", 443),
    }


def test_repository_urls_are_handed_to_git_with_the_canonical_host():
    assert programs.check_repo_url("https://GitHub.com./acme/qa.git", "") == "https://github.com/acme/qa.git"
    assert programs.check_repo_url("http://0x7f.1:8080/a.git", "", allow_http=True) == "http://127.0.0.1:8080/a.git"
    assert programs.check_repo_url("https://[::ffff:127.0.0.1]/x", "") == "https://[::ffff:7f00:1]/x"


# --- git: pinned, bounded, one message ------------------------------------------------------


@pytest.fixture(scope="module")
def dumb_http_repo(tmp_path_factory):
    """A bare repository served over git's dumb HTTP protocol by a plain file server."""
    root = tmp_path_factory.mktemp("served")
    source = make_repo(root / "source")
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(root / "qa.git")], check=True)
    subprocess.run(["git", "update-server-info"], cwd=root / "qa.git", check=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietFiles, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_git_connects_to_the_pinned_address_only(dumb_http_repo, tmp_path):
    """The host name resolves nowhere but in the pin: the clone can only have used the pin."""
    port = dumb_http_repo
    url = f"http://repo.genesis.invalid:{port}/qa.git"
    pinned = netpolicy.Destination("repo.genesis.invalid", port, (ipaddress.ip_address("127.0.0.1"),))
    gitops.clone(url, tmp_path / "pinned", pin=pinned.curl_resolve())
    assert (tmp_path / "pinned" / "program.json").exists()
    with pytest.raises(gitops.CloneFailed) as failed:
        gitops.clone(url, tmp_path / "unpinned")
    assert str(failed.value) == gitops.CLONE_FAILED and "repo.genesis.invalid" in failed.value.detail


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_silent_server_fails_the_clone_within_the_limits(scheme, tmp_path):
    silent = Silent()
    limits = gitops.CloneLimits(connect_timeout_s=2.0, stall_s=1, timeout_s=60.0)
    started = time.monotonic()
    try:
        with pytest.raises(gitops.CloneFailed) as failed:
            gitops.clone(f"{scheme}://127.0.0.1:{silent.port}/x.git", tmp_path / "clone", limits=limits)
        assert time.monotonic() - started < 5
        assert str(failed.value) == gitops.CLONE_FAILED
        # git's helper that held the connection is gone too: the server sees the connection end.
        assert silent.connections
        for connection in silent.connections:
            connection.settimeout(5)
            while connection.recv(65536):
                pass
    finally:
        silent.close()


def test_clone_failures_say_the_same_whatever_answered(tmp_path):
    """A closed port, a silent one and a service that is not git all read alike to the caller."""
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    silent = Silent()
    talker = socket.create_server(("127.0.0.1", 0))  # answers garbage, like Redis or Postgres would

    def babble() -> None:
        while True:
            try:
                connection = talker.accept()[0]
            except OSError:
                return
            connection.sendall(b"-ERR unknown command\r\n")
            connection.close()

    threading.Thread(target=babble, daemon=True).start()
    limits = gitops.CloneLimits(connect_timeout_s=2.0, stall_s=1, timeout_s=30.0)
    messages = set()
    try:
        for index, port in enumerate((closed_port, silent.port, talker.getsockname()[1])):
            with pytest.raises(gitops.CloneFailed) as failed:
                gitops.clone(f"http://127.0.0.1:{port}/r.git", tmp_path / str(index), limits=limits)
            messages.add(str(failed.value))
    finally:
        silent.close()
        talker.close()
    assert messages == {gitops.CLONE_FAILED}


# --- the egress gateway checks every connection again ---------------------------------------


async def _ask(gateway: egress.EgressGateway, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), 10)
    writer.close()
    return answer


async def test_the_gateway_refuses_a_private_target_even_when_listed():
    target = Silent()
    listed = frozenset({("127.0.0.1", target.port)})
    strict = egress.EgressGateway("127.0.0.1", 0, allow=listed).start()
    operator_allows = netpolicy.NetPolicy(netpolicy.AllowList.parse(f"127.0.0.1:{target.port}"))
    allowed = egress.EgressGateway("127.0.0.1", 0, allow=listed, policy=operator_allows).start()
    try:
        for request in (
            f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n",
            f"CONNECT 2130706433:{target.port} HTTP/1.1\r\n\r\n",
            f"GET http://0x7f.1:{target.port}/ HTTP/1.1\r\nhost: x\r\n\r\n",
        ):
            answer = await _ask(strict, request.encode())
            assert answer.startswith(b"HTTP/1.1 403"), answer
            assert b"127.0.0.1 is a loopback address" in answer
        strict.allow_peer("127.0.0.1", listed)  # on a client's own list too: still refused
        assert (await _ask(strict, f"CONNECT 127.0.0.1:{target.port} HTTP/1.1\r\n\r\n".encode())).startswith(
            b"HTTP/1.1 403"
        )
        unlisted = await _ask(strict, b"CONNECT 8.8.8.8:443 HTTP/1.1\r\n\r\n")
        assert unlisted.startswith(b"HTTP/1.1 403") and b"not in the allow-list" in unlisted
        tunnel = await _ask(allowed, f"CONNECT 0x7f.1:{target.port} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.startswith(b"HTTP/1.1 200"), tunnel
        assert strict.refused == 5 and allowed.refused == 0
    finally:
        strict.close()
        allowed.close()
        target.close()
