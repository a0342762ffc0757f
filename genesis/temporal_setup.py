"""Register Genesis' custom search attributes on a Temporal server (idempotent).

    python -m genesis.temporal_setup

The dev server gets them on its command line (scripts/services.sh); a Temporal cluster (compose's
``temporal`` service, or any production cluster) needs them registered once per namespace before
the first workflow starts, or every start fails. Compose's ``migrate`` one-shot runs this."""

from __future__ import annotations

import asyncio
import logging
import time

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.client import Client

from genesis.config import get_settings
from genesis.logs import configure_logging
from genesis.temporal import connect
from genesis.workflow_api import SEARCH_ATTRIBUTE_KEYS

SEARCH_ATTRIBUTES = {key.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for key in SEARCH_ATTRIBUTE_KEYS}

log = logging.getLogger("genesis.temporal_setup")


async def ensure_search_attributes(client: Client, namespace: str) -> list[str]:
    """Add the ones the namespace lacks; return their names (empty when all were there)."""
    listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
    missing = {name: kind for name, kind in SEARCH_ATTRIBUTES.items() if name not in listed.custom_attributes}
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
    return sorted(missing)


async def _connect_and_ensure(settings, wait_s: float = 120.0) -> list[str]:
    """A freshly started cluster may refuse connections for a while: retry until ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await ensure_search_attributes(await connect(settings), settings.temporal.namespace)
        except Exception as exc:
            if time.monotonic() > deadline:
                raise
            log.info("Temporal at %s not ready (%s); retrying", settings.temporal.address, exc)
            await asyncio.sleep(2)


def main() -> None:
    settings = get_settings()
    configure_logging("temporal-setup", settings)
    added = asyncio.run(_connect_and_ensure(settings))
    log.info(
        "search attributes on namespace %s: added %s, all of %s present",
        settings.temporal.namespace,
        added or "none",
        sorted(SEARCH_ATTRIBUTES),
    )


if __name__ == "__main__":
    main()
