"""A fake `pynvml`: the subset of the NVML API that discovery, health and usage call, backed by
a simulated node. Tests and `gpuledger up --demo` hand a `FakeNvml` to the same code that gets
the real `pynvml` module on a GPU machine.

Errors and constants are the real pynvml ones (importing pynvml needs no driver), so code that
catches `nvml.NVMLError_NotSupported` behaves the same against both. Faults are simulated in NVML
terms (an uncorrectable ECC count, a lost GPU, an XID event), so health code has one path.
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

from services.node_agent.fleet import SimNodeSpec, mig_geometry

MIB = 1024 * 1024

# PCI device ids of the products the fleet can simulate (vendor 0x10de).
PCI_DEVICE_IDS = {
    "NVIDIA H100 80GB HBM3": 0x2330, "NVIDIA H100 PCIe": 0x2331, "NVIDIA H100 NVL": 0x2321,
    "NVIDIA H200": 0x2335, "NVIDIA A100-SXM4-80GB": 0x20B2, "NVIDIA A100 80GB PCIe": 0x20B5,
    "NVIDIA A100-SXM4-40GB": 0x20B0, "NVIDIA A100-PCIE-40GB": 0x20F1,
    "NVIDIA A40": 0x2235, "NVIDIA L40S": 0x26B9, "NVIDIA L40": 0x26B5, "NVIDIA L4": 0x27B8,
    "NVIDIA GeForce RTX 4090": 0x2684, "Tesla T4": 0x1EB8, "Tesla V100-SXM2-32GB": 0x1DB5,
}
# Bus numbers of an HGX board: two PCIe switches per CPU socket, like the real layout.
HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
NVSWITCH_BUS = 0xE0
LINKS_PER_GPU = 18


def stable_uuid(*parts: object) -> str:
    """The same simulated node always has the same UUIDs: a restart re-registers, not replaces."""
    digest = hashlib.sha1("/".join(map(str, parts)).encode()).digest()
    return str(uuidlib.UUID(bytes=digest[:16], version=5))


@dataclass
class FakeProcess:
    pid: int
    used_mib: int
    utilization: int = 0


@dataclass
class FakeMig:
    parent: "FakeGpu"
    mig_index: int
    profile: str
    uuid: str
    memory_mib: int
    gpu_instance_id: int
    processes: dict[int, FakeProcess] = field(default_factory=dict)


@dataclass
class FakeLink:
    remote_bus_id: str
    remote_type: int = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
    active: bool = True


@dataclass
class FakeGpu:
    index: int
    name: str
    uuid: str
    memory_mib: int
    bus_id: str
    pci_device: int
    migs: list[FakeMig] = field(default_factory=list)
    links: list[FakeLink] = field(default_factory=list)
    nvlink_version: int = 4
    nvlink_speed_mbps: int = 25_000  # per link and direction, what NVLINK_SPEED_MBPS_COMMON says
    pcie_generation: int = 5
    pcie_width: int = 16
    fault: str = ""  # "" | ecc | lost | row-remap
    pending_xids: list[int] = field(default_factory=list)
    processes: dict[int, FakeProcess] = field(default_factory=dict)

    @property
    def mig_enabled(self) -> bool:
        return bool(self.migs)


class FakeNvml:
    """One simulated node's NVML. `unsupported` names API functions that raise NotSupported."""

    def __init__(self, gpus: list[FakeGpu], driver_version: str = "570.124.06",
                 cuda_version: int = 12080, unsupported: set[str] | None = None,
                 legacy_bytes: bool = False):
        self.gpus = gpus
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        self.unsupported = set(unsupported or ())
        self.legacy_bytes = legacy_bytes  # old pynvml returned names and UUIDs as bytes
        self.initialised = 0
        self.fail_init: Exception | None = None
        self._event_sets: list[set[int]] = []

    @classmethod
    def from_node_spec(cls, spec: SimNodeSpec) -> "FakeNvml":
        gpus = [_fake_gpu(spec, i) for i in range(spec.gpus)]
        _wire_nvlink(gpus, spec.islands)
        major, minor = spec.cuda_version.split(".")
        return cls(gpus, spec.driver_version, int(major) * 1000 + int(minor) * 10)

    # --- helpers the simulation drives (not NVML API) -------------------------------------------

    def gpu(self, index: int) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(f"no GPU with index {index}")

    def inject_xid(self, index: int, xid: int) -> None:
        self.gpu(index).pending_xids.append(xid)

    # --- the pynvml API subset ----------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.fail_init is not None:
            raise self.fail_init
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised = max(0, self.initialised - 1)

    def nvmlSystemGetDriverVersion(self):
        return self._text("nvmlSystemGetDriverVersion", self.driver_version)

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if gpu.fault == "lost":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetName(self, handle):
        if isinstance(handle, FakeMig):
            return self._text("nvmlDeviceGetName", f"{handle.parent.name} MIG {handle.profile}")
        return self._text("nvmlDeviceGetName", self._card(handle).name)

    def nvmlDeviceGetUUID(self, handle):
        if isinstance(handle, FakeMig):
            return self._text("nvmlDeviceGetUUID", handle.uuid)
        return self._text("nvmlDeviceGetUUID", self._card(handle).uuid)

    def nvmlDeviceGetIndex(self, handle) -> int:
        self._check("nvmlDeviceGetIndex")
        return self._card(handle).index

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self._check("nvmlDeviceGetMemoryInfo")
        total = handle.memory_mib if isinstance(handle, FakeMig) else self._card(handle).memory_mib
        used = sum(p.used_mib for p in handle.processes.values())
        return SimpleNamespace(total=total * MIB, used=used * MIB, free=(total - used) * MIB)

    def nvmlDeviceGetPciInfo(self, handle):
        self._check("nvmlDeviceGetPciInfo")
        gpu = self._card(handle)
        return _pci_info(gpu.bus_id, gpu.pci_device)

    def nvmlDeviceGetMigMode(self, handle) -> list[int]:
        self._check("nvmlDeviceGetMigMode")
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if self._card(handle).mig_enabled else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount")
        return 7 if self._card(handle).mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index: int) -> FakeMig:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex")
        migs = self._card(handle).migs
        if index >= len(migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return migs[index]

    def nvmlDeviceGetGpuInstanceId(self, handle) -> int:
        self._check("nvmlDeviceGetGpuInstanceId")
        if not isinstance(handle, FakeMig):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return handle.gpu_instance_id

    def nvmlDeviceGetAttributes(self, handle):
        self._check("nvmlDeviceGetAttributes")
        if not isinstance(handle, FakeMig):
            return SimpleNamespace(gpuInstanceSliceCount=7, memorySizeMB=self._card(handle).memory_mib)
        compute, _, memory = mig_geometry(handle.profile)
        return SimpleNamespace(gpuInstanceSliceCount=compute, memorySizeMB=memory)

    def nvmlDeviceGetNvLinkState(self, handle, link: int) -> int:
        return int(self._link(handle, link, "nvmlDeviceGetNvLinkState").active)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link: int):
        found = self._link(handle, link, "nvmlDeviceGetNvLinkRemotePciInfo")
        return _pci_info(found.remote_bus_id, 0)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link: int) -> int:
        return self._link(handle, link, "nvmlDeviceGetNvLinkRemoteDeviceType").remote_type

    def nvmlDeviceGetNvLinkVersion(self, handle, link: int) -> int:
        self._link(handle, link, "nvmlDeviceGetNvLinkVersion")
        return self._card(handle).nvlink_version

    def nvmlDeviceGetFieldValues(self, handle, field_ids: list[int]) -> list:
        """Only the NVLink speed and link count fields; others answer NOT_SUPPORTED per value."""
        self._check("nvmlDeviceGetFieldValues")
        gpu = self._card(handle)
        known = {pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: gpu.nvlink_speed_mbps if gpu.links else 0,
                 pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: len(gpu.links)}
        if "NVLINK_SPEED" in self.unsupported:
            known.pop(pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON)
        return [SimpleNamespace(fieldId=f, nvmlReturn=0 if f in known else pynvml.NVML_ERROR_NOT_SUPPORTED,
                                value=SimpleNamespace(uiVal=known.get(f, 0))) for f in field_ids]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle) -> int:
        self._check("nvmlDeviceGetCurrPcieLinkGeneration")
        return self._card(handle).pcie_generation

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle) -> int:
        self._check("nvmlDeviceGetCurrPcieLinkWidth")
        return self._card(handle).pcie_width

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type: int, counter_type: int) -> int:
        self._check("nvmlDeviceGetTotalEccErrors")
        gpu = self._card(handle)
        uncorrected = error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        return 2 if uncorrected and gpu.fault == "ecc" else 0

    def nvmlDeviceGetRemappedRows(self, handle) -> tuple[int, int, int, int]:
        self._check("nvmlDeviceGetRemappedRows")
        pending = int(self._card(handle).fault == "row-remap")
        return (0, pending, pending, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle) -> int:
        self._check("nvmlDeviceGetRetiredPagesPendingStatus", default_unsupported=True)
        return 0

    def kill_process(self, pid: int) -> bool:
        """What the node agent's reaper calls instead of os.kill on a simulated node."""
        for gpu in self.gpus:
            for holder in (gpu, *gpu.migs):
                if holder.processes.pop(pid, None) is not None:
                    return True
        return False

    def nvmlDeviceGetComputeRunningProcesses(self, handle) -> list:
        self._check("nvmlDeviceGetComputeRunningProcesses")
        if not isinstance(handle, FakeMig):
            self._card(handle)
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_mib * MIB)
                for p in handle.processes.values()]

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._check("nvmlDeviceGetUtilizationRates")
        if isinstance(handle, FakeMig) or self._card(handle).mig_enabled:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # as on real MIG cards
        busy = max((p.utilization for p in handle.processes.values()), default=0)
        return SimpleNamespace(gpu=busy, memory=0)

    def nvmlEventSetCreate(self) -> int:
        self._check("nvmlEventSetCreate")
        self._event_sets.append(set())
        return len(self._event_sets) - 1

    def nvmlDeviceRegisterEvents(self, handle, event_types: int, event_set: int) -> None:
        self._check("nvmlDeviceRegisterEvents")
        self._event_sets[event_set].add(self._card(handle).index)

    def nvmlEventSetWait_v2(self, event_set: int, timeout_ms: int):
        self._check("nvmlEventSetWait_v2")
        for gpu in self.gpus:
            if gpu.index in self._event_sets[event_set] and gpu.pending_xids:
                return SimpleNamespace(device=gpu, eventType=pynvml.nvmlEventTypeXidCriticalError,
                                       eventData=gpu.pending_xids.pop(0))
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: int) -> None:
        self._event_sets[event_set] = set()

    # --- internals --------------------------------------------------------------------------

    def _check(self, name: str, default_unsupported: bool = False) -> None:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if name in self.unsupported or (default_unsupported and f"+{name}" not in self.unsupported):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _text(self, name: str, value: str):
        self._check(name)
        return value.encode() if self.legacy_bytes else value

    def _card(self, handle) -> FakeGpu:
        gpu = handle.parent if isinstance(handle, FakeMig) else handle
        if gpu.fault == "lost":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def _link(self, handle, link: int, name: str) -> FakeLink:
        self._check(name)
        links = self._card(handle).links
        if not 0 <= link < LINKS_PER_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)  # what a PCIe card answers
        return links[link]


# Every name the real module exports as a constant or error class is available on the fake too.
for _name, _value in vars(pynvml).items():
    if _name.startswith("NVMLError") or (_name.startswith(("NVML_", "nvmlEventType"))
                                         and not callable(_value)):
        setattr(FakeNvml, _name, _value)


def _pci_info(bus_id: str, device: int) -> SimpleNamespace:
    domain, bus, rest = bus_id.split(":")
    return SimpleNamespace(busId=bus_id.encode(), busIdLegacy=bus_id[4:].encode(),
                           domain=int(domain, 16), bus=int(bus, 16), device=int(rest.split(".")[0], 16),
                           pciDeviceId=(device << 16) | 0x10DE, pciSubSystemId=0)


def bus_id_for(index: int) -> str:
    bus = HGX_BUSES[index] if index < len(HGX_BUSES) else 0x18 + 0x10 * index
    return f"00000000:{bus:02X}:00.0"


def _fake_gpu(spec: SimNodeSpec, index: int) -> FakeGpu:
    product = spec.model.products[0]
    gpu = FakeGpu(index=index, name=product, uuid="GPU-" + stable_uuid(spec.name, index),
                  memory_mib=spec.model.reported_mib,  # what NVML reports (schemas/catalogue.py)
                  bus_id=bus_id_for(index), pci_device=PCI_DEVICE_IDS.get(product, 0),
                  **_links_of(spec.model.arch))
    for mig_index, profile in enumerate(spec.mig_layout(index)):
        gpu.migs.append(FakeMig(gpu, mig_index, profile, "MIG-" + stable_uuid(spec.name, index, mig_index),
                                mig_geometry(profile)[2], gpu_instance_id=mig_index + 1))
    return gpu


def _links_of(arch: str) -> dict[str, int]:
    """NVLink version and PCIe generation of a simulated card, by architecture."""
    nvlink, pcie = {"Blackwell": (5, 6), "Hopper": (4, 5), "Ampere": (3, 4), "Volta": (2, 3)}.get(arch, (3, 4))
    return {"nvlink_version": nvlink, "pcie_generation": pcie,
            "nvlink_speed_mbps": 50_000 if nvlink >= 5 else 25_000}


def _wire_nvlink(gpus: list[FakeGpu], islands: int) -> None:
    """Islands of equal size: within one, every GPU links to every other (like an NVLink bridge
    mesh), so the discovery's union of links gives exactly those islands."""
    if islands <= 0:
        return
    size = len(gpus) // islands
    for start in range(0, len(gpus), size):
        members = gpus[start:start + size]
        for gpu in members:
            gpu.links = [FakeLink(peer.bus_id) for peer in members if peer is not gpu]
