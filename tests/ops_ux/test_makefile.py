"""`make run`'s first install says what it does and lets uv (else pip) show progress; `make test`
tries to install chromium for the browser tests and never fails because it could not."""

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
    install = next(line for line in plan.splitlines() if "install-venv.sh" in line)
    assert plan.index("installing gpuledger and its dependencies") < plan.index(install)
    script = (ROOT / "scripts" / "install-venv.sh").read_text()
    installs = [line for line in script.splitlines() if "-e '.[test]'" in line]
    assert len(installs) == 2 and not any(" -q " in line for line in installs)  # uv, then pip
    assert "--progress-bar on" in installs[1]
    assert "run: $(STAMP)" in (ROOT / "Makefile").read_text()  # `make run` goes through it


def fake_python(tmp_path: Path) -> Path:
    """A `python3` whose `-m venv DIR` makes DIR/bin/python, a stand-in that logs what it is asked
    and answers `-m pip --version` (so pip counts as present)."""
    log = tmp_path / "calls.log"
    inner = f'#!/bin/sh\necho "python $*" >> {log}\nexit 0\n'
    outer = tmp_path / "python3"
    outer.write_text(f"""#!/bin/sh
echo "host $*" >> {log}
if [ "$1 $2" = "-m venv" ]; then
  for dir; do :; done
  mkdir -p "$dir/bin"; printf '%s' '{inner}' > "$dir/bin/python"; chmod +x "$dir/bin/python"
fi
exit 0
""")
    outer.chmod(0o755)
    return outer


def install_with(tmp_path: Path, uv_exit: int) -> str:
    """Run scripts/install-venv.sh with the stand-in python and a `uv` on PATH exiting so."""
    folder = tmp_path / "bin"
    folder.mkdir()
    uv = folder / "uv"
    uv.write_text(f'#!/bin/sh\necho "uv $*" >> {tmp_path / "calls.log"}\nexit {uv_exit}\n')
    uv.chmod(0o755)
    env = dict(os.environ, PATH=f"{folder}:/usr/bin:/bin")
    env.pop("GPULEDGER_NO_UV", None)
    done = subprocess.run(["sh", str(ROOT / "scripts" / "install-venv.sh"), str(fake_python(tmp_path)),
                           str(tmp_path / "venv")], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return (tmp_path / "calls.log").read_text()


def test_uv_installs_when_it_can(tmp_path):
    calls = install_with(tmp_path, uv_exit=0)
    assert "host -m venv --without-pip" in calls
    assert "uv pip install --compile-bytecode --python" in calls and "-e .[test]" in calls
    assert "pip install" not in calls.replace("uv pip install", "")
    assert "python -m compileall" in calls  # gpuledger's own packages, for every process started


def test_pip_installs_when_uv_fails(tmp_path):
    calls = install_with(tmp_path, uv_exit=2)
    assert "uv pip install --compile-bytecode --python" in calls
    assert "python -m pip install --disable-pip-version-check --progress-bar on -e .[test]" in calls


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
    lines = (ROOT / "Makefile").read_text().splitlines()
    recipe = lines[lines.index("test:") + 1]  # the installs, side by side, before pytest
    assert "-j3" in recipe and "browser" in recipe.split() and "$(STAMP)" in recipe
