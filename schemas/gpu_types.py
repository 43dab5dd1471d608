"""GPU types and their prices (the serverless seed's GpuTypeDetail and GpuLowestPrice), read from
a data file an operator edits: schemas/data/gpu_types.yaml, or the file GPULEDGER_GPU_TYPES names.

The selection helpers below are pure (no I/O): what fits a budget per hour, and which groups (and
how many GPUs of each) hold a model of a given size. See docs/endpoints.md.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, NamedTuple

import msgspec

from schemas.catalogue import MODELS

DEFAULT_PATH = Path(__file__).parent / "data" / "gpu_types.yaml"
ENV = "GPULEDGER_GPU_TYPES"
Price = Annotated[float, msgspec.Meta(ge=0, le=10_000)]
PRICE_KINDS = ("on-demand", "spot", "secure", "community")
TENSOR_PARALLEL = (1, 2, 4, 8)  # vLLM's tensor-parallel sizes divide the heads: powers of two
USABLE = 0.9  # vLLM's default gpu_memory_utilization: the rest is CUDA context and fragmentation
OVERHEAD = 1.2  # weights x 1.2: KV cache and activations of a modest batch (a rule of thumb)
BYTES_PER_PARAM = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


class GpuLowestPrice(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    minimumBidPrice: Price | None = None  # spot
    uninterruptablePrice: Price | None = None  # on-demand


class GpuTypeDetail(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    model: str  # our short model name: links the type to its group and the fleet's devices
    id: str
    displayName: str
    memoryInGb: Annotated[int, msgspec.Meta(ge=1, le=4096)]
    manufacturer: str = "Nvidia"
    cudaCores: Annotated[int, msgspec.Meta(ge=0)] | None = None
    maxGpuCount: Annotated[int, msgspec.Meta(ge=1, le=64)] = 8
    communityCloud: bool = False
    communityPrice: Price | None = None
    secureCloud: bool = False
    securePrice: Price | None = None
    lowestPrice: GpuLowestPrice = GpuLowestPrice()

    @property
    def group(self) -> str | None:
        return MODELS[self.model].group

    def price(self, kind: str) -> float | None:
        """Per GPU-hour: on-demand, spot, secure or community; None where not offered."""
        return {"on-demand": self.lowestPrice.uninterruptablePrice, "spot": self.lowestPrice.minimumBidPrice,
                "secure": self.securePrice if self.secureCloud else None,
                "community": self.communityPrice if self.communityCloud else None}[kind]


class GpuTypes(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    gpu_types: list[GpuTypeDetail]
    prices_are: str = ""  # "illustrative" in the shipped file
    currency: str = "USD per GPU-hour"


class GpuTypesError(ValueError):
    pass


def gpu_types_path() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT_PATH)


def load_gpu_types(path: Path | None = None) -> GpuTypes:
    """The data file, checked: a clear error names the file, the entry and the field."""
    import yaml

    path = path or gpu_types_path()
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as err:
        raise GpuTypesError(f"{path}: cannot read ({err.strerror}); set {ENV} to a GPU types file") from err
    except yaml.YAMLError as err:
        raise GpuTypesError(f"{path}: not YAML: {err}") from err
    try:
        types = msgspec.convert(raw, GpuTypes)
    except msgspec.ValidationError as err:
        raise GpuTypesError(f"{path}: {err}") from err
    seen: set[str] = set()
    for i, t in enumerate(types.gpu_types):
        if t.model not in MODELS:
            raise GpuTypesError(f"{path}: gpu_types[{i}].model: {t.model!r} is not a model of the catalogue; "
                                f"known: {', '.join(MODELS)}")
        if t.id in seen:
            raise GpuTypesError(f"{path}: gpu_types[{i}].id: {t.id!r} is listed twice")
        seen.add(t.id)
    return types


# --- choosing (pure) -------------------------------------------------------------------------------


class Option(NamedTuple):
    type: GpuTypeDetail
    gpus: int
    per_hour: float  # for all `gpus` at the price kind asked


def within_budget(types: list[GpuTypeDetail], budget: float, gpus: int = 1,
                  kind: str = "on-demand") -> list[Option]:
    """Types of which `gpus` GPUs (on one node) cost at most `budget` per hour, cheapest first."""
    options = [Option(t, gpus, round(t.price(kind) * gpus, 4)) for t in types
               if t.price(kind) is not None and gpus <= t.maxGpuCount]
    return sorted((o for o in options if o.per_hour <= budget + 1e-9),
                  key=lambda o: (o.per_hour, -o.type.memoryInGb, o.type.model))


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|gib|gb|g)?\s*$", re.IGNORECASE)


def model_memory_gib(size: str, dtype: str = "fp16") -> float:
    """GiB a model needs to serve: '70B' is 70 billion parameters (weights at `dtype` x 1.2 for KV
    cache and activations); '40GiB', '40GB' or '40' is the need itself. ValueError otherwise."""
    match = _SIZE.match(size)
    if not match:
        raise ValueError(f"model size {size!r}: give parameters like 70B or 7.5b, or memory like 40GiB")
    number, unit = float(match.group(1)), (match.group(2) or "gib").lower()
    if number <= 0:
        raise ValueError(f"model size {size!r}: must be more than 0")
    if unit != "b":
        return number
    if dtype not in BYTES_PER_PARAM:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(BYTES_PER_PARAM)}")
    return round(number * 1e9 * BYTES_PER_PARAM[dtype] * OVERHEAD / 2**30, 1)


def for_model(types: list[GpuTypeDetail], need_gib: float, kind: str = "on-demand") -> list[Option]:
    """Per type, the fewest GPUs (a tensor-parallel size that fits on one node) whose usable memory
    holds `need_gib`; cheapest first (types without a price last). None fit: an empty list."""
    options = []
    for t in types:
        gpus = next((n for n in TENSOR_PARALLEL if n <= t.maxGpuCount
                     and n * t.memoryInGb * USABLE >= need_gib), None)
        if gpus is not None:
            price = t.price(kind)
            options.append(Option(t, gpus, round(price * gpus, 4) if price is not None else math.inf))
    return sorted(options, key=lambda o: (o.per_hour, o.gpus, o.type.model))


def groups_of(options: list[Option]) -> list[str]:
    """The GPU groups of some options, in their order, once each (types outside a group left out)."""
    return list(dict.fromkeys(o.type.group for o in options if o.type.group))
