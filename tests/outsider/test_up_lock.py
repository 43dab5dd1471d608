"""One `gpuledger up` per data folder, even after `up` was killed with SIGKILL: its children
(each in a session of its own) outlived it, and a second `up` on the folder started a second
nats-server on the same JetStream store. The lock on DATA_DIR/up.lock is kept by every process
`up` starts, so a second `up` is refused while any of them lives, naming them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuledger_cli import up_lock
from gpuledger_cli.up import Child, FolderLock


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_a_second_up_on_the_same_folder_is_refused(tmp_path):
    fd = up_lock.hold(tmp_path)
    with pytest.raises(up_lock.DataDirBusy, match=f"up \\(pid {os.getpid()}\\)"):
        up_lock.hold(tmp_path)
    os.close(fd)
    os.close(up_lock.hold(tmp_path))  # once it is gone, the folder is free again


def test_the_processes_an_up_killed_with_sigkill_left_running_keep_the_folder(tmp_path):
    folder = FolderLock(up_lock.hold(tmp_path))
    orphan = Child("nats-server", [sys.executable, "-c", "import time; time.sleep(120)"], dict(os.environ),
                   tmp_path)
    orphan.folder = folder
    orphan.start()
    try:
        folder.pids["up"] = _dead_pid()  # as if `up` had been killed: its own descriptor is gone
        up_lock.note(folder.fd, folder.pids)
        os.close(folder.fd)
        with pytest.raises(up_lock.DataDirBusy) as refused:
            up_lock.hold(tmp_path)
        said = str(refused.value)
        assert "no longer running: it was killed" in said and f"nats-server (pid {orphan.process.pid})" in said
        assert f"kill {orphan.process.pid}" in said and "another --data-dir" in said
    finally:
        orphan.process.kill()
        orphan.process.wait()
    os.close(up_lock.hold(tmp_path))
