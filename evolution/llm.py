"""LLM providers behind one interface: ``complete(settings, system, prompt) -> LLMReply``.

- ``ollama``: ``POST {url}/api/generate`` (logic-flow.md 3.3, ``stream: false``)
- ``openai``: ``POST {url}/v1/chat/completions`` (any OpenAI-compatible server: vLLM, LM Studio, llama.cpp, ...)
- ``anthropic``: ``POST {url}/v1/messages``
- ``off``: no LLM; every call raises :class:`LLMOff`

Errors say whether trying again could help: :class:`LLMUnavailable` (connection refused, timeout,
5xx, 429: retryable, the activity's retry policy tries again) and :class:`LLMBadReply` (4xx, an
answer that is not the protocol's JSON: not retryable). Token usage comes from the provider's
answer (Ollama ``prompt_eval_count`` / ``eval_count``, OpenAI ``usage``, Anthropic ``usage``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from genesis.config import Settings

DEFAULT_URL = {
    "ollama": "http://127.0.0.1:11434",
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
}
DEFAULT_MODEL = {"ollama": "llama3.1", "openai": "gpt-4o-mini", "anthropic": "claude-3-5-haiku-latest"}
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class LLMReply:
    text: str
    tokens_in: int
    tokens_out: int
    provider: str
    model: str


class LLMError(Exception):
    retryable = False
    code = "LLM_ERROR"


class LLMOff(LLMError):
    code = "LLM_OFF"


class LLMUnavailable(LLMError):
    retryable = True
    code = "LLM_UNAVAILABLE"


class LLMBadReply(LLMError):
    code = "LLM_BAD_REPLY"


def endpoint(settings: Settings) -> tuple[str, str]:
    """(base URL, model) of the configured provider, defaults filled in."""
    provider = settings.llm.provider
    url = (settings.llm.url or DEFAULT_URL.get(provider, "")).rstrip("/")
    return url, settings.llm.model or DEFAULT_MODEL.get(provider, "")


def estimated_cost(settings: Settings, tokens_in: int, tokens_out: int) -> float:
    return round(tokens_in * settings.llm.cost_in_per_mtok / 1e6 + tokens_out * settings.llm.cost_out_per_mtok / 1e6, 6)


def _request(settings: Settings, system: str, prompt: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """(url, headers, body) of one completion in the provider's protocol."""
    provider = settings.llm.provider
    base, model = endpoint(settings)
    key = settings.llm.api_key.get_secret_value()
    if provider == "ollama":
        body = {
            "model": model,
            "system": system,
            "prompt": prompt,
            "stream": False,
            "options": {"temperature": settings.llm.temperature, "num_predict": settings.llm.max_tokens},
        }
        return f"{base}/api/generate", {}, body
    if provider == "openai":
        path = "/chat/completions" if base.endswith("/v1") else "/v1/chat/completions"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {
            "model": model,
            "temperature": settings.llm.temperature,
            "max_tokens": settings.llm.max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        }
        return base + path, headers, body
    if provider == "anthropic":
        path = "/messages" if base.endswith("/v1") else "/v1/messages"
        headers = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
        body = {
            "model": model,
            "system": system,
            "max_tokens": settings.llm.max_tokens,
            "temperature": min(settings.llm.temperature, 1.0),
            "messages": [{"role": "user", "content": prompt}],
        }
        return base + path, headers, body
    raise LLMOff(
        "no LLM is configured (GENESIS_LLM_PROVIDER=off): evolution cycles are skipped; "
        "external agents can still propose mutations"
    )


def _parse(provider: str, model: str, data: Any) -> LLMReply:
    """The text and token usage of a provider's answer; LLMBadReply if it is not that protocol."""
    try:
        if provider == "ollama":
            return LLMReply(
                str(data["response"]),
                int(data.get("prompt_eval_count") or 0),
                int(data.get("eval_count") or 0),
                provider,
                str(data.get("model") or model),
            )
        usage = data.get("usage") or {}
        if provider == "openai":
            text = data["choices"][0]["message"]["content"] or ""
            return LLMReply(
                str(text),
                int(usage.get("prompt_tokens") or 0),
                int(usage.get("completion_tokens") or 0),
                provider,
                str(data.get("model") or model),
            )
        text = "".join(part.get("text", "") for part in data["content"] if part.get("type") == "text")
        return LLMReply(
            text,
            int(usage.get("input_tokens") or 0),
            int(usage.get("output_tokens") or 0),
            provider,
            str(data.get("model") or model),
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise LLMBadReply(
            f"{provider} answered JSON without the protocol's fields ({type(exc).__name__}: {exc})"
        ) from exc


async def complete(settings: Settings, system: str, prompt: str, client: httpx.AsyncClient | None = None) -> LLMReply:
    """One completion from the configured provider (no retries here: the caller's policy retries
    :class:`LLMUnavailable`)."""
    url, headers, body = _request(settings, system, prompt)
    _, model = endpoint(settings)
    owned = client is None
    client = client or httpx.AsyncClient(timeout=settings.llm.timeout_s, follow_redirects=False)
    try:
        response = await client.post(url, json=body, headers=headers)
    except httpx.TimeoutException as exc:
        raise LLMUnavailable(
            f"{settings.llm.provider} at {url} did not answer within {settings.llm.timeout_s:g} s"
        ) from exc
    except httpx.HTTPError as exc:
        raise LLMUnavailable(
            f"{settings.llm.provider} at {url} is not reachable ({type(exc).__name__}: {exc})"
        ) from exc
    finally:
        if owned:
            await client.aclose()
    if response.status_code == 429 or response.status_code >= 500:
        raise LLMUnavailable(f"{settings.llm.provider} at {url} answered {response.status_code}: {response.text[:200]}")
    if response.status_code >= 400:
        raise LLMBadReply(
            f"{settings.llm.provider} at {url} refused the request with {response.status_code}: {response.text[:300]}"
        )
    try:
        data = response.json()
    except ValueError as exc:
        raise LLMBadReply(
            f"{settings.llm.provider} at {url} answered something that is not JSON: {response.text[:200]!r}"
        ) from exc
    return _parse(settings.llm.provider, model, data)
