"""``python -m api``: serve the API with uvicorn (one worker), the way `make run`, the tests and
docker compose start it.

X-Forwarded-For / X-Forwarded-Proto are honoured only from the proxies in
GENESIS_TRUSTED_PROXIES (none by default). uvicorn on its own trusts them from 127.0.0.1, so any
local client could pick its own address, and with it its per-IP rate-limit key."""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn

from genesis.config import Settings, get_settings


def proxy_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's proxy-header options for these settings: off without trusted proxies."""
    trusted = ",".join(p.strip() for p in settings.trusted_proxies.split(",") if p.strip())
    if not trusted:
        return {"proxy_headers": False, "forwarded_allow_ips": ""}
    return {"proxy_headers": True, "forwarded_allow_ips": trusted}


def main(argv: list[str] | None = None) -> None:
    settings = get_settings()
    parser = argparse.ArgumentParser(prog="python -m api", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=settings.api.host, help="bind address (default: GENESIS_API_HOST)")
    parser.add_argument("--port", type=int, default=settings.api.port, help="port (default: GENESIS_API_PORT)")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="uvicorn's own log level (Genesis' loggers follow GENESIS_LOG_LEVEL)",
    )
    args = parser.parse_args(argv)
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        **proxy_options(settings),
    )


if __name__ == "__main__":
    main()
