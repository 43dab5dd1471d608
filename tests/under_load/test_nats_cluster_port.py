"""A cluster of nats-servers whose route or monitoring port another process bound first: the
cluster starts on other ports instead of failing with "a server exited" (`gpuledger up --cluster`
and the cluster tests start their servers on ports found free a moment before)."""

from __future__ import annotations

import socket

import shared.natscluster as natscluster
from shared.natscluster import start_nats_cluster


def test_a_cluster_port_taken_before_its_server_bound_it_is_replaced(tmp_path, monkeypatch):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        picks = iter([taken])  # the first server's client port
        real = natscluster.free_port
        monkeypatch.setattr(natscluster, "free_port", lambda: next(picks, None) or real())
        cluster = start_nats_cluster(tmp_path / "cluster", size=3)
        try:
            assert taken not in {p for node in cluster.nodes for p in (node.port, node.route_port, node.http_port)}
            assert all(node.alive and node.healthy() for node in cluster.nodes)
        finally:
            cluster.stop()
