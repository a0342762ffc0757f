"""Webhooks: a proposal's ``notify_url`` gets a signed POST on each status change of its mutation.

Signing follows the Standard Webhooks specification (https://www.standardwebhooks.com), so a
receiver can verify with any of its libraries (Python: ``standardwebhooks``) or by hand:

- headers ``webhook-id`` (the delivery id, the same on every retry: deduplicate on it),
  ``webhook-timestamp`` (unix seconds of this attempt) and ``webhook-signature``
  (``v1,<base64 HMAC-SHA256(secret, "{webhook-id}.{webhook-timestamp}.{raw body}")>``);
- the secret is ``whsec_<base64 key>``; the HMAC key is the base64-decoded part.

Each agent has its own secret, derived from the server secret (``GENESIS_WEBHOOK_SECRET``, or
a random one in ``<state_dir>/webhook-secret``): ``key = HMAC-SHA256(server secret,
"genesis-webhook-v1:" + agent_id)``. Nothing is stored per agent; an agent reads its secret from
``GET /v1/agents/me/webhook-secret`` with its API key; changing the server secret rotates all.

Address policy: only ``http``/``https`` URLs of at most ``MAX_URL_LENGTH`` characters, with a host
and without credentials. Unless ``GENESIS_WEBHOOK_ALLOW_PRIVATE=true``, the host may not be (or,
at delivery time, resolve to) a loopback, private, link-local, shared, multicast or reserved
address, nor ``localhost``: Genesis' worker must not be usable to reach the machines next to it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import socket
from pathlib import Path
from urllib.parse import urlsplit

from genesis.apikeys import load_pepper

MAX_URL_LENGTH = 2048
SECRET_FILE = "webhook-secret"
SECRET_PREFIX = "whsec_"
EVENT = "MutationStatusChanged"
USER_AGENT = "Genesis-Webhooks/1"


def load_server_secret(configured: str, state_dir: Path) -> bytes:
    """The configured server secret, or this installation's own (created once, mode 0600)."""
    return load_pepper(configured, state_dir, SECRET_FILE)


def agent_secret(server_secret: bytes, agent_id: str) -> str:
    """The agent's signing secret in Standard Webhooks form (``whsec_`` + base64 key)."""
    key = hmac.new(server_secret, f"genesis-webhook-v1:{agent_id}".encode(), hashlib.sha256).digest()
    return SECRET_PREFIX + base64.b64encode(key).decode()


def url_problem(url: str, *, allow_private: bool) -> str | None:
    """Why ``url`` cannot be a notify_url, or None. Checks the literal URL only (no DNS)."""
    if len(url) > MAX_URL_LENGTH:
        return f"notify_url is {len(url)} characters; at most {MAX_URL_LENGTH}"
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError for a port that is not a number in range
    except ValueError as exc:
        return f"notify_url is not a valid URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return "notify_url must be an http:// or https:// URL"
    if not parts.hostname:
        return "notify_url has no host"
    if parts.username is not None or parts.password is not None:
        return "notify_url may not carry credentials (user:password@)"
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        return "notify_url may not contain whitespace or control characters"
    del port
    if not allow_private:
        host = parts.hostname.rstrip(".").lower()
        if host == "localhost" or host.endswith(".localhost"):
            return _private(host)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None  # a name: checked again after DNS at delivery time
        if not is_public(address):
            return _private(host)
    return None


def _private(host: str) -> str:
    return (f"notify_url host {host} is a loopback, private or reserved address; such receivers are "
            "refused unless the server runs with GENESIS_WEBHOOK_ALLOW_PRIVATE=true")


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


async def resolve_problem(url: str) -> str | None:
    """After DNS: why delivering to ``url`` would reach a non-public address, or None."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"cannot resolve {host}: {exc}"  # caller decides: retried (DNS may come back)
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if not is_public(address):
            return _private(f"{host} ({address})")
    return None


def signature(secret: str, msg_id: str, timestamp: int, body: str) -> str:
    """The ``webhook-signature`` header value (Standard Webhooks v1)."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()
