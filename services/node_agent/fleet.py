"""The simulated fleet: a short spec string -> the nodes and GPUs the fake NVML pretends to have.

Syntax (docs/node-agent.md):  GROUP[,GROUP...]   GROUP = COUNTxMODELxGPUS[:OPTION...]
Options: islands=N | mig | mig=LAYOUT[/LAYOUT...] | zone=NAME[/NAME...] | name=PREFIX
         | cpu=CORES | mem=GIB | cuda=VERSION
Example: "4xH100x8:islands=2,1xA100x4:mig" (the default demo fleet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from schemas.catalogue import MODELS, GpuModel

DEFAULT_FLEET = "4xH100x8:islands=2,1xA100x4:mig"
DEFAULT_ZONES = ("zone-a", "zone-b")

# The driver each simulated CUDA version comes with (the oldest driver that ships it).
DRIVER_FOR_CUDA = {"12.2": "535.183.01", "12.4": "550.127.05", "12.6": "560.35.03",
                   "12.8": "570.124.06"}

# A100/H100-80GB MIG geometry: (compute slices of 7, memory slices of 8, memory MiB as NVML reports).
MIG_GEOMETRY_80GB = {
    "1g.10gb": (1, 1, 9856), "1g.20gb": (1, 2, 19968), "2g.20gb": (2, 2, 19968),
    "3g.40gb": (3, 4, 40192), "4g.40gb": (4, 4, 40192), "7g.80gb": (7, 8, 80384),
}
# The default MIG mix: four different layouts, cycled over the cards of a node.
DEFAULT_MIG_LAYOUTS = ("7x1g.10gb", "3g.40gb+4g.40gb", "3x2g.20gb+1g.10gb", "2x3g.40gb")

_GROUP = re.compile(r"^(\d+)x([A-Za-z0-9]+)x(\d+)$")
_LAYOUT_PART = re.compile(r"^(?:(\d+)x)?(\d+g\.\d+gb)$")


class FleetSpecError(ValueError):
    """A fleet spec that cannot be simulated; the message names the group and the problem."""


@dataclass(frozen=True)
class SimNodeSpec:
    name: str
    model: GpuModel
    gpus: int
    islands: int  # 0: no NVLink (each GPU alone); N: N equal NVLink islands
    mig_layouts: tuple[tuple[str, ...], ...] = ()  # per card (cycled); empty: MIG disabled
    labels: dict[str, str] = field(default_factory=dict)
    cpu_milli: int = 0
    memory_mib: int = 0
    cuda_version: str = "12.8"

    @property
    def driver_version(self) -> str:
        return DRIVER_FOR_CUDA[self.cuda_version]

    def mig_layout(self, index: int) -> tuple[str, ...]:
        return self.mig_layouts[index % len(self.mig_layouts)] if self.mig_layouts else ()


@dataclass
class _Group:
    count: int
    model: GpuModel
    gpus: int
    islands: int = 1
    mig_layouts: tuple[tuple[str, ...], ...] = ()
    zones: tuple[str, ...] = ()
    prefix: str = ""
    cores: int = 0
    mem_gib: int = 0
    cuda: str = "12.8"


def parse_fleet(spec: str) -> list[SimNodeSpec]:
    """Parse and validate a fleet spec; raise FleetSpecError naming the bad group and option."""
    if not spec or not spec.strip():
        raise FleetSpecError("fleet spec is empty; example: " + DEFAULT_FLEET)
    groups = [_parse_group(part.strip()) for part in spec.split(",")]
    return _expand(groups)


def _parse_group(text: str) -> _Group:
    head, *options = text.split(":")
    match = _GROUP.match(head.strip())
    if match is None:
        raise FleetSpecError(f"fleet group {text!r}: expected COUNTxMODELxGPUS, e.g. 4xH100x8")
    count, model_name, gpus = int(match[1]), match[2], int(match[3])
    group = _Group(count, _model(text, model_name), gpus)
    _check_range(text, "node count", count, 1, 1000)
    _check_range(text, "GPUs per node", gpus, 1, 16)
    for option in options:
        _apply_option(group, text, option.strip())
    _check_islands(group, text)
    return group


def _model(text: str, name: str) -> GpuModel:
    by_upper = {m.upper(): model for m, model in MODELS.items()}
    model = by_upper.get(name.upper())
    if model is None:
        raise FleetSpecError(f"fleet group {text!r}: unknown GPU model {name!r}; "
                             f"known: {', '.join(m for m, g in MODELS.items() if g.products)}")
    if not model.products:
        raise FleetSpecError(f"fleet group {text!r}: model {model.name} has no NVML product name "
                             "to simulate")
    return model


def _check_range(text: str, what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise FleetSpecError(f"fleet group {text!r}: {what} must be {low}..{high}, got {value}")


def _apply_option(group: _Group, text: str, option: str) -> None:
    key, _, value = option.partition("=")
    handler = _OPTIONS.get(key.strip().lower())
    if handler is None:
        raise FleetSpecError(f"fleet group {text!r}: unknown option {key!r}; "
                             f"options: {', '.join(sorted(_OPTIONS))}")
    handler(group, text, value.strip(), option)


def _int_option(text: str, key: str, value: str, low: int, high: int) -> int:
    if not value.isdigit():
        raise FleetSpecError(f"fleet group {text!r}: {key} needs a whole number, got {value!r}")
    _check_range(text, key, int(value), low, high)
    return int(value)


def _opt_islands(group: _Group, text: str, value: str, option: str) -> None:
    group.islands = _int_option(text, "islands", value, 0, 16)


def _opt_mig(group: _Group, text: str, value: str, option: str) -> None:
    if not group.model.mig_profiles:
        raise FleetSpecError(f"fleet group {text!r}: {group.model.name} does not support MIG")
    layouts = value.split("/") if "=" in option else list(DEFAULT_MIG_LAYOUTS)
    group.mig_layouts = tuple(_parse_layout(group.model, text, layout) for layout in layouts)


def _opt_zone(group: _Group, text: str, value: str, option: str) -> None:
    zones = tuple(z.strip() for z in value.split("/"))
    if not all(re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", z) for z in zones):
        raise FleetSpecError(f"fleet group {text!r}: zone must be lower-case letters, digits "
                             f"and '-', got {value!r}")
    group.zones = zones


def _opt_name(group: _Group, text: str, value: str, option: str) -> None:
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?", value):
        raise FleetSpecError(f"fleet group {text!r}: name prefix must be lower-case letters, "
                             f"digits and '-', got {value!r}")
    group.prefix = value


def _opt_cpu(group: _Group, text: str, value: str, option: str) -> None:
    group.cores = _int_option(text, "cpu", value, 1, 4096)


def _opt_mem(group: _Group, text: str, value: str, option: str) -> None:
    group.mem_gib = _int_option(text, "mem", value.lower().removesuffix("gi").removesuffix("gb"),
                                1, 65536)


def _opt_cuda(group: _Group, text: str, value: str, option: str) -> None:
    if value not in DRIVER_FOR_CUDA:
        raise FleetSpecError(f"fleet group {text!r}: cuda must be one of "
                             f"{', '.join(DRIVER_FOR_CUDA)}, got {value!r}")
    group.cuda = value


_OPTIONS = {"islands": _opt_islands, "mig": _opt_mig, "zone": _opt_zone, "name": _opt_name,
            "cpu": _opt_cpu, "mem": _opt_mem, "cuda": _opt_cuda}


def _parse_layout(model: GpuModel, text: str, layout: str) -> tuple[str, ...]:
    """'3x2g.20gb+1g.10gb' -> ('2g.20gb', '2g.20gb', '2g.20gb', '1g.10gb'), checked to fit a card."""
    profiles: list[str] = []
    for part in layout.strip().split("+"):
        match = _LAYOUT_PART.match(part.strip())
        if match is None:
            raise FleetSpecError(f"fleet group {text!r}: MIG layout part {part!r} is not "
                                 "[Nx]PROFILE, e.g. 3x2g.20gb")
        if match[2] not in model.mig_profiles:
            raise FleetSpecError(f"fleet group {text!r}: MIG profile {match[2]!r} is not valid on "
                                 f"{model.name}; valid: {', '.join(model.mig_profiles)}")
        profiles += [match[2]] * int(match[1] or 1)
    _check_layout_fits(text, layout, profiles)
    return tuple(profiles)


def _check_layout_fits(text: str, layout: str, profiles: list[str]) -> None:
    compute = sum(mig_geometry(p)[0] for p in profiles)
    memory = sum(mig_geometry(p)[1] for p in profiles)
    if compute > 7 or memory > 8:
        raise FleetSpecError(f"fleet group {text!r}: MIG layout {layout!r} needs {compute}/7 "
                             f"compute and {memory}/8 memory slices; a card has 7 and 8")


def mig_geometry(profile: str) -> tuple[int, int, int]:
    """(compute slices, memory slices, MiB) of a profile; other cards scale the 80GB table."""
    if profile in MIG_GEOMETRY_80GB:
        return MIG_GEOMETRY_80GB[profile]
    compute, gib = profile.removesuffix("gb").split("g.")
    return int(compute), max(1, round(int(gib) * 8 / 141)), int(gib) * 1024


def _check_islands(group: _Group, text: str) -> None:
    if group.islands > 0 and group.gpus % group.islands:
        raise FleetSpecError(f"fleet group {text!r}: islands={group.islands} does not divide "
                             f"{group.gpus} GPUs into equal NVLink islands")


def _expand(groups: list[_Group]) -> list[SimNodeSpec]:
    nodes: list[SimNodeSpec] = []
    next_number: dict[str, int] = {}
    for group in groups:
        prefix = group.prefix or f"sim-{group.model.name.lower()}"
        for _ in range(group.count):
            number = next_number.get(prefix, 0)
            next_number[prefix] = number + 1
            nodes.append(_node(group, f"{prefix}-{number}", len(nodes)))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise FleetSpecError("fleet spec gives two nodes the same name; use name=PREFIX")
    return nodes


def _node(group: _Group, name: str, position: int) -> SimNodeSpec:
    zones = group.zones or DEFAULT_ZONES
    cores = group.cores or (224 if group.gpus >= 8 else 32 * group.gpus)
    mem_gib = group.mem_gib or 256 * group.gpus
    labels = {"zone": zones[position % len(zones)], "gpu-model": group.model.name,
              "gpu-count": str(group.gpus), "mig": str(bool(group.mig_layouts)).lower()}
    return SimNodeSpec(name=name, model=group.model, gpus=group.gpus, islands=group.islands,
                       mig_layouts=group.mig_layouts, labels=labels, cpu_milli=cores * 1000,
                       memory_mib=mem_gib * 1024, cuda_version=group.cuda)
