"""`gpuledger up` twice on one data dir prints the same URLs, `--port` chooses and is remembered,
`--no-dashboard` leaves the dashboard out, and the CLI finds the running stack through DATA_DIR/env
with no URL given at all."""

from __future__ import annotations

import json
import os

import pytest

from gpuledger_cli.ports import PortBook
from gpuledger_cli.stack_env import read_env
from tests.ops_ux.stack import Stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def test_restarts_keep_every_url_and_the_cli_needs_none(tmp_path):
    data = tmp_path / "data"
    first = Stack(data)
    try:
        env = {k: v for k, v in os.environ.items() if k != "GPULEDGER_NATS_URL"}
        env["GPULEDGER_DATA_DIR"] = str(data)
        listed = first.cli("claim", "list", "--json", env=env)  # no --nats-url, no variable
        assert json.loads(listed.stdout) == []
    finally:
        first.stop()
    # a restart choosing its port, without the dashboard; then a plain one (three starts, not four:
    # each costs about 6.5 s of CPU)
    # a port free now, none of this stack's remembered ones, and reserved (gpuledger_cli/ports.py)
    # until `up` listens on it: a fixed one, or one only free now, may be taken meanwhile by a
    # stack another test (or worker) is starting
    picker = PortBook(data)
    chosen = picker.take("chosen-by-the-test")
    second = Stack(data, "--port", str(chosen), "--no-dashboard",
                   wanted=("GPULEDGER_NATS_URL", "GPULEDGER_PUBLISHER_URL"))
    picker.release()
    second.stop()
    assert set(read_env(data)) == {"GPULEDGER_NATS_URL", "GPULEDGER_PUBLISHER_URL"}  # no dashboard, no metrics
    assert second.url.endswith(f":{chosen}")
    assert second.url.rsplit(":", 1)[0] == first.url.rsplit(":", 1)[0]  # same users and passwords
    third = Stack(data)
    third.stop()
    # every URL printed again as remembered: the chosen port kept, the dashboard's and metrics' from the first run
    assert set(third.lines) == set(first.lines)
    for name, value in third.lines.items():
        assert value == second.lines.get(name, first.lines[name]), name
