"""CPU time of every process of the stack, from /proc (Linux), by role.

The stack is the process tree under `gpuledger up`: nats-server, one process per service, the
simulated node agents, and `up` itself. The tree is sampled now and then, so a process that is
restarted (by `up`'s supervision) is counted from its start, and the restarts are counted too.

Beside the CPU each process used, the time its threads were ready to run and waited for a CPU
(`/proc/<pid>/task/<tid>/schedstat`, the run queue delay; 0 where the kernel keeps no schedstat):
on a machine whose cores the stack and the benchmark share, a claim's latency is largely such
waits of the processes on its path (nats-server, claim, allocator), not work of their own.
And how often its threads were put on a CPU (the same file's timeslices): each wake-up of a
process that waits for messages is one, so the count says how many times per claim a process was
woken, whatever the load (a busier machine adds a few slices cut short by others).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds), None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # the name may hold spaces: cut after it
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def run_delay(pid: int) -> float:
    """Seconds the threads of `pid` that are alive now have waited on a run queue, ready to run."""
    return schedstat(pid)[0]


def schedstat(pid: int) -> tuple[float, int]:
    """(seconds waited ready to run, timeslices run) of the threads of `pid` alive now."""
    waited = slices = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0, 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
            waited, slices = waited + int(fields[1]), slices + int(fields[2])
        except (OSError, IndexError, ValueError):
            continue
    return waited / 1e9, slices


def role(pid: int) -> str:
    """nats-server, a service name, node-agents, up, or the program's name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "gone"
    if not argv:
        return "gone"
    if os.path.basename(argv[0]).startswith("nats-server"):
        return "nats-server"
    if "service" in argv:
        return argv[argv.index("service") + 1] if argv.index("service") + 1 < len(argv) else "service"
    if "services.node_agent" in argv:
        return "node-agents"
    if "up" in argv:
        return "up"
    return os.path.basename(argv[1] if len(argv) > 1 else argv[0])


def descendants(root: int) -> list[int]:
    """`root` and every process below it: from each process's own list of children where the kernel
    keeps one (a few small reads, where a scan of every process of a busy machine cost this
    benchmark 5 % of its CPU, sampled twice a second), else from a scan of /proc."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        found = _children(pid)
        if found is None:
            return _descendants_by_scan(root)
        out.append(pid)
        todo.extend(found)
    return out


def _children(pid: int) -> list[int] | None:
    """The children of `pid` (of all its threads); [] once it is gone; None where the kernel keeps
    no such list."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found.extend(int(child) for child in f.read().split())
        except FileNotFoundError:
            if os.path.exists(f"/proc/{pid}/task/{tid}"):
                return None  # the thread is there and its list is not: the kernel keeps none
            continue  # the thread ended meanwhile
        except (OSError, ValueError):
            continue
    return found


def _descendants_by_scan(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


@dataclass
class CpuMeter:
    """CPU seconds used by the tree under `root` between `start()` and the last `sample()`."""

    root: int
    first: dict[int, float] = field(default_factory=dict)  # pid -> CPU at start (0 if born later)
    last: dict[int, float] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    baseline_pids: dict[str, set[int]] = field(default_factory=dict)
    first_wait: dict[int, float] = field(default_factory=dict)  # pid -> run queue delay at start
    last_wait: dict[int, float] = field(default_factory=dict)
    first_slices: dict[int, int] = field(default_factory=dict)  # pid -> timeslices at start
    last_slices: dict[int, int] = field(default_factory=dict)
    # (unix time, seconds each role waited for a CPU so far) at `start` and each `sample`: when in
    # the run the stack's processes waited (`waits_between`)
    history: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def start(self) -> None:
        self.first, self.last, self.roles = {}, {}, {}
        self.first_wait, self.last_wait = {}, {}
        self.first_slices, self.last_slices = {}, {}
        self._visit(started=True)
        self.baseline_pids = {}
        for pid, name in self.roles.items():
            self.baseline_pids.setdefault(name, set()).add(pid)
        self.history = [(time.time(), self.waits_by_role())]

    def sample(self) -> None:
        self._visit(started=False)
        self.history.append((time.time(), self.waits_by_role()))

    def _visit(self, started: bool) -> None:
        for pid in descendants(self.root):
            stat = _stat(pid)
            if stat is None:
                continue
            waited, slices = schedstat(pid)
            if pid not in self.roles:
                self.roles[pid] = role(pid)
                self.first[pid] = stat[1] if started else 0.0
                self.first_wait[pid] = waited if started else 0.0
                self.first_slices[pid] = slices if started else 0
            self.last[pid] = stat[1]
            self.last_wait[pid] = max(waited, self.last_wait.get(pid, 0.0))  # a thread gone takes its part
            self.last_slices[pid] = max(slices, self.last_slices.get(pid, 0))

    def seconds_by_role(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for pid, cpu in self.last.items():
            name = self.roles[pid]
            used[name] = used.get(name, 0.0) + cpu - self.first.get(pid, 0.0)
        return used

    def waits_by_role(self) -> dict[str, float]:
        """Seconds each role's processes waited for a CPU, ready to run (see the module's docstring)."""
        waited: dict[str, float] = {}
        for pid, last in self.last_wait.items():
            name = self.roles[pid]
            waited[name] = waited.get(name, 0.0) + max(0.0, last - self.first_wait.get(pid, 0.0))
        return waited

    def slices_by_role(self) -> dict[str, int]:
        """Times each role's threads were put on a CPU (see the module's docstring)."""
        counted: dict[str, int] = {}
        for pid, last in self.last_slices.items():
            name = self.roles[pid]
            counted[name] = counted.get(name, 0) + max(0, last - self.first_slices.get(pid, 0))
        return counted

    def restarts(self) -> dict[str, int]:
        """Processes of a role that appeared after `start()` (a role seen then: a restart)."""
        counts: dict[str, int] = {}
        for pid, name in self.roles.items():
            if name in self.baseline_pids and pid not in self.baseline_pids[name]:
                counts[name] = counts.get(name, 0) + 1
        return counts


def waits_between(history: list[tuple[float, dict[str, float]]],
                  spans: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
    """How fast each role's processes waited for a CPU (ms of waiting per second of the run) in the
    sampled intervals that overlap one of `spans` (unix seconds: the slowest claims' publish to
    seen), beside the same over every interval: the process that was off its CPU when the tail
    happened waits more there than on the whole."""
    chosen = {"tail": [0.0, {}], "all": [0.0, {}]}
    spans = sorted(spans)
    for (t0, w0), (t1, w1) in zip(history, history[1:]):
        kinds = ["all"]
        if any(start <= t1 and end >= t0 for start, end in spans):
            kinds.append("tail")
        for kind in kinds:
            chosen[kind][0] += t1 - t0
            waited = chosen[kind][1]
            for name, value in w1.items():
                waited[name] = waited.get(name, 0.0) + max(0.0, value - w0.get(name, 0.0))
    found: dict[str, dict[str, float]] = {}
    for kind, (seconds, waited) in chosen.items():
        for name, value in waited.items():
            found.setdefault(name, {})[kind] = round(1000 * value / seconds, 1) if seconds > 0 else 0.0
    return found
