"""The faults a chaos run injects into a stack `gpuledger up` runs: kill -9 of a process it
started (found under its pid in /proc), and a nats-server outage of a chosen length.

A killed service is `up`'s to restart (it supervises its children). A killed nats-server is
restarted here, with the same command line, once the outage has lasted as long as asked, unless
something (a supervising `up`) already listens on its port again: a server this module started is
stopped by `stop_started` at the end of the run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SERVICE_ROLES = ("claim", "allocator", "quota", "pool-controller", "projector", "node-agents")


@dataclass(frozen=True)
class Proc:
    pid: int
    argv: tuple[str, ...]

    @property
    def role(self) -> str:
        if Path(self.argv[0]).name == "nats-server":
            return "nats-server"
        if "services.node_agent" in self.argv:
            return "node-agents"
        if "service" in self.argv:
            return self.argv[self.argv.index("service") + 1]
        return Path(self.argv[0]).name

    @property
    def client_port(self) -> int:
        return int(self.argv[self.argv.index("-p") + 1]) if "-p" in self.argv else 0


def children(parent: int) -> list[Proc]:
    """The processes whose parent is `parent` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        args = tuple(a.decode(errors="replace") for a in argv if a)
        if args:  # a zombie (killed, not yet reaped by `up`) has no command line: nothing to kill
            found.append(Proc(int(entry.name), args))
    return found


def find(parent: int, role: str) -> list[Proc]:
    return [p for p in children(parent) if p.role == role]


def kill9(proc: Proc) -> bool:
    try:
        os.kill(proc.pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


@dataclass
class NatsRestarts:
    """nats-servers this run started again after an outage (stopped at the end)."""

    started: list[subprocess.Popen] = field(default_factory=list)

    def restart(self, proc: Proc) -> bool:
        """Start the same server again, unless its port already answers."""
        if listening(proc.client_port):
            return False
        from bench.e2e.stack import _stop_with_parent  # if the benchmark dies, the server goes too

        child = subprocess.Popen(list(proc.argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=_stop_with_parent)
        self.started.append(child)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not listening(proc.client_port):
            if child.poll() is not None:
                return False
            time.sleep(0.05)
        return True

    def stop_started(self) -> None:
        for child in self.started:
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
