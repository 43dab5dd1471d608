"""Headless Chromium (Debian's `chromium`) as the tests' eyes: screenshots and the DOM after
scripts ran. The Makefile installs it when it can; without it the browser tests skip, saying so."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; `make test` tries "
                    "when run as root): the dashboard's browser tests need it")
    return found


def _run(*args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:  # a fresh profile every time
        done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise AssertionError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


def screenshot(url: str, out: Path, width: int = 1400, height: int = 1000) -> Path:
    _run(f"--window-size={width},{height}", f"--screenshot={out}", url)
    assert out.exists() and out.stat().st_size > 0, f"no screenshot written for {url}"
    return out


def dom(url: str) -> str:
    return _run("--dump-dom", url).stdout


def pixels_of(png: Path, colour: str, tolerance: int = 6) -> int:
    """How many pixels of the screenshot have this colour (#rrggbb), give or take `tolerance` per
    channel (anti-aliased edges aside, a card's fill is exactly its colour)."""
    from PIL import Image

    want = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    image = Image.open(png).convert("RGB")
    return sum(count for count, rgb in image.getcolors(maxcolors=1 << 24)
               if all(abs(a - b) <= tolerance for a, b in zip(rgb, want)))
