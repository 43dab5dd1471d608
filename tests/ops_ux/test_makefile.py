"""`make run`'s first install says what it does and lets pip show progress; `make test` tries to
install chromium for the browser tests and never fails because it could not."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make") or "make"


def make(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path) if path else None
    return subprocess.run([MAKE, "--no-print-directory", "-C", str(ROOT), *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_the_first_install_announces_itself_and_is_not_silenced(tmp_path):
    plan = make("-n", "-B", "install", f"VENV={tmp_path / 'venv'}").stdout
    install = next(line for line in plan.splitlines() if "-e '.[test]'" in line)
    assert " -q " not in install and "--progress-bar on" in install
    assert plan.index("installing gpuledger and its dependencies") < plan.index(install)
    assert "run: $(STAMP)" in (ROOT / "Makefile").read_text()  # `make run` goes through it


def fake_bin(tmp_path: Path, uid: int, apt_exit: int) -> str:
    """A PATH without chromium, with an `id` and an `apt-get` that do as told (and log calls)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, body in (("id", f"echo {uid}"), ("apt-get", f'echo "$@" >> {tmp_path}/apt.log; exit {apt_exit}')):
        script = folder / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(folder)


def test_a_failed_chromium_install_does_not_fail_make(tmp_path):
    done = make("browser", path=fake_bin(tmp_path, uid=0, apt_exit=100))
    assert done.returncode == 0
    assert "could not be installed" in done.stdout and "update" in (tmp_path / "apt.log").read_text()


def test_without_root_nothing_is_installed(tmp_path):
    done = make("browser", path=fake_bin(tmp_path, uid=1000, apt_exit=0))
    assert done.returncode == 0 and not (tmp_path / "apt.log").exists()


def test_make_test_sets_up_the_browser_first():
    test_rule = next(l for l in (ROOT / "Makefile").read_text().splitlines() if l.startswith("test:"))
    assert "browser" in test_rule.split()
