"""The ports `gpuledger up` listens on, kept across restarts in `<data dir>/ports.json`.

A restart must not change `GPULEDGER_NATS_URL` (or the dashboard's address) under the people and
programs that copied it, so the first start picks each port once and later starts reuse it.
New ports come from below Linux's ephemeral range (32768 and up): an outgoing connection never
takes one of ours while the stack is down, so a remembered port is almost always still free.

A port is chosen when `up` starts but bound only when its process is ready (a service's metrics
port, the dashboard's: tens of seconds later on a busy machine). Another `up` starting meanwhile
(the test suite runs several at once) found such a port free and took it too, and one of the two
processes could not listen. So each port a book takes is also reserved, with a lock on a file
named after it in a folder shared by this user's processes (`<tmp>/gpuledger-ports-<uid>`), held
as long as the book (`up`) lives: another book skips a reserved port as if it were in use. The
kernel drops the lock when the process ends, however it ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import sys
import tempfile
from pathlib import Path
from typing import IO

PORTS_FILE = "ports.json"
_STABLE_RANGE = (20000, 32767)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on `port` now (SO_REUSEADDR, as servers bind: a port left in
    TIME_WAIT by the last run counts as free)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class PortBook:
    """Name -> port, read from and written back to the data dir."""

    def __init__(self, data_dir: Path, rng: random.Random | None = None):
        self.path = Path(data_dir) / PORTS_FILE
        self.ports: dict[str, int] = _read(self.path)
        self._rng = rng or random.Random()
        self.changed: list[str] = []  # what a restart could not keep, said to the user
        self._held: dict[int, IO | None] = {}  # the reservations of the ports taken (module doc)

    def take(self, name: str, requested: int | None = None) -> int:
        """`requested` (remembered from now on); else the remembered port while it is free and
        reserved by no other book; else a new one. Every port taken stays reserved while the book
        lives."""
        if requested:
            port = requested
            if port not in self._held:  # asked for: used even when another book holds it
                self._held[port] = _reserve(port) or None
        else:
            port = self.ports.get(name, 0)
            if port and not self._claim(port):
                fresh = self._fresh()
                self.changed.append(f"port {port} remembered for {name} is in use; using {fresh}")
                port = fresh
            port = port or self._fresh()
        self.ports[name] = port
        return port

    def _claim(self, port: int) -> bool:
        """Reserve `port` for this book if no other book holds it and nothing listens on it."""
        if port in self._held:
            return True
        lock = _reserve(port)
        if lock is False:
            return False
        if not port_is_free(port):
            if lock is not None:
                lock.close()
            return False
        self._held[port] = lock
        return True

    def release(self) -> None:
        """Give up the reservations (the process ending does the same)."""
        for lock in self._held.values():
            if lock is not None:
                lock.close()
        self._held.clear()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.ports, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path)

    def _fresh(self) -> int:
        taken = set(self.ports.values())
        for _ in range(200):
            port = self._rng.randint(*_STABLE_RANGE)
            if port not in taken and self._claim(port):
                return port
        raise RuntimeError(f"no free port found in {_STABLE_RANGE[0]}-{_STABLE_RANGE[1]}")


def reservations_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"gpuledger-ports-{os.getuid()}"


def _reserve(port: int) -> IO | None | bool:
    """The open, locked reservation file of `port`; False when another process (or book) holds
    it; None when reservations cannot be made here (a folder not writable): then the ports are
    only checked free, as before reservations."""
    try:
        folder = reservations_dir()
        folder.mkdir(mode=0o700, exist_ok=True)
        lock = open(folder / str(port), "a")
    except OSError:
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return False
    except OSError:
        lock.close()
        return None
    return lock


def _read(path: Path) -> dict[str, int]:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as err:
        sys.stderr.write(f"gpuledger: ignoring {path}: not JSON ({err}); choosing new ports\n")
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): v for k, v in raw.items() if isinstance(v, int) and 0 < v < 65536}
