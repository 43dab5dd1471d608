"""`gpuledger up --cluster 3` (issue 16, "the distributed engine under fault": a three-server
cluster started by a documented option of `up`): three nats-servers on loopback ports, the
streams at R3, users on; a publisher's claim is allocated and bound by the real stack, and no
server logged a permissions violation."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import nats
import pytest

from schemas import subjects
from shared.natscluster import connect_args
from tests.trust_edge import test_up_auth as up_auth

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


class ClusterStack(up_auth.AuthStack):
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.proc = subprocess.Popen([str(up_auth.BIN), "up", "--demo", "--fleet", "1xH100x8", "--cluster", "3",
                                      "--no-dashboard", "--data-dir", str(data_dir)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines = {}
        while "GPULEDGER_PUBLISHER_URL" not in self.lines:
            line = self.proc.stdout.readline().strip()
            if "=" not in line:
                self.proc.kill()
                raise AssertionError(f"up printed {line!r}; stderr: {self.proc.stderr.read()}")
            name, value = line.split("=", 1)
            self.lines[name] = value

    def violations(self) -> list[str]:
        logs = (self.data_dir / "nats-cluster").glob("*/nats-server.log")
        return [line for log in logs for line in log.read_text().splitlines() if "violation" in line.lower()]


async def replicas(url: str) -> dict[str, int]:
    nc = await nats.connect(**connect_args(url))
    try:
        js = nc.jetstream()
        return {s: (await js.stream_info(s)).config.num_replicas for s in (subjects.STREAM, subjects.INTAKE_STREAM)}
    finally:
        await nc.close()


def test_up_runs_a_three_server_cluster_with_r3_streams_and_the_claim_path_works(tmp_path):
    stack = ClusterStack(tmp_path / "data")
    try:
        ops_url, publisher_url = stack.lines["GPULEDGER_NATS_URL"], stack.lines["GPULEDGER_PUBLISHER_URL"]
        assert ops_url.count("nats://") == 3, ops_url  # every server of the cluster
        assert asyncio.run(replicas(ops_url)) == {subjects.STREAM: 3, subjects.INTAKE_STREAM: 3}
        claim = {"claim_id": "cluster-1", "namespace": "team-a", "gpus": 2, "models": ["H100"]}
        asyncio.run(up_auth.submit_as_publisher(publisher_url.split(",")[0], claim))
        bound = asyncio.run(up_auth.outcome_of(publisher_url.split(",")[0], "cluster-1", {"bound"}))
        assert len(bound["devices"]) == 2
        assert json.loads(stack.cli("claim", "get", "cluster-1", "--json"))["status"] == "bound"
        assert stack.violations() == []
    finally:
        stack.stop()
    assert stack.proc.returncode == 0
