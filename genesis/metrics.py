"""Prometheus endpoint for the processes without an HTTP server of their own (engine, worker).

Each process has one uvicorn-free, single-process exporter: prometheus_client's own HTTP server
on a thread, serving the default registry (no multiprocess mode: every Genesis process is one
Python process; the API runs one uvicorn worker and serves GET /metrics itself)."""

from __future__ import annotations

import logging

from prometheus_client import start_http_server
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

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


def temporal_sdk_runtime(host: str, port: int) -> Runtime | None:
    """A Temporal runtime whose SDK metrics (task slots, poll and schedule-to-start latencies,
    workflow/activity execution latencies; ``temporal_*``) the SDK core serves itself on
    http://host:port/metrics. None (the default runtime, no SDK metrics) for port 0 or a port
    that cannot be bound."""
    if not port:
        return None
    try:
        runtime = Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"{host}:{port}")))
    except Exception as exc:  # noqa: BLE001 - the SDK core reports a taken port as a generic error
        log.warning("Temporal SDK metrics not served on %s:%d: %s", host, port, exc)
        return None
    log.info("Temporal SDK metrics on http://%s:%d/metrics", host, port)
    return runtime
