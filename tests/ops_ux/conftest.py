"""One demo stack shared by the operator tests (starting one costs tens of seconds)."""

from __future__ import annotations

import pytest

from tests.ops_ux.stack import Stack


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("ops-demo") / "data")
    yield stack
    stack.stop()


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
