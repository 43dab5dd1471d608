"""The openb trace family: the pod lists the FGD repository publishes beside its default one.

hkust-adsl/kubernetes-scheduler-simulator (`data/`) publishes `openb_pod_list_<suffix>.csv`, each
the default list with one proportion varied (FGD paper, ATC'23, section 6). The files are not on
this machine; these generators make each from the default list, under the same suffix. Our reading
of the names (the paper gives the axes, not the recipe):

- `cpuNNN` (050, 100, 200, 250): the non-GPU pods ask, in all, NNN % of the CPU that the GPU pods
  ask (by CPU request; the default list: 29 %). The GPU pods stay as they are.
- `gpushareNNN` (020 ... 100): GPU-sharing pods (one GPU, less than 1000 milli) are NNN % of the
  GPU pods by count (the default list: 44 %). The number of GPU pods stays; whole-GPU pods keep
  their mix of one and several GPUs; the non-GPU pods stay.
- `multigpuNNN` (020 ... 050): multi-GPU pods ask NNN % of the GPUs the GPU pods ask (by GPU
  request; the default list: 7 %). The GPU pods' total request stays; the other GPU pods keep
  their mix of shares and whole GPUs; the non-GPU pods stay.
- `gpuspecNNN` (010, 020, 025, 033): NNN % of the GPU pods by count carry a `gpu_spec` (the
  default list: none), drawn as `model-bound-N` draws them (1 to 3 models in proportion to the
  fleet's GPUs among the models with a node that could hold the pod alone).

A class grows by copies of its own pods (every pod `f` times, and a random few once more, copies
named `<name>-v<j>`) and shrinks to a random sample of them, so its shapes keep their mix. The
one-pass protocol then tops each list up (or cuts it) to 130 % of GPU capacity as usual.
"""

from __future__ import annotations

import random
from dataclasses import replace

from simulator.trace import MILLI, NodeRow, PodRow

CPU_PERCENTS = (50, 100, 200, 250)
GPUSHARE_PERCENTS = (20, 40, 60, 80, 100)
MULTIGPU_PERCENTS = (20, 30, 40, 50)
GPUSPEC_PERCENTS = (10, 20, 25, 33)


def is_share(pod: PodRow) -> bool:
    return pod.num_gpu == 1 and pod.gpu_milli < MILLI


def resize(pods: list[PodRow], count: int, rng: random.Random) -> list[PodRow]:
    """`count` pods made of `pods`: a random sample when fewer, else every pod `count // n` times
    and a random `count % n` of them once more (copies get new names)."""
    n = len(pods)
    if count <= n or not n:
        return rng.sample(pods, count) if n else []
    times, extra = divmod(count, n)
    more = set(rng.sample(range(n), extra))
    out = []
    for i, pod in enumerate(pods):
        copies = times + (i in more)
        out += [pod] + [replace(pod, name=f"{pod.name}-v{j}") for j in range(1, copies)]
    return out


def cpu_variant(pods: list[PodRow], percent: int, rng: random.Random) -> list[PodRow]:
    """The non-GPU pods resized so their CPU request is `percent` % of the GPU pods'."""
    gpu = [p for p in pods if p.num_gpu]
    cpu_only = [p for p in pods if not p.num_gpu]
    want = percent / 100 * sum(p.cpu_milli for p in gpu)
    have = sum(p.cpu_milli for p in cpu_only)
    count = round(len(cpu_only) * want / have) if have else 0
    return _shuffled(gpu + resize(cpu_only, count, rng), rng)


def gpushare_variant(pods: list[PodRow], percent: int, rng: random.Random) -> list[PodRow]:
    """Sharing pods `percent` % of the GPU pods by count, as many GPU pods as before."""
    gpu = [p for p in pods if p.num_gpu]
    shares = [p for p in gpu if is_share(p)]
    whole = [p for p in gpu if not is_share(p)]
    n_shares = round(len(gpu) * percent / 100)
    rest = [p for p in pods if not p.num_gpu]
    return _shuffled(rest + resize(shares, n_shares, rng) + resize(whole, len(gpu) - n_shares, rng), rng)


def multigpu_variant(pods: list[PodRow], percent: int, rng: random.Random) -> list[PodRow]:
    """Multi-GPU pods ask `percent` % of the GPU pods' GPUs; that total stays as it was."""
    gpu = [p for p in pods if p.num_gpu]
    multi = [p for p in gpu if p.num_gpu > 1]
    single = [p for p in gpu if p.num_gpu == 1]
    total = sum(p.gpu_demand for p in gpu)
    multi_have = sum(p.gpu_demand for p in multi)
    single_have = total - multi_have
    n_multi = round(len(multi) * percent / 100 * total / multi_have) if multi_have else 0
    n_single = round(len(single) * (1 - percent / 100) * total / single_have) if single_have else 0
    rest = [p for p in pods if not p.num_gpu]
    return _shuffled(rest + resize(multi, n_multi, rng) + resize(single, n_single, rng), rng)


def _shuffled(pods: list[PodRow], rng: random.Random) -> list[PodRow]:
    rng.shuffle(pods)
    return pods


def family(pods: list[PodRow], nodes: tuple[NodeRow, ...], rng_for, bind) -> dict[str, list[PodRow]]:
    """Every family member by its published suffix; `rng_for(name)` gives each its own generator,
    `bind(pods, nodes, percent, rng)` is `model-bound-N`'s binding (passed in: it lives beside
    the other variants)."""
    out = {}
    for percent in CPU_PERCENTS:
        name = f"cpu{percent:03d}"
        out[name] = cpu_variant(pods, percent, rng_for(name))
    for percent in GPUSHARE_PERCENTS:
        name = f"gpushare{percent:03d}"
        out[name] = gpushare_variant(pods, percent, rng_for(name))
    for percent in MULTIGPU_PERCENTS:
        name = f"multigpu{percent:03d}"
        out[name] = multigpu_variant(pods, percent, rng_for(name))
    for percent in GPUSPEC_PERCENTS:
        name = f"gpuspec{percent:03d}"
        out[name] = bind(pods, nodes, percent, rng_for(name))
    return out
