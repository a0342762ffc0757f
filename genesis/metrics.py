"""Prometheus endpoint for the processes without an HTTP server of their own (engine, worker).

Each process has one uvicorn-free, single-process exporter: prometheus_client's own HTTP server
on a thread, serving the default registry (no multiprocess mode: every Genesis process is one
Python process; the API runs one uvicorn worker and serves GET /metrics itself)."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server

log = logging.getLogger("genesis.metrics")


def serve_metrics(service: str, host: str, port: int) -> bool:
    """Serve http://host:port/metrics; port 0 disables it. A port that cannot be bound is logged
    and skipped (a second engine on one host must not die for its metrics)."""
    if not port:
        log.info("%s metrics endpoint disabled (port 0)", service)
        return False
    try:
        start_http_server(port, addr=host)
    except OSError as exc:
        log.warning("%s metrics endpoint not started: cannot listen on %s:%d (%s)", service, host, port, exc)
        return False
    log.info("%s metrics on http://%s:%d/metrics", service, host, port)
    return True
