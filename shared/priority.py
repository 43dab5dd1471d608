"""A service's CPU priority lowered once it is ready (`gpuledger up` asks it to, see up_nice.py).

`up` runs the processes off the claim path at a lower priority. Started that way, their start
(imports, the catch-up fold of the log) ran at that low weight too, and on a busy machine (a CI
runner, every test beside them) it could take long enough to run into `up`'s ready timeout. So
they start at full priority and lower it themselves right after announcing themselves ready.

Linux keeps a nice value per thread: every thread the process has by then is lowered, and the
threads it starts later inherit the value of the thread that starts them.

Where the kernel groups processes by session (autogroup, `/proc/sys/kernel/sched_autogroup_enabled`,
on by default in most distributions' kernels), a thread's nice value only weighs against the
threads of its own session: the CPU is shared between sessions first, each at its session's own
nice. `up` starts every process in a session of its own, so a service niced by its threads alone
competed with the claim path at full weight (session 31: every process of the stack in its own
autogroup, each at nice 0). The session's nice is lowered too (`/proc/self/autogroup`).
"""

from __future__ import annotations

import logging
import os

NICE_WHEN_READY_ENV = "GPULEDGER_NICE_WHEN_READY"  # set by `gpuledger up` for its niced services

log = logging.getLogger("gpuledger")


def lower_when_ready(env: dict[str, str] | None = None) -> int:
    """Lower every thread of this process by the increment `env` names (none: no change);
    returns the increment applied. A value that is not a positive integer is ignored, said."""
    env = os.environ if env is None else env
    raw = env.get(NICE_WHEN_READY_ENV, "").strip()
    if not raw:
        return 0
    try:
        increment = int(raw)
    except ValueError:
        log.warning("%s=%r is not an integer: the priority stays as it is", NICE_WHEN_READY_ENV, raw)
        return 0
    if increment <= 0:
        return 0
    lower_every_thread(increment)
    return increment


def lower_every_thread(increment: int) -> None:
    target = min(os.getpriority(os.PRIO_PROCESS, 0) + increment, 19)
    for tid in _thread_ids():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(target, os.getpriority(os.PRIO_PROCESS, tid)))
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            continue
    lower_session(increment)


AUTOGROUP = "/proc/self/autogroup"


def lower_session(increment: int, path: str = AUTOGROUP) -> int | None:
    """Lower the nice of this process's autogroup (its session's share of the CPU) by `increment`;
    returns the new value, None where the kernel has no autogroups (or refuses: not fatal, the
    threads are lowered either way) or where this process does not lead its session: the value is
    the whole session's, and a process started in its parent's session (a test, a shell's child)
    must not lower its parent's share."""
    if os.getsid(0) != os.getpid():
        return None
    try:
        with open(path) as f:
            current = int(f.read().rsplit("nice", 1)[1])
        target = min(current + increment, 19)
        with open(path, "w") as f:
            f.write(str(target))
        return target
    except (OSError, ValueError, IndexError):
        return None


def _thread_ids() -> list[int]:
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # no /proc (not Linux): the calling thread, which is what nice affects there
        return [0]
