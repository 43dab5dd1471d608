"""The configuration variables README.md lists are checked where they are read (session 29's
outsider). `float()` takes `nan`, `inf` and `-1`, and an interval of 0 or less made a loop spin:
GPULEDGER_HEARTBEAT_S=0 had every simulated node agent append heartbeats to the log as fast as it
could, GPULEDGER_TICK_S=0 the allocator run timer passes back to back; GPULEDGER_STREAM_REPLICAS=inf
ended in an OverflowError traceback, 1.5 was taken as 1. Now each stops the process at start with
one line naming the variable, and `gpuledger up` says it before it starts anything."""

from __future__ import annotations

import pytest

from shared.settings import Settings
from tests.cli import invoke

BAD = [("GPULEDGER_HEARTBEAT_S", "0", "> 0"), ("GPULEDGER_TICK_S", "-1", "> 0"),
       ("GPULEDGER_NODE_TIMEOUT_S", "nan", "> 0"), ("GPULEDGER_ENDPOINT_TICK_S", "inf", "> 0"),
       ("GPULEDGER_SLOT_TICK_S", "0", "> 0"), ("GPULEDGER_STALE_AFTER_S", "-5", ">= 0"),
       ("GPULEDGER_PENDING_EXPIRE_S", "-inf", ">= 0"), ("GPULEDGER_STREAM_REPLICAS", "inf", ">= 1"),
       ("GPULEDGER_STREAM_REPLICAS", "1.5", "whole number from 1 to 5"),
       ("GPULEDGER_STREAM_REPLICAS", "0", ">= 1"), ("GPULEDGER_METRICS_PORT", "70000", "from 0 to 65535"),
       ("GPULEDGER_SNAPSHOT_EVERY", "0", ">= 1"), ("GPULEDGER_INTAKE_MAX_MSGS", "0", ">= 1"),
       ("GPULEDGER_INTAKE_MAX_BYTES", "0", ">= 1"), ("GPULEDGER_TICK_S", "fast", "must be a number")]


@pytest.mark.parametrize("name, value, words", BAD)
def test_a_bad_value_stops_the_process_naming_the_variable(monkeypatch, name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        Settings()
    assert str(stopped.value).startswith(f"{name} must be a ") and words in str(stopped.value)
    assert repr(value) in str(stopped.value)


@pytest.mark.parametrize("name, value", [("GPULEDGER_HEARTBEAT_S", "0.5"), ("GPULEDGER_STALE_AFTER_S", "0"),
                                         ("GPULEDGER_STREAM_REPLICAS", "3"), ("GPULEDGER_STREAM_REPLICAS", "3.0"),
                                         ("GPULEDGER_KILL_UNALLOCATED_AFTER_S", "0"), ("GPULEDGER_TICK_S", " 2 ")])
def test_good_values_still_read(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    Settings()


def test_up_refuses_before_it_starts_anything(tmp_path):
    result = invoke("up", "--demo", "--data-dir", str(tmp_path / "data"), env={"GPULEDGER_HEARTBEAT_S": "0"})
    assert result.returncode == 1, result
    assert "GPULEDGER_HEARTBEAT_S must be a number > 0, got '0'" in result.stderr + result.stdout
    assert not (tmp_path / "data").exists()


def test_up_checks_them_with_system_given_too(tmp_path):
    result = invoke("up", "--data-dir", str(tmp_path / "data"), "--system", "billing:team-a",
                    env={"GPULEDGER_TICK_S": "0"})
    assert result.returncode == 1 and "GPULEDGER_TICK_S must be a number > 0" in result.stderr + result.stdout


def test_the_dashboard_alone_names_a_bad_port(monkeypatch):
    from services.dashboard.main import main

    monkeypatch.setenv("GPULEDGER_DASHBOARD_PORT", "http")
    with pytest.raises(SystemExit) as stopped:
        main()
    assert str(stopped.value) == "GPULEDGER_DASHBOARD_PORT must be a number, got 'http'"


def test_projection_status_of_a_data_folder_with_no_read_models_makes_no_file(tmp_path):
    """Session 29: it connected to the SQLite file that was not there, so made an empty database
    (in ./.gpuledger by default, which the next `up` there then found), and said only "no read
    models": a stack started with `up --data-dir DIR` keeps them in DIR."""
    result = invoke("projection", "status", env={"GPULEDGER_DATA_DIR": str(tmp_path / "data"), "GPULEDGER_DB_URL": None})
    assert result.returncode == 1, result
    assert "no such file" in result.stderr and "GPULEDGER_DATA_DIR=DIR" in result.stderr
    assert not (tmp_path / "data").exists()
