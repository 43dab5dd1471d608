"""One `gpuledger up` per data folder, even after `up` itself was killed with SIGKILL.

Every child of `up` runs in a session of its own (so a Ctrl-C reaches `up` alone, which stops
them in order), so a `kill -9` of `up` left nats-server and every service running, orphaned. A
second `up` on the same folder then found the remembered ports taken, took others, and started a
second nats-server on the same JetStream store (and a second projector on the same SQLite file,
a second simulated fleet with the same node names): two servers writing one store is how
accepted messages get lost.

`up` takes an exclusive `flock` on DATA_DIR/up.lock and hands the locked descriptor to every
process it starts (`pass_fds`): the lock lasts while any of them lives, orphans included, and a
second `up` is refused, naming the processes still holding the folder. The file lists them
(`up` first), so the refusal can say which to stop.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "up.lock"


class DataDirBusy(Exception):
    """Another `gpuledger up`, or processes one left running, hold the data folder."""


def hold(data_dir: Path) -> int:
    """The locked descriptor of DATA_DIR/up.lock, naming this process; raises DataDirBusy."""
    path = Path(data_dir) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holders = _holders(fd)
        os.close(fd)
        raise DataDirBusy(_busy_message(Path(data_dir), holders)) from None
    note(fd, {"up": os.getpid()})
    return fd


def note(fd: int, pids: dict[str, int]) -> None:
    """Rewrite the list of processes holding the folder (name pid per line)."""
    text = "".join(f"{name} {pid}\n" for name, pid in pids.items()).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, text, 0)


def _holders(fd: int) -> list[tuple[str, int]]:
    out = []
    for line in os.pread(fd, 1 << 16, 0).decode(errors="replace").splitlines():
        name, _, pid = line.rpartition(" ")
        if pid.isdigit():
            out.append((name, int(pid)))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _busy_message(data_dir: Path, holders: list[tuple[str, int]]) -> str:
    running = [(name, pid) for name, pid in holders if _alive(pid)]
    head = f"{data_dir} is in use by another `gpuledger up`"
    if holders and holders[0][0] == "up" and (holders[0] not in running):
        head += f" (pid {holders[0][1]}, no longer running: it was killed and left its processes running)"
    listed = ", ".join(f"{name} (pid {pid})" for name, pid in running)
    pids = " ".join(str(pid) for _, pid in running)
    return (f"{head}; running: {listed or 'see ' + str(data_dir / LOCK_FILE)}. A second nats-server "
            f"on the same store would lose data: stop them first"
            + (f" (kill {pids})" if pids else "") + ", or use another --data-dir")
