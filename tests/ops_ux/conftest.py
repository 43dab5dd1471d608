"""One demo stack shared by the operator tests (starting one costs tens of seconds)."""

from __future__ import annotations

import pytest

from tests.ops_ux.stack import Stack


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("ops-demo") / "data")
    yield stack
    stack.stop()
