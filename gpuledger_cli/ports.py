"""The ports `gpuledger up` listens on, kept across restarts in `<data dir>/ports.json`.

A restart must not change `GPULEDGER_NATS_URL` (or the dashboard's address) under the people and
programs that copied it, so the first start picks each port once and later starts reuse it.
New ports come from below Linux's ephemeral range (32768 and up): an outgoing connection never
takes one of ours while the stack is down, so a remembered port is almost always still free.
"""

from __future__ import annotations

import json
import random
import socket
import sys
from pathlib import Path

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

    def take(self, name: str, requested: int | None = None) -> int:
        """`requested` (remembered from now on); else the remembered port while it is free; else a
        new one."""
        if requested:
            port = requested
        else:
            port = self.ports.get(name, 0)
            if port and not port_is_free(port):
                fresh = self._fresh()
                self.changed.append(f"port {port} remembered for {name} is in use; using {fresh}")
                port = fresh
            port = port or self._fresh()
        self.ports[name] = port
        return port

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.ports, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.path)

    def _fresh(self) -> int:
        taken = set(self.ports.values())
        for _ in range(200):
            port = self._rng.randint(*_STABLE_RANGE)
            if port not in taken and port_is_free(port):
                return port
        raise RuntimeError(f"no free port found in {_STABLE_RANGE[0]}-{_STABLE_RANGE[1]}")


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
