"""Run the Node.js side of the contract tests (tests/contract/js): ajv, the AsyncAPI parser and the
npm `nats` client, as a publisher in another language uses them.

`make test` installs the package (npm ci) before pytest runs. Where node or the installed package
is missing the Node tests skip, naming what is missing; CI machines have both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

JS = Path(__file__).parent / "js"
REPO = Path(__file__).resolve().parents[2]
_NEEDED = ("ajv", "@asyncapi/parser", "nats")


def missing() -> str:
    """What keeps the Node tests from running here ("" when nothing)."""
    if shutil.which("node") is None:
        return "node is not installed (apt-get install nodejs npm)"
    absent = [p for p in _NEEDED if not (JS / "node_modules" / p / "package.json").exists()]
    if absent:
        return (f"npm packages {', '.join(absent)} are not installed: run "
                f"`npm ci --no-audit --no-fund --prefix tests/contract/js` (make test does)")
    return ""


def require_node() -> None:
    reason = missing()
    if reason:
        pytest.skip(f"Node.js contract test skipped: {reason}")


def run_node(script: str, *args: str, stdin: object = None, env: dict | None = None,
             timeout: float = 120.0) -> object:
    """Run `node js/<script> args...`, feed `stdin` as JSON, return its stdout parsed as JSON."""
    require_node()
    result = subprocess.run(
        ["node", str(JS / script), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
        input=None if stdin is None else json.dumps(stdin), env={**os.environ, **(env or {})})
    if result.returncode != 0:
        raise AssertionError(f"node {script} failed ({result.returncode}):\n{result.stderr}\n{result.stdout}")
    return json.loads(result.stdout.strip().splitlines()[-1])
