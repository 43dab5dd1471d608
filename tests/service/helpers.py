"""In-process services on a real nats-server, for service tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import replace

import msgspec
import nats

from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceInfo
from shared.nats_auth import user_inbox
from shared.natscluster import INBOX_PREFIX_ENV
from shared.service import start_service, stop_service
from shared.settings import Settings


def h100_node(name: str, gpus: int = 8, islands: int = 2) -> ev.NodeRegistered:
    per_island = max(gpus // islands, 1)
    devices = [DeviceInfo(uuid=f"GPU-{name}-{i}", index=i, model="H100", memory_mib=81559,
                          product="NVIDIA H100 80GB HBM3", island=i // per_island) for i in range(gpus)]
    return ev.NodeRegistered(node=name, devices=devices, cpu_milli=128000, memory_mib=1 << 20,
                             cuda_version="12.8", driver_version="570.86", at=0.0)


def test_settings(url: str, **overrides) -> Settings:
    base = Settings(nats_url=url, tick_s=0.2, node_timeout_s=3600.0)
    return replace(base, **overrides)


@contextlib.asynccontextmanager
async def running(url: str | Callable[[str], str], *names: str, **settings_overrides):
    """Start services in this process (each with its own connection); stop them after. `url` is
    one URL for all, or a function giving each service's user its URL (an authorized server's
    `AuthServer.url`): then each runs as its own user on its own inbox prefix, as `gpuledger up`
    runs it (a claim service run as ops gives publishers no live outcomes: docs/security.md)."""
    from gpuledger_cli.services_cmd import builder_for

    contexts = []
    try:
        for name in names:
            settings = test_settings(url if isinstance(url, str) else url(name), **settings_overrides)
            with _inbox_prefix(None if isinstance(url, str) else user_inbox(name)):
                contexts.append(await start_service(name, settings, builder_for(name)))
        yield contexts
    finally:
        for ctx in reversed(contexts):
            await stop_service(ctx)


@contextlib.contextmanager
def _inbox_prefix(prefix: str | None):
    """INBOX_PREFIX_ENV set to `prefix` while a service connects (a service's user may read only
    its own: `shared.service.serve` sets it by name), then as it was; unchanged for None."""
    if prefix is None:
        yield
        return
    before = os.environ.get(INBOX_PREFIX_ENV)
    os.environ[INBOX_PREFIX_ENV] = prefix
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(INBOX_PREFIX_ENV, None)
        else:
            os.environ[INBOX_PREFIX_ENV] = before


async def request(nc, subject: str, payload, timeout: float = 10.0) -> dict:
    msg = await nc.request(subject, msgspec.json.encode(payload), timeout=timeout)
    return msgspec.json.decode(msg.data)


async def register_nodes(log, *nodes: ev.NodeRegistered) -> None:
    import time

    for node in nodes:
        node = msgspec.structs.replace(node, at=time.time())
        await log.append(subjects.node(node.node), node)


__all__ = ["asyncio", "nats", "running", "request", "register_nodes", "h100_node"]
