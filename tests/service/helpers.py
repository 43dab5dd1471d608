"""In-process services on a real nats-server, for service tests."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import msgspec
import nats

from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceInfo
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
async def running(url: str, *names: str, **settings_overrides):
    """Start services in this process (each with its own connection); stop them after."""
    from gpuledger_cli.services_cmd import builder_for

    settings = test_settings(url, **settings_overrides)
    contexts = []
    try:
        for name in names:
            contexts.append(await start_service(name, settings, builder_for(name)))
        yield contexts
    finally:
        for ctx in reversed(contexts):
            await stop_service(ctx)


async def request(nc, subject: str, payload, timeout: float = 10.0) -> dict:
    msg = await nc.request(subject, msgspec.json.encode(payload), timeout=timeout)
    return msgspec.json.decode(msg.data)


async def register_nodes(log, *nodes: ev.NodeRegistered) -> None:
    import time

    for node in nodes:
        node = msgspec.structs.replace(node, at=time.time())
        await log.append(subjects.node(node.node), node)


__all__ = ["asyncio", "nats", "running", "request", "register_nodes", "h100_node"]
