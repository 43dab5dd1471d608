"""A strict reader for traces in the openb format (Alibaba cluster-trace-gpu-v2023).

Columns are found by the header, in any order. The pod lists published beside the default one
come in shapes of their own: some have only `name,cpu_milli,memory_mib,num_gpu,gpu_milli`, and a
`gpu_spec` list may name a model twice. A missing optional column takes the paper's meaning (no
`gpu_spec`: any model; no `qos`/`pod_phase`: not checked; no `creation_time`: the pods have no
times, which the one-pass protocol does not use and `--dynamic`/`--live` refuse); a model named
twice is one model. Everything else stays strict on purpose: a trace that is silently misread
gives numbers that look right and are not. Every problem names the file, the line, the field and
what was expected.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OPENB = REPO.parent / "shared" / "data" / "openb"  # `../shared` beside the checkout
DEFAULT_NODES = OPENB / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = OPENB / "openb_pod_list_default.csv"
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
               "pod_phase", "creation_time", "deletion_time", "scheduled_time")
POD_REQUIRED = POD_COLUMNS[:5]  # the five columns every published pod list has
QOS = ("LS", "BE", "Burstable", "Guaranteed")
PHASES = ("Running", "Failed", "Pending", "Succeeded")
MILLI = 1000
MAX_GPUS = 64


class TraceError(ValueError):
    """The trace is not in the expected format; the message says where and why."""


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodRow:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # share of EACH requested GPU; 0 for a CPU-only pod
    models: tuple[str, ...]  # allowed GPU models; empty: any
    creation_time: int | None = None  # None: the pod list has no times
    deletion_time: int | None = None

    @property
    def gpu_demand(self) -> int:
        """Milli-GPU the pod asks for in all (num_gpu x gpu_milli)."""
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True)
class Trace:
    nodes: tuple[NodeRow, ...]
    pods: tuple[PodRow, ...]

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes) * MILLI

    @property
    def timed(self) -> bool:
        """Every pod has a creation time (the pod list has the column)."""
        return all(p.creation_time is not None for p in self.pods)

    def require_times(self, what: str) -> None:
        """A clear error for a replay by time over a pod list without times."""
        if not self.timed:
            raise TraceError(f"{what} replays pods by 'creation_time', which this pod list does not "
                             f"have (it only suits the one-pass fill)")


class _Row:
    """One CSV row with field accessors that raise TraceError naming the place."""

    def __init__(self, path: Path, line: int, values: dict[str, str]):
        self.where, self.values = f"{path.name} line {line}", values

    def fail(self, field: str, problem: str) -> TraceError:
        return TraceError(f"{self.where}: field {field!r}: {problem}")

    def text(self, field: str, allow_empty: bool = False) -> str:
        value = self.values[field]
        if value != value.strip():
            raise self.fail(field, f"surrounding whitespace in {value!r}")
        if not value and not allow_empty:
            raise self.fail(field, "must not be empty")
        return value

    def integer(self, field: str, low: int = 0, high: int | None = None) -> int:
        raw = self.text(field)
        if not raw.isdigit() or not raw.isascii():
            raise self.fail(field, f"expected a non-negative integer, got {raw!r}")
        value = int(raw)
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            raise self.fail(field, f"{value} is out of range ({bound})")
        return value

    def has(self, field: str) -> bool:
        return field in self.values

    def optional_integer(self, field: str) -> int | None:
        """None when the column is absent or the cell is empty."""
        return None if self.values.get(field, "") == "" else self.integer(field)

    def choice(self, field: str, allowed: tuple[str, ...]) -> str:
        value = self.text(field)
        if value not in allowed:
            raise self.fail(field, f"{value!r} is not one of {', '.join(allowed)}")
        return value


def _rows(path: Path, required: tuple[str, ...], known: tuple[str, ...]):
    """Rows as `_Row`s keyed by the header's names; `required` must be there, nothing outside
    `known` may be (a misspelt column would otherwise be silently ignored)."""
    try:
        handle = path.open(newline="", encoding="utf-8-sig")  # -sig: a BOM some tools write
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    with handle:
        reader = csv.reader(handle, strict=True)
        try:
            header = next(reader, None)
            if header is None:
                raise TraceError(f"{path.name}: empty file (expected a header with {','.join(required)})")
            columns = _header(path, header, required, known)
            for values in reader:
                line = reader.line_num
                if len(values) != len(columns):
                    raise TraceError(f"{path.name} line {line}: {len(values)} fields, "
                                     f"expected {len(columns)} ({','.join(columns)})")
                yield _Row(path, line, dict(zip(columns, values)))
        except csv.Error as err:
            raise TraceError(f"{path.name} line {reader.line_num}: malformed CSV ({err})") from None
        except UnicodeDecodeError as err:
            raise TraceError(f"{path.name}: not UTF-8 ({err.reason} at byte {err.start})") from None


def _header(path: Path, header: list[str], required: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    where = f"{path.name} line 1: header {','.join(header)!r}"
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise TraceError(f"{where}: column {', '.join(map(repr, repeated))} appears twice")
    unknown = [c for c in header if c not in known]
    if unknown:
        raise TraceError(f"{where}: unknown column {', '.join(map(repr, unknown))} "
                         f"(known: {','.join(known)})")
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(f"{where}: missing column {', '.join(map(repr, missing))} "
                         f"(required: {','.join(required)})")
    return tuple(header)


def _unique(rows, path: Path, kind: str):
    seen: set[str] = set()
    for row, item in rows:
        if item.name in seen:
            raise row.fail("name" if kind == "pod" else "sn", f"duplicate {kind} {item.name!r}")
        seen.add(item.name)
        yield item


def _node(row: _Row) -> NodeRow:
    gpus = row.integer("gpu", 0, MAX_GPUS)
    model = row.text("model", allow_empty=gpus == 0)
    if "|" in model:
        raise row.fail("model", f"one model per node, got {model!r}")
    return NodeRow(row.text("sn"), row.integer("cpu_milli", 1), row.integer("memory_mib"), gpus, model)


def _models(row: _Row) -> tuple[str, ...]:
    """The allowed models in their order; a model listed twice is one model (published lists
    have `V100M16|V100M32|V100M32`)."""
    spec = row.text("gpu_spec", allow_empty=True) if row.has("gpu_spec") else ""
    if not spec:
        return ()
    models = tuple(spec.split("|"))
    if any(not m or m != m.strip() for m in models):
        raise row.fail("gpu_spec", f"empty or padded model name in {spec!r} (models separated by '|')")
    return tuple(dict.fromkeys(models))


def _gpu_request(row: _Row) -> tuple[int, int]:
    num_gpu = row.integer("num_gpu", 0, MAX_GPUS)
    gpu_milli = row.integer("gpu_milli", 0, MILLI)
    if num_gpu == 0 and gpu_milli != 0:
        raise row.fail("gpu_milli", f"{gpu_milli} on a pod with num_gpu=0 (a CPU-only pod asks 0)")
    if num_gpu > 0 and gpu_milli == 0:
        raise row.fail("gpu_milli", f"0 on a pod with num_gpu={num_gpu} (expected 1..{MILLI})")
    if num_gpu > 1 and gpu_milli != MILLI:
        raise row.fail("gpu_milli", f"{gpu_milli} with num_gpu={num_gpu}: several GPUs are always "
                                    f"whole ({MILLI})")
    return num_gpu, gpu_milli


def _times(row: _Row) -> tuple[int | None, int | None]:
    """(creation, deletion); both None in a pod list without times."""
    if not row.has("creation_time"):
        for field in ("deletion_time", "scheduled_time"):
            if row.has(field):
                raise row.fail(field, "given without a 'creation_time' column")
        return None, None
    created = row.integer("creation_time")
    deleted = row.optional_integer("deletion_time")
    if deleted is not None and deleted < created:
        raise row.fail("deletion_time", f"{deleted} is before creation_time {created}")
    row.optional_integer("scheduled_time")
    return created, deleted


def _pod(row: _Row) -> PodRow:
    num_gpu, gpu_milli = _gpu_request(row)
    models = _models(row)
    if num_gpu == 0 and models:
        raise row.fail("gpu_spec", "a CPU-only pod (num_gpu=0) cannot name GPU models")
    if row.has("qos"):
        row.choice("qos", QOS)
    if row.has("pod_phase"):
        row.choice("pod_phase", PHASES)
    created, deleted = _times(row)
    return PodRow(row.text("name"), row.integer("cpu_milli"), row.integer("memory_mib"), num_gpu,
                  gpu_milli, models, created, deleted)


def read_nodes(path: str | Path) -> tuple[NodeRow, ...]:
    path = Path(path)
    nodes = tuple(_unique(((r, _node(r)) for r in _rows(path, NODE_COLUMNS, NODE_COLUMNS)), path, "node"))
    if not nodes:
        raise TraceError(f"{path.name}: no nodes")
    if not any(n.gpus for n in nodes):
        raise TraceError(f"{path.name}: no node has a GPU")
    return nodes


def read_pods(path: str | Path) -> tuple[PodRow, ...]:
    path = Path(path)
    pods = tuple(_unique(((r, _pod(r)) for r in _rows(path, POD_REQUIRED, POD_COLUMNS)), path, "pod"))
    if not pods:
        raise TraceError(f"{path.name}: no pods")
    return pods


def read_trace(nodes_path: str | Path, pods_path: str | Path) -> Trace:
    """Both files, and the checks that need both (every model a pod names exists in the fleet)."""
    nodes, pods = read_nodes(nodes_path), read_pods(pods_path)
    fleet = {n.model for n in nodes if n.gpus}
    for pod in pods:
        missing = [m for m in pod.models if m not in fleet]
        if missing:
            raise TraceError(f"{Path(pods_path).name}: pod {pod.name!r}: field 'gpu_spec' names "
                             f"{', '.join(missing)}, which no node has (fleet: {', '.join(sorted(fleet))})")
    return Trace(nodes, pods)
