"""Names and specs the CLI turns into NATS users and processes are checked where they are typed.
`nats config --node 'GPU 1'` made a user `node-GPU_1` that no agent connects as (an agent calls
that node `gpu-1`), and `up --fleet garbage` ended in a traceback from deep inside."""

from __future__ import annotations

import pytest

from tests.cli import invoke


@pytest.mark.parametrize("args,option", [(["nats", "config", "--node"], "--node"),
                                         (["up", "--data-dir", "/nonexistent/x", "--agent-node"], "--agent-node")])
@pytest.mark.parametrize("name,agent", [("GPU 1", "gpu-1"), ("ip-10.ec2.internal", "ip-10-ec2-internal"),
                                        ("a_b", "a-b")])
def test_a_node_name_no_agent_would_use_is_refused_naming_the_one_it_would(args, option, name, agent):
    done = invoke(*args, name)
    assert done.returncode == 2, done
    assert f"Invalid value for '{option}': {name!r} is not a node name" in done.stderr
    assert f"calls its node {agent!r}: use that" in done.stderr


def test_a_node_name_an_agent_uses_is_taken():
    done = invoke("nats", "config", "--users-only", "--node", "gpu-7")
    assert done.returncode == 0 and "node-gpu-7" in done.stdout


def test_a_bad_fleet_spec_is_a_usage_error_not_a_traceback():
    done = invoke("up", "--demo", "--fleet", "garbage", "--data-dir", "/nonexistent/x")
    assert done.returncode == 2 and "Invalid value for '--fleet': fleet group 'garbage'" in done.stderr
    assert "Traceback" not in done.stderr
