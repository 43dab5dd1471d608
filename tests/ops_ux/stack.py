"""`gpuledger up --demo` as a user runs it, for the operator tests: the lines it prints, the CLI
against it, a stop that waits for every child."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "gpuledger"
WANTED = ("GPULEDGER_NATS_URL", "GPULEDGER_METRICS", "GPULEDGER_DASHBOARD")


class Stack:
    def __init__(self, data_dir: Path, *extra: str, wanted: tuple[str, ...] = WANTED):
        self.data_dir = data_dir
        self.proc = subprocess.Popen([str(BIN), "up", "--demo", "--data-dir", str(data_dir), *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines: dict[str, str] = {}
        while not set(wanted) <= set(self.lines):
            line = self.proc.stdout.readline().strip()
            if not line:
                self.proc.kill()
                raise AssertionError(f"up printed {self.lines} then stopped: {self.proc.stderr.read()}")
            name, _, value = line.partition("=")
            self.lines[name] = value

    @property
    def url(self) -> str:
        return self.lines["GPULEDGER_NATS_URL"]

    def cli(self, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        env = env if env is not None else dict(os.environ, GPULEDGER_NATS_URL=self.url)
        done = subprocess.run([str(BIN), *args], env=env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError(f"{args}: {done.stderr}")
        return done

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)
