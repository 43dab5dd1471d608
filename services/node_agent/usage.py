"""Observed usage: processes, memory and utilization per allocatable device, and when it is worth
an event. Usage changes all the time; the log only hears about it when the set of processes
changes, memory moves by a GiB or utilization by a tenth, or when the slow interval has passed."""

from __future__ import annotations

from typing import Any

from schemas.types import DeviceUsage
from services.node_agent.discovery import Inventory
from services.node_agent.nvmlcalls import MIB, Notes, optional


def observe_usage(nvml: Any, inventory: Inventory, notes: Notes) -> list[DeviceUsage]:
    """One DeviceUsage per allocatable device (cards not in MIG mode, and MIG instances)."""
    usages = []
    for found in inventory.devices:
        if found.handle is None or found.info.mig_enabled:
            continue
        try:
            usages.append(_device_usage(nvml, found.handle, found.info.uuid, _where(found.info), notes))
        except nvml.NVMLError:
            continue  # a device NVML cannot query is the health watch's business
    return usages


def _where(info) -> str:
    return f"GPU {info.index}" + (f" MIG {info.mig_index}" if info.mig_index >= 0 else "")


def _device_usage(nvml: Any, handle: Any, uuid: str, where: str, notes: Notes) -> DeviceUsage:
    processes = optional(nvml, notes, where, "nvmlDeviceGetComputeRunningProcesses", handle,
                         default=[]) or []
    rates = optional(nvml, notes, where, "nvmlDeviceGetUtilizationRates", handle, default=None)
    memory = optional(nvml, notes, where, "nvmlDeviceGetMemoryInfo", handle, default=None)
    by_process = sum(int(p.usedGpuMemory or 0) for p in processes) // MIB
    used = int(memory.used // MIB) if memory is not None else by_process
    return DeviceUsage(uuid=uuid, memory_used_mib=used,
                       utilization_percent=int(rates.gpu) if rates is not None else 0,
                       pids=sorted(int(p.pid) for p in processes))


def usage_signature(usages: list[DeviceUsage]) -> tuple:
    """What counts as a change: the processes, memory in GiB steps, utilization in 10 % steps."""
    return tuple((u.uuid, tuple(u.pids), u.memory_used_mib // 1024, u.utilization_percent // 10)
                 for u in usages)
