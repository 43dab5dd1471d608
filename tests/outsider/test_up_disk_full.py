"""`gpuledger up` on a data folder it cannot write (session 30): on a full disk (a 1 MB tmpfs) it
ended in a traceback from its lock file's first write (`OSError: [Errno 28] No space left on
device`), and, with room for the lock and nats-server's start but not for what came next, it left
that nats-server running after it had exited. Now one line names the folder and the problem, and
a nats-server it started is stopped. (The full disk is a write refused with ENOSPC at the second
step, as the tmpfs did: a test may not mount one.)"""

from __future__ import annotations

import errno
from pathlib import Path

from gpuledger_cli.ports import PortBook
from tests.cli import invoke


def _processes_naming(folder: Path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in text:
            found.append(text)
    return found


def test_a_full_disk_after_nats_server_started_is_one_line_and_stops_it(tmp_path, monkeypatch):
    data = tmp_path / "d"

    def full(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(data / "ports.json"))

    monkeypatch.setattr(PortBook, "save", full)
    done = invoke("up", "--demo", "--no-dashboard", "--data-dir", str(data), "--ready-timeout", "60")
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    assert f"--data-dir {data}: cannot write there (No space left on device: {data / 'ports.json'})" in done.stderr
    assert "nats-server with JetStream" in done.stderr  # it had started one...
    assert not _processes_naming(data)  # ...and stopped it
