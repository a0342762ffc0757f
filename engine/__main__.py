"""``python -m engine``: the world engine process (see engine/loop.py)."""

from __future__ import annotations

import asyncio
import logging
import signal

from genesis.config import get_settings

from .loop import Engine


async def main() -> None:
    settings = get_settings()
    engine = Engine(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await engine.run(stop)
    finally:
        await engine.close()
        logging.info(
            "engine stopped at tick %d: mean tick %.3f ms, %d overruns, %d snapshots",
            engine.world.tick, engine.mean_tick_ms(), engine.tick_overruns, engine.snapshots_taken,
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s engine %(levelname)s %(message)s")
    asyncio.run(main())
