"""Temporal client construction shared by the API, the worker and the tools."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime

from genesis.config import Settings


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """``runtime``: a Temporal runtime of one's own (e.g. with SDK metrics); None: the default."""
    return await Client.connect(
        settings.temporal.address,
        namespace=settings.temporal.namespace,
        data_converter=pydantic_data_converter,
        runtime=runtime,
    )
