"""The CLI's client of the Genesis REST API: one place that turns every failure (refused
connection, timeout, an error answer, a body that is not JSON) into a CliError that says what
went wrong and what to do."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

# Exit codes of every command (documented in docs/cli.md).
EXIT_OK = 0
EXIT_ERROR = 1  # the API refused the request, or could not be reached
EXIT_USAGE = 2  # bad arguments (typer/click's own code)
EXIT_REJECTED = 3  # the mutation was rejected (failure code + validation log)
EXIT_ROLLED_BACK = 4  # the mutation went live and was rolled back
EXIT_FAILED = 5  # the mutation's workflow failed for an infrastructure reason (retry it)
EXIT_TIMEOUT = 6  # no verdict within --timeout
EXIT_NONDETERMINISM = 7  # a replayed history does not match the current workflow code
EXIT_AWAITING_APPROVAL = 8  # the mutation waits for an operator's decision (the manifest's approval rules)


class CliError(Exception):
    def __init__(
        self,
        message: str,
        *,
        code: int = EXIT_ERROR,
        status_code: int | None = None,
        error: str | None = None,
        body: Any = None,
    ):
        super().__init__(message)
        self.message, self.code, self.status_code, self.error, self.body = message, code, status_code, error, body

    def to_json(self) -> dict:
        return {"error": self.error or "CLI_ERROR", "detail": self.message, "status_code": self.status_code}


def segment(value: str, what: str) -> str:
    """``value`` as one URL path segment: refused when empty (``/api/mutations//status`` would
    ask another endpoint, or none), percent-encoded otherwise (a ``/`` cannot reach another path)."""
    if not value or not value.strip():
        raise CliError(f"the {what} is empty: give one (the command's --help shows examples)", code=EXIT_USAGE)
    return quote(value, safe="")


def shown(body: Any, limit: int = 200) -> str:
    """An answer's body, shortened for a one-line message."""
    text = repr(body) if not isinstance(body, str) else body
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ApiClient:
    def __init__(
        self, base_url: str, api_key: str | None = None, timeout: float = 30.0, operator_key: str | None = None
    ):
        self.base_url = base_url.rstrip("/")
        headers = {"X-API-Key": api_key} if api_key else {}
        if operator_key:
            headers["X-Operator-Key"] = operator_key
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)
        self.has_key, self.has_operator_key = bool(api_key), bool(operator_key)

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...] = (200, 201, 202),
        expect: tuple[str, ...] = (),
        **kwargs,
    ) -> Any:
        """The JSON answer of a request the API accepted (a status in ``ok``) that is an object
        with every key of ``expect`` set; anything else is a CliError that says what came back."""
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise CliError(
                f"cannot reach the Genesis API at {self.base_url} ({exc}); is it running? "
                "Start it with `genesis up`, or point --api / GENESIS_API_URL at it"
            ) from exc
        except httpx.TimeoutException as exc:
            raise CliError(
                f"the Genesis API at {self.base_url} did not answer {method} {path} in time ({exc!r})"
            ) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise CliError(f"{method} {self.base_url}{path} failed: {exc}") from exc
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
            if response.status_code not in ok:  # a proxy's or another server's page: say what it was
                body = shown(" ".join(response.text.split()) or f"({len(response.content)} bytes)")
        if response.status_code in ok:
            if body is None and response.content:
                excerpt = shown(" ".join(response.text.split()) or f"({len(response.content)} bytes)")
                raise CliError(
                    f"{method} {path} answered {response.status_code} with a body that is not JSON: {excerpt}"
                )
            if expect:
                self._check_shape(method, path, response.status_code, body, expect)
            return body
        raise self._refusal(method, path, response.status_code, body)

    def _check_shape(self, method: str, path: str, status: int, body: Any, expect: tuple[str, ...]) -> None:
        missing = list(expect) if not isinstance(body, dict) else [k for k in expect if body.get(k) in (None, "")]
        if missing:
            raise CliError(
                f"{method} {path} answered {status} without {', '.join(missing)} ({shown(body)}); "
                f"is {self.base_url} a Genesis API of this CLI's version?",
                status_code=status,
                error="UNEXPECTED_ANSWER",
                body=body,
            )

    def _refusal(self, method: str, path: str, status: int, body: Any) -> CliError:
        error = body.get("error") if isinstance(body, dict) else None
        detail = body.get("detail") if isinstance(body, dict) else None
        if status == 404 and error == "NOT_FOUND":  # the route itself does not exist on this API
            message = (
                f"{method} {path}: the API at {self.base_url} has no such endpoint (404); "
                "it is probably an older Genesis version than this CLI"
            )
        elif error in ("OPERATOR_KEY_REQUIRED", "INVALID_OPERATOR_KEY"):
            hint = (
                ""
                if self.has_operator_key
                else (" (pass --operator-key or set GENESIS_OPERATOR_KEY; `genesis operator create-key` makes one)")
            )
            message = f"{error}: {detail}{hint}"
        elif status == 401:
            hint = (
                ""
                if self.has_key
                else " (no key was sent: pass --api-key or set GENESIS_API_KEY; `genesis agents register` makes one)"
            )
            message = f"{error or 'UNAUTHORIZED'}: {detail or 'an API key is required'}{hint}"
        else:
            message = f"{error or f'HTTP {status}'}: {detail if detail is not None else shown(body)}"
        if isinstance(body, dict) and body.get("retry_after_sec") is not None:
            message += f" (retry after {body['retry_after_sec']} s)"
        return CliError(message, status_code=status, error=error or f"HTTP_{status}", body=body)

    def get(self, path: str, **kwargs) -> Any:
        return self.request("GET", path, **kwargs)

    def get_status(self, path: str, **kwargs) -> tuple[int, Any]:
        """(status, JSON answer) of a GET that may answer 200 or 202 (work still going on)."""
        answer = self.request("GET", path, ok=(200, 202), **kwargs)
        return (202 if isinstance(answer, dict) and answer.get("state") == "running" else 200), answer

    def get_text(self, path: str, **kwargs) -> str:
        """The body of a GET that answers text (NDJSON exports); refusals as for JSON answers."""
        try:
            response = self._http.request("GET", path, **kwargs)
        except httpx.HTTPError as exc:
            raise CliError(f"GET {self.base_url}{path} failed: {exc}") from exc
        if response.status_code != 200:
            try:
                body = response.json()
            except ValueError:
                body = shown(response.text)
            raise self._refusal("GET", path, response.status_code, body)
        return response.text

    def post(self, path: str, **kwargs) -> Any:
        return self.request("POST", path, **kwargs)

    def delete(self, path: str, **kwargs) -> Any:
        return self.request("DELETE", path, ok=(200, 202, 204), **kwargs)
