"""Deliver one signed webhook (a mutation's status change) to its notify_url.

The workflow retries this activity with backoff until the status change's retry window closes;
a receiver that is down never blocks or fails the mutation. Each attempt is signed afresh (new
``webhook-timestamp``) under the same ``webhook-id``. Redirects are not followed. The receiver's
host is checked (genesis/netpolicy.py) before every attempt and the POST goes to the address
that was checked."""

from __future__ import annotations

import json
import time

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import names
from genesis import netpolicy
from genesis.config import Settings
from genesis.dto import WebhookDelivery, WebhookResult
from pipeline import webhooks

# Answers that retrying will not change: the receiver refuses these deliveries for good.
FINAL_STATUSES = {400, 401, 403, 404, 405, 410, 413, 422}


class WebhookActivities:
    def __init__(self, settings: Settings):
        self._secret = webhooks.load_server_secret(settings.webhook.secret.get_secret_value(), settings.state_dir)
        self._policy = netpolicy.NetPolicy.from_settings(settings, webhooks=True)
        self._timeout_s = settings.webhook.timeout_s

    def _new_client(self) -> httpx.AsyncClient:
        """A client per attempt: connections are made to checked addresses, and a pooled one
        (keyed by address) must never carry another host's request under the first host's TLS."""
        return httpx.AsyncClient(
            timeout=self._timeout_s,
            follow_redirects=False,
            trust_env=False,
            headers={"User-Agent": webhooks.USER_AGENT},
        )

    @activity.defn(name=names.DELIVER_WEBHOOK)
    async def deliver_webhook(self, delivery: WebhookDelivery) -> WebhookResult:
        attempt = activity.info().attempt
        problem = webhooks.url_problem(delivery.notify_url)
        if problem is not None:
            raise ApplicationError(problem, type="WEBHOOK_URL_FORBIDDEN", non_retryable=True)
        try:
            receiver = await webhooks.receiver(delivery.notify_url, self._policy)
        except netpolicy.Unresolvable as exc:
            raise ApplicationError(f"attempt {attempt}: {exc}") from None  # DNS may answer on a later attempt
        except netpolicy.Refused as exc:
            raise ApplicationError(str(exc), type="WEBHOOK_URL_FORBIDDEN", non_retryable=True) from None
        url, host_header, extensions = webhooks.pinned_request(delivery.notify_url, receiver)
        body = json.dumps(delivery.event, separators=(",", ":"))
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "webhook-id": delivery.delivery_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": webhooks.signature(
                webhooks.agent_secret(self._secret, delivery.agent_id), delivery.delivery_id, timestamp, body
            ),
            "X-Genesis-Event": delivery.event.get("event", webhooks.EVENT),
            "X-Genesis-Attempt": str(attempt),
            **host_header,
        }
        try:  # to the address just checked, not to a second lookup of the name
            async with self._new_client() as client:
                response = await client.post(url, content=body.encode(), headers=headers, extensions=extensions)
        except httpx.HTTPError as exc:
            raise ApplicationError(f"attempt {attempt}: {type(exc).__name__}: {exc or 'no answer'}") from None
        if 200 <= response.status_code < 300:
            activity.logger.info(
                "webhook %s delivered to %s (attempt %d)", delivery.delivery_id, delivery.notify_url, attempt
            )
            return WebhookResult(status_code=response.status_code, attempt=attempt)
        message = f"attempt {attempt}: the receiver answered {response.status_code}"
        if response.status_code in FINAL_STATUSES:
            raise ApplicationError(message, type="WEBHOOK_REFUSED", non_retryable=True)
        raise ApplicationError(message)
