"""The GPU catalogue: what each GPU model is, which group it belongs to, what it can run.

Groups follow the serverless provisioning seed (RunPod-style `GpuGroup`): a claim may name an
ordered list of groups and gets the first one that has room. `ANY` expands to every group in
the seed's order (AMPERE_48 first, as the seed's `GpuGroup.all()` does).
"""

from __future__ import annotations

import msgspec

ANY_GROUP = "any"

GPU_GROUPS: tuple[str, ...] = (
    "ADA_24",
    "ADA_32_PRO",
    "ADA_48_PRO",
    "ADA_80_PRO",
    "AMPERE_16",
    "AMPERE_24",
    "AMPERE_48",
    "AMPERE_80",
    "HOPPER_141",
)

CUDA_VERSIONS: tuple[str, ...] = (
    "11.8", "12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.7", "12.8",
)

# CUDA per architecture: (oldest CUDA that runs on it, recommended from), the seed's compatibility
# matrix. The architecture of a group is that of the GPUs in it, not the group's name: the seed
# puts the H100 in ADA_80_PRO, but an H100 is Hopper (sm_90), so ADA_80_PRO needs CUDA 12.0+ like
# HOPPER_141 (CUDA 11.8 knows sm_90 only as a preview: no FP8, no Hopper builds of the frameworks;
# the seed's matrix says Hopper 12.0+). Likewise the RTX 5090 in ADA_32_PRO is Blackwell (sm_120),
# which only CUDA 12.8 targets. Architectures not listed (Volta, Pascal, Turing) run every version
# in CUDA_VERSIONS. See docs/endpoints.md.
ARCH_CUDA: dict[str, tuple[str, str]] = {
    "Ampere": ("11.8", "12.0"),
    "Ada Lovelace": ("11.8", "12.1"),
    "Hopper": ("12.0", "12.4"),
    "Blackwell": ("12.8", "12.8"),
}
ARCH_MIN_CUDA: dict[str, str] = {arch: pair[0] for arch, pair in ARCH_CUDA.items()}


class GpuModel(msgspec.Struct, frozen=True):
    name: str  # short model name used in claims and events, e.g. "H100"
    group: str | None  # GpuGroup, None for models outside the seed's groups
    arch: str
    # the card's size as it is sold and named ("H100 80GB"): what a claim's GiB are measured
    # against (core/demand.py: N GiB of it is the share N / memory_gib of a card)
    memory_gib: int
    tflops: float  # dense BF16/FP16 tensor TFLOPS: what quota counts
    products: tuple[str, ...] = ()  # NVML product names that map to this model
    mig_profiles: tuple[str, ...] = ()
    # what NVML (nvidia-smi's memory.total) reports for one card, in MiB: a little less than the
    # name says on most cards (an H100 80GB: 81,559 MiB, 79.65 GiB). Node agents register this
    # figure, and a grant's memory_mib is its share of it; a claim for the whole named size still
    # takes the card (see memory_gib). 0: not known (the simulator uses memory_gib x 1024).
    nvml_mib: int = 0

    @property
    def reported_mib(self) -> int:
        """What a card of this model reports, as far as the catalogue knows."""
        return self.nvml_mib or self.memory_gib * 1024


CATALOGUE: tuple[GpuModel, ...] = (
    # nvml_mib: nvidia-smi --query-gpu=memory.total on current drivers (ECC as shipped: on for the
    # data-centre cards), as nvidia-smi prints them; see docs/node-agent.md "GPU memory: the name
    # and NVML" and tests/sched_limits/test_catalogue_memory.py.
    GpuModel("H200", "HOPPER_141", "Hopper", 141, 989.0, ("NVIDIA H200", "NVIDIA H200 NVL"),
             ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"), nvml_mib=143771),
    GpuModel("H100", "ADA_80_PRO", "Hopper", 80, 989.0,
             ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
             ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"), nvml_mib=81559),
    # the H100 NVL has 94 GB (95,830 MiB), not 80: it was an "H100" before session 34, so a claim for
    # 90 GiB could never take one; an H100 variant, in the seed's ADA_80_PRO like the others
    GpuModel("H100NVL", "ADA_80_PRO", "Hopper", 94, 835.0, ("NVIDIA H100 NVL",),
             ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"), nvml_mib=95830),
    GpuModel("A100", "AMPERE_80", "Ampere", 80, 312.0,
             ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
             ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"), nvml_mib=81920),
    # the A100 40GB: its product names contain "A100", so before session 34 it registered as the
    # 80 GB model and a claim for 60 GiB of an A100 could land on 40 GiB. Not in AMPERE_80 (the
    # seed's "A100 80GB variants"); no seed group has it.
    GpuModel("A100M40", None, "Ampere", 40, 312.0, ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
             ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"), nvml_mib=40960),
    GpuModel("A40", "AMPERE_48", "Ampere", 48, 150.0, ("NVIDIA A40",), nvml_mib=46068),
    GpuModel("RTXA6000", "AMPERE_48", "Ampere", 48, 155.0, ("NVIDIA RTX A6000",), nvml_mib=49140),
    GpuModel("L40S", "ADA_48_PRO", "Ada Lovelace", 48, 362.0, ("NVIDIA L40S",), nvml_mib=46068),
    GpuModel("L40", "ADA_48_PRO", "Ada Lovelace", 48, 181.0, ("NVIDIA L40",), nvml_mib=46068),
    GpuModel("RTX6000ADA", "ADA_48_PRO", "Ada Lovelace", 48, 364.0, ("NVIDIA RTX 6000 Ada Generation",),
             nvml_mib=49140),
    GpuModel("RTX5090", "ADA_32_PRO", "Blackwell", 32, 209.0, ("NVIDIA GeForce RTX 5090",), nvml_mib=32607),
    GpuModel("RTX4090", "ADA_24", "Ada Lovelace", 24, 165.0, ("NVIDIA GeForce RTX 4090",), nvml_mib=24564),
    GpuModel("RTXA5000", "AMPERE_24", "Ampere", 24, 111.0, ("NVIDIA RTX A5000",), nvml_mib=24564),
    GpuModel("L4", "AMPERE_24", "Ada Lovelace", 24, 121.0, ("NVIDIA L4",), nvml_mib=23034),
    GpuModel("RTX3090", "AMPERE_24", "Ampere", 24, 71.0, ("NVIDIA GeForce RTX 3090",), nvml_mib=24576),
    GpuModel("RTXA4000", "AMPERE_16", "Ampere", 16, 77.0, ("NVIDIA RTX A4000",), nvml_mib=16376),
    # Models of the openb trace (Alibaba): kept so the simulator and live system share names.
    GpuModel("V100M32", None, "Volta", 32, 125.0, ("Tesla V100-SXM2-32GB",), nvml_mib=32768),
    GpuModel("V100M16", None, "Volta", 16, 125.0, ("Tesla V100-SXM2-16GB",), nvml_mib=16384),
    GpuModel("P100", None, "Pascal", 16, 19.0, ("Tesla P100-PCIE-16GB",), nvml_mib=16384),
    GpuModel("T4", None, "Turing", 16, 65.0, ("Tesla T4",), nvml_mib=15360),
    GpuModel("A10", None, "Ampere", 24, 125.0, ("NVIDIA A10",), nvml_mib=23028),  # in openb's fleet; no seed group
    GpuModel("G1", None, "undisclosed", 32, 100.0),
    GpuModel("G2", None, "undisclosed", 32, 100.0),
    GpuModel("G3", None, "undisclosed", 32, 100.0),
    # The rest of the seed's AMPERE_16 ("RTX A4000, A4500, RTX 4000 Ada"), added in session 35: an
    # agent on such a card registered nothing the group could place (the product was not in the
    # catalogue). Both have 20 GB; the seed files them under 16 GB all the same. Appended rather
    # than grouped above so that no other model's position moves. TFLOPS: NVIDIA's datasheets
    # (dense FP16 tensor, as the A4000's 77). nvml_mib 0: not measured here.
    GpuModel("RTXA4500", "AMPERE_16", "Ampere", 20, 94.6, ("NVIDIA RTX A4500",)),
    GpuModel("RTX4000ADA", "AMPERE_16", "Ada Lovelace", 20, 81.9,
             ("NVIDIA RTX 4000 Ada Generation", "NVIDIA RTX 4000 SFF Ada Generation")),
)

MODELS: dict[str, GpuModel] = {m.name: m for m in CATALOGUE}
MODEL_NAMES: tuple[str, ...] = tuple(MODELS)
# Every MIG profile some model offers, in catalogue order: what a claim's mig_profile may name.
MIG_PROFILES: tuple[str, ...] = tuple(dict.fromkeys(p for m in CATALOGUE for p in m.mig_profiles))
# What a claim's gpu_groups may hold: the groups, or `any` alone (either spelling, as the seed
# writes it `ANY`).
GROUP_CHOICES: tuple[str, ...] = (*GPU_GROUPS, ANY_GROUP, ANY_GROUP.upper())
_BY_PRODUCT: dict[str, GpuModel] = {p.lower(): m for m in CATALOGUE for p in m.products}


def model_for_product(product: str) -> GpuModel | None:
    """Map an NVML product name to a catalogue model (exact, then by the short name inside it).

    By the short name only where the name states no other size: an "NVIDIA A100 40GB PCIe" is
    not the catalogue's 80 GB A100 (a claim for 60 GiB of an A100 would land on 40), so it maps
    to nothing, and its agent says the product is not in the catalogue."""
    exact = _BY_PRODUCT.get(product.lower())
    if exact is not None:
        return exact
    words = product.upper().replace("-", " ").split()
    sizes = {int(w[:-2]) for w in words if w.endswith("GB") and w[:-2].isdigit()}
    for model in CATALOGUE:
        if model.name in words:
            return model if not sizes or model.memory_gib in sizes else None
    return None


def models_in_group(group: str) -> tuple[str, ...]:
    """Model names of one GpuGroup, in catalogue order."""
    return tuple(m.name for m in CATALOGUE if m.group == group)


def expand_groups(groups: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Expand `any` to every group in the seed's order (AMPERE_48 first, no duplicates)."""
    if list(groups) == [ANY_GROUP]:
        ordered = ("AMPERE_48",) + tuple(g for g in GPU_GROUPS if g != "AMPERE_48")
        return ordered
    return tuple(dict.fromkeys(groups))


def cuda_key(version: str) -> tuple[int, int]:
    """'12.4' -> (12, 4) for ordering; raises ValueError on anything else."""
    major, minor = version.split(".")
    return int(major), int(minor)


def cuda_compatible(node_cuda: str, arch: str, allowed: tuple[str, ...]) -> bool:
    """A node runs a claim if its driver's CUDA is at least one allowed version the GPU supports.

    Drivers are backward compatible (a 12.8 driver runs 12.4 binaries); an architecture runs
    only versions at or above its minimum (Hopper needs 12.0).
    """
    if not allowed:
        return True
    if not node_cuda:
        return False
    node = cuda_key(node_cuda)
    arch_min = cuda_key(ARCH_MIN_CUDA.get(arch, "0.0"))
    return any(arch_min <= cuda_key(v) <= node for v in allowed)


def cuda_allowed_on(arch: str) -> tuple[str, ...]:
    """The CUDA versions (of CUDA_VERSIONS) that an architecture runs."""
    minimum = cuda_key(ARCH_MIN_CUDA.get(arch, "0.0"))
    return tuple(v for v in CUDA_VERSIONS if cuda_key(v) >= minimum)


def cuda_recommended_on(arch: str) -> str:
    """The oldest CUDA the seed recommends on an architecture ("" when it recommends none)."""
    return ARCH_CUDA.get(arch, ("", ""))[1]


def arches_of(group_or_model: str) -> tuple[str, ...]:
    """Architectures of a model, or of every model in a group (catalogue order, no repeats)."""
    if group_or_model in MODELS:
        return (MODELS[group_or_model].arch,)
    return tuple(dict.fromkeys(m.arch for m in CATALOGUE if m.group == group_or_model))


def cuda_allowed_for(group_or_model: str) -> tuple[str, ...]:
    """CUDA versions some GPU of this group (or this model) runs."""
    allowed = {v for arch in arches_of(group_or_model) for v in cuda_allowed_on(arch)}
    return tuple(v for v in CUDA_VERSIONS if v in allowed)


def cuda_conflict(group_or_model: str, versions: list[str] | tuple[str, ...]) -> str | None:
    """Why a group (or model) can never run any of `versions`, in words; None when it can (or
    when no version is asked: any driver will do)."""
    if not versions:
        return None
    allowed = cuda_allowed_for(group_or_model)
    if any(v in allowed for v in versions):
        return None
    arches = arches_of(group_or_model)
    recommended = "/".join(dict.fromkeys(r for r in map(cuda_recommended_on, arches) if r))
    return (f"{group_or_model} is {' and '.join(arches)}, which runs CUDA {', '.join(allowed)}"
            f"{f' (recommended {recommended}+)' if recommended else ''}; "
            f"cuda_versions allow only {', '.join(versions)}")
