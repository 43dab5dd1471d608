"""What a running `gpuledger up` printed, kept in `<data dir>/env` for the CLI and for shells.

`up` writes the lines it prints (`GPULEDGER_NATS_URL=...`, `GPULEDGER_METRICS=...`, ...) to this
file, readable by its owner only (the URLs may hold passwords). A CLI command given neither
`--nats-url` nor `GPULEDGER_NATS_URL` reads the URL from here, so `gpuledger claim list` just
works beside `make run`; a shell can load every line with `set -a; . .gpuledger/env; set +a`.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_FILE = "env"


def data_dir() -> Path:
    return Path(os.environ.get("GPULEDGER_DATA_DIR") or ".gpuledger")


def write_env(directory: Path, lines: list[tuple[str, str]]) -> Path:
    path = Path(directory) / ENV_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.writelines(f"{name}={value}\n" for name, value in lines)
    os.chmod(path, 0o600)  # an older file keeps its mode through O_TRUNC
    return path


def read_env(directory: Path | None = None) -> dict[str, str]:
    """NAME=value lines of the env file; {} when there is none (no `up` ran here)."""
    path = (directory or data_dir()) / ENV_FILE
    try:
        text = path.read_text()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    return {name.strip(): value.strip() for name, value in pairs}

