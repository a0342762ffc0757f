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
and without credentials, whose host resolves only to global addresses (genesis/netpolicy.py; the
operator's ``GENESIS_OUTBOUND_PRIVATE_ALLOW`` covers exceptions, ``GENESIS_WEBHOOK_ALLOW_PRIVATE=true``
lifts the check for receivers), checked at propose time and again before each delivery, which
then connects to the address it checked: Genesis' worker must not be a way into the machines next
to it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path
from urllib.parse import urlsplit

from genesis import netpolicy
from identity.apikeys import load_pepper

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


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a notify_url as written (no DNS), or None. Where it may lead is
    ``receiver``'s question."""
    if len(url) > MAX_URL_LENGTH:
        return f"notify_url is {len(url)} characters; at most {MAX_URL_LENGTH}"
    try:
        parts = urlsplit(url)
        _ = parts.port  # ValueError for a port that is not a number in range
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
    return None


async def receiver(url: str, policy: netpolicy.NetPolicy) -> netpolicy.Destination:
    """The checked destination of a notify_url (resolved; every address global, or allowed by the
    operator): deliveries connect to its address. Raises netpolicy.Refused with a message for the
    proposer (netpolicy.Unresolvable when the name does not resolve now)."""
    try:
        return await netpolicy.check_async(*netpolicy.url_host_port(url), policy)
    except netpolicy.NotGlobal as exc:
        raise netpolicy.Refused(
            f"notify_url host {exc.reason}; webhooks go only to global addresses unless the operator allows "
            f"the host ({netpolicy.SETTING}) or every receiver (GENESIS_WEBHOOK_ALLOW_PRIVATE=true)"
        ) from None
    except netpolicy.Unresolvable:
        raise
    except netpolicy.Refused as exc:
        raise netpolicy.Refused(f"notify_url host: {exc}") from None


def pinned_request(url: str, destination: netpolicy.Destination) -> tuple[str, dict[str, str], dict[str, str]]:
    """The URL, headers and httpx extensions that POST to ``url`` over a connection to the
    checked address: the original host travels in the Host header and as the TLS server name
    (the receiver's certificate is verified against it)."""
    parts = urlsplit(url)
    extensions = {}
    if parts.scheme == "https" and netpolicy.literal_address(destination.host) is None:
        extensions["sni_hostname"] = destination.host
    return destination.pinned_url(url), {"Host": parts.netloc}, extensions


def signature(secret: str, msg_id: str, timestamp: int, body: str) -> str:
    """The ``webhook-signature`` header value (Standard Webhooks v1)."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    digest = hmac.new(key, f"{msg_id}.{timestamp}.{body}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()
