"""Which node inventories the fold believes: a node agent writes its own `NodeRegistered`
straight into the log, so the fold, not the intake, is where its numbers are checked.

The bounds of `schemas.types` do not reach it: stored events that break a constraint are read
without it (`schemas.lenient`, so a bound added later never changes a replay), and an agent's
inventory was never held to any. A lying agent can only lie about its own node (NATS keeps it
on its own subjects, `schemas.authority` keeps the event's node to the subject's), but numbers
no machine has (`cpu_milli` 10^30, a card of 10^30 MiB) became every namespace's quota use and
every read model's figures, and a device UUID another node registered took that node's unit out
of `state.units`: its holders were never freed again and nothing could be placed on it.

The rule, the same in every fold (a service, a replay, a snapshot's tail; the handler applies it,
so no path can differ): an inventory outside the bounds below is dropped whole, as if it had not
been stored; the node keeps the inventory it had (or stays unknown), and the fold counts it
(`State.refused_inventories`) and says why. The bounds are far beyond any machine (a million
cores, an exbibyte of memory, 1,024 devices of at most 4 TiB each), so a log of real nodes folds
as it did; a log holding an impossible inventory from before this rule folds without it now,
which is the point.
"""

from __future__ import annotations

from schemas.events import NodeRegistered
from schemas.types import (MAX_CPU_MILLI, MAX_DEVICES_PER_NODE, MAX_GPU_MEMORY_GIB, MAX_KEY, MAX_MEMORY_MIB,
                           MAX_VALUE)

MAX_DEVICE_MEMORY_MIB = MAX_GPU_MEMORY_GIB * 1024  # the largest card a claim may ask for
MAX_BANDWIDTH_GBPS = 1_000_000.0  # NVLink 5 is 1,800 GB/s
MAX_INDEX = MAX_DEVICES_PER_NODE  # NVML indices, MIG instance indices, NVLink islands
MAX_LABELS = 1024  # a Kubernetes node carries tens
MAX_TEXT = 256  # a UUID, model, product, MIG profile, island or PCI name; a driver or CUDA version
_DEVICE_TEXTS = ("uuid", "model", "product", "mig_profile", "health", "island_name", "pci_bus_id",
                 "pci_vendor", "pci_device")


def _outside(name: str, value, low, high) -> str:
    if low <= value <= high:
        return ""
    return f"{name} {value!r} is outside {low}..{high}"


def _long(name: str, text: str) -> str:
    return f"{name} is {len(text)} characters, more than {MAX_TEXT}" if len(text) > MAX_TEXT else ""


def labels_problem(labels: dict[str, str]) -> str:
    """What is wrong with a node's labels ("" when nothing): the node agent checks its own."""
    if len(labels) > MAX_LABELS:
        return f"labels: {len(labels)} entries, more than {MAX_LABELS}"
    for key, value in labels.items():
        if len(key) > MAX_KEY or len(value) > MAX_VALUE:
            return f"labels[{key[:40]!r}]: a key over {MAX_KEY} or a value over {MAX_VALUE} characters"
    return ""


def refusal(units: dict, event: NodeRegistered) -> str:
    """Why the fold must not believe `event` ("" when it may), naming the field and the problem.
    `units`: the fold's registered units by UUID (each with its `.node`)."""
    problem = (_outside("cpu_milli", event.cpu_milli, 0, MAX_CPU_MILLI)
               or _outside("memory_mib", event.memory_mib, 0, MAX_MEMORY_MIB))
    if problem:
        return problem
    if len(event.devices) > MAX_DEVICES_PER_NODE:
        return f"devices: {len(event.devices)} is more than {MAX_DEVICES_PER_NODE}"
    problem = labels_problem(event.labels) or _long("driver_version", event.driver_version) \
        or _long("cuda_version", event.cuda_version)
    if problem:
        return problem
    seen: set[str] = set()
    for i, device in enumerate(event.devices):
        problem = (_outside("memory_mib", device.memory_mib, 0, MAX_DEVICE_MEMORY_MIB)
                   or _outside("index", device.index, 0, MAX_INDEX)
                   or _outside("mig_index", device.mig_index, -1, MAX_INDEX)
                   or _outside("island", device.island, 0, MAX_INDEX)
                   or _outside("bandwidth_gbps", device.bandwidth_gbps, 0.0, MAX_BANDWIDTH_GBPS))
        for name in _DEVICE_TEXTS:
            problem = problem or _long(name, getattr(device, name))
        if problem:
            return f"devices[{i}].{problem}"
        if device.mig_enabled:  # a card in MIG mode is no unit: only its instances are
            continue
        if device.uuid in seen:
            return f"devices[{i}].uuid {device.uuid!r} appears twice"
        seen.add(device.uuid)
        held = units.get(device.uuid)
        if held is not None and held.node != event.node:
            return (f"devices[{i}].uuid {device.uuid!r} is registered by node {held.node!r} "
                    f"(it must re-register without it first)")
    return ""
