"""``make run``: start the worker, the world engine, the Watcher and the API in the foreground; Ctrl-C stops them.

Services (Postgres, Redis, Temporal, Docker) are started before this by scripts/services.sh."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time

from genesis.config import PROJECT_ROOT, get_settings

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Children get SIGTERM if this supervisor dies without cleaning up (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _metrics_url(settings, port: int) -> str:
    return f"http://{settings.metrics_host}:{port}/metrics" if port else "off"


def main() -> int:
    settings = get_settings()

    def start(argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(argv, cwd=PROJECT_ROOT, preexec_fn=_die_with_parent)

    children = {
        "worker": start([sys.executable, str(PROJECT_ROOT / "worker.py")]),
        "engine": start([sys.executable, "-m", "engine"]),
        "watcher": start([sys.executable, "-m", "evolution"]),
        "api": start([sys.executable, "-m", "api", "--log-level", "info"]),
    }
    base = f"http://{settings.api.host}:{settings.api.port}"
    print(
        "\n  Genesis is starting\n"
        f"    API           {base}\n"
        f"    World viewer  {base}/\n"
        f"    API docs      {base}/docs\n"
        f"    Health        {base}/api/health\n"
        f"    World stats   {base}/api/stats   (frames: ws://{settings.api.host}:{settings.api.port}/ws/world)\n"
        f"    Temporal UI   {settings.temporal.ui_url}/namespaces/{settings.temporal.namespace}/workflows\n"
        f"    Agents        POST {base}/v1/agents/register, then send X-API-Key (GENESIS_AUTH={settings.auth})\n"
        f"    Evolution     {base}/api/feed (live: ws://{settings.api.host}:{settings.api.port}/ws/feed), "
        f"{base}/api/evolution/cycles   (evolution: {settings.llm.provider})\n"
        f"    Metrics       {base}/metrics, engine {_metrics_url(settings, settings.engine.metrics_port)}, "
        f"worker {_metrics_url(settings, settings.worker.metrics_port)}\n"
        "  Ctrl-C stops the worker, the engine, the Watcher and the API (services keep running).\n",
        flush=True,
    )
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    exit_code = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                print(f"{name} exited with code {child.returncode}; stopping the rest", file=sys.stderr)
                exit_code, stopping = child.returncode or 1, True
        time.sleep(0.2)
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in children.values():
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
    print("Genesis stopped", flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
