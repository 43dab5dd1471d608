"""The nats-server `gpuledger up` embeds runs with a quarter of the machine's CPUs as Go
processors, at least one (shared.natsserver.server_env): on a 2-core machine shared with the whole
stack, one processor cost it less CPU per message than a processor per CPU. GOMAXPROCS set in the
environment wins; a server started for anything else keeps Go's default."""

from __future__ import annotations

import os

from shared.natsserver import server_env, start_nats_server


def _environ_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
    return {key.decode(): value.decode() for key, value in pairs}


def test_the_embedded_server_gets_a_quarter_of_the_cpus_as_go_processors(tmp_path, monkeypatch):
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    server = start_nats_server(tmp_path / "nats", share_machine=True)
    other = start_nats_server(tmp_path / "other")
    try:
        expected = str(max(1, (os.cpu_count() or 1) // 4))
        assert _environ_of(server.process.pid).get("GOMAXPROCS") == expected
        assert "GOMAXPROCS" not in _environ_of(other.process.pid)
    finally:
        server.stop()
        other.stop()


def test_gomaxprocs_from_the_environment_wins_and_the_share_has_a_floor():
    assert server_env({"GOMAXPROCS": "3"}, cpus=2)["GOMAXPROCS"] == "3"
    assert server_env({}, cpus=2)["GOMAXPROCS"] == "1"
    assert server_env({}, cpus=16)["GOMAXPROCS"] == "4"
    assert server_env({"PATH": "/bin"}, cpus=1) == {"PATH": "/bin", "GOMAXPROCS": "1"}
