"""A client's inbox prefix must be one the services answer on (shared.commands.answerable replies
only under `_INBOX`): a prefix outside it was taken silently, and every request made with it timed
out while only the serving side logged why. Now it is refused where it is read, naming the setting."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shared.commands import answerable
from shared.nats_auth import node_inbox, user_inbox
from shared.natscluster import INBOX_PREFIX_ENV, connect_args


def test_a_prefix_the_services_would_not_answer_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.setenv(INBOX_PREFIX_ENV, "myapp.replies")
    with pytest.raises(ValueError, match=f"{INBOX_PREFIX_ENV}='myapp.replies'.*must start with '_INBOX'"):
        connect_args("nats://127.0.0.1:4222")


@pytest.mark.parametrize("prefix", ["_INBOX", "_INBOX_system-billing", user_inbox("claim"),
                                    node_inbox("sim-h100-0")])
def test_every_prefix_gpuledger_sets_is_taken_and_answered(monkeypatch, prefix):
    monkeypatch.setenv(INBOX_PREFIX_ENV, prefix)
    assert connect_args("nats://127.0.0.1:4222")["inbox_prefix"] == prefix
    assert answerable(f"{prefix}.abc.1", "gpu.cmd.claim.submit")


def test_a_service_started_with_such_a_prefix_stops_at_once_with_one_line(monkeypatch):
    env = {"GPULEDGER_NATS_URL": "nats://127.0.0.1:1", INBOX_PREFIX_ENV: "myapp", "PATH": ""}
    done = subprocess.run([sys.executable, "-m", "gpuledger_cli.main", "service", "quota"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "GPULEDGER_NATS_INBOX_PREFIX='myapp'" in done.stderr
    assert "Traceback" not in done.stderr
