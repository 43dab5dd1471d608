"""One-pass and dynamic runs on a small trace: the core's decide, determinism, outputs."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import services.allocator.core.decide as core_decide
import simulator.dynamic
import simulator.onepass
from gpuledger_cli.main import app
from simulator.cluster import trace_shapes
from simulator.dynamic import replay
from simulator.onepass import run_pass
from simulator.protocol import workload
from simulator.trace import read_trace
from tests.simulator.conftest import NODE_HEADER, POD_HEADER, pod_line


def test_the_simulator_runs_the_allocators_own_decide():
    assert simulator.onepass.decide is core_decide.decide
    assert simulator.dynamic.decide is core_decide.decide


def test_a_pass_is_deterministic_for_a_seed_and_accounts_every_pod(small_trace):
    trace = read_trace(*small_trace)
    work = workload(trace, 42)
    for policy in ("random", "bestfit", "fgd", "gpuledger"):
        one = run_pass(work, policy, trace_shapes(trace.pods))
        two = run_pass(work, policy, trace_shapes(trace.pods))
        assert one.allocated == two.allocated and one.failed == two.failed
        assert one.arrived[-1] == sum(p.gpu_demand for p in work.pods)
        assert one.allocated[-1] + sum(one.failed_milli.values()) == one.arrived[-1]
        assert one.allocated[-1] <= trace.capacity


def test_a_pod_that_fits_nowhere_is_dropped_and_counted_by_shape(write):
    nodes = write("n.csv", NODE_HEADER, ["n0,8000,65536,2,G2"])
    pods = write("p.csv", POD_HEADER, [pod_line("a", k=2), pod_line("b", k=1)])
    trace = read_trace(nodes, pods)
    work = workload(trace, 1, target=1.5)  # 3000 of 3000 milli: exactly the two pods, no copies
    result = run_pass(work, "bestfit", trace_shapes(trace.pods))
    assert sorted(p.name for p in work.pods) == ["a", "b"]
    assert sum(result.failed.values()) == 1 and result.allocated[-1] in (1000, 2000)


def test_dynamic_replay_queues_a_pod_until_a_departure_frees_room(write):
    nodes = write("n.csv", NODE_HEADER, ["n0,8000,65536,1,G2"])
    pods = write("p.csv", POD_HEADER, [pod_line("a", created=0, deleted=100),
                                       pod_line("b", created=10, deleted=60)])
    result = replay(read_trace(nodes, pods), "gpuledger")
    assert sorted(result.waits) == [0, 90]  # b waits from 10 until a leaves at 100
    assert result.never_placed == 0
    assert max(s[1] for s in result.samples) == 100.0


def test_cli_prints_json_per_policy(small_trace):
    nodes, pods = small_trace
    out = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds",
                                   "1-2", "--policy", "bestfit", "--policy", "gpuledger", "--json",
                                   "--workers", "1"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert set(data) == {"bestfit", "gpuledger"}
    assert set(data["bestfit"]["unalloc_100"]) >= {"mean", "sd"}
    # the paper's figures were measured on the default trace, not on this one
    assert data["bestfit"]["published"] is None


def test_cli_shows_the_published_figures_beside_the_trace_they_were_published_for(small_trace, tmp_path):
    from simulator.trace import DEFAULT_NODES, DEFAULT_PODS

    nodes, pods = small_trace
    (tmp_path / DEFAULT_NODES.name).write_bytes(nodes.read_bytes())
    (tmp_path / DEFAULT_PODS.name).write_bytes(pods.read_bytes())
    args = ["simulate", "--nodes", str(tmp_path / DEFAULT_NODES.name), "--pods",
            str(tmp_path / DEFAULT_PODS.name), "--seeds", "1", "--policy", "bestfit", "--workers", "1"]
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert data["bestfit"]["published"]["unalloc_100"]["mean"] == 7.14
    assert "7.14 ± 0.14" in CliRunner().invoke(app, args).stdout
    other = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1",
                                     "--policy", "bestfit", "--workers", "1"]).stdout
    assert "7.14" not in other


def test_cli_names_bad_input(small_trace, write):
    nodes, _ = small_trace
    bad = write("bad.csv", POD_HEADER, [pod_line("a", k=2, u=10)])
    out = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(bad)])
    assert out.exit_code == 2 and "gpu_milli" in out.output
    out = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(bad), "--policy", "nope"])
    assert out.exit_code == 2 and "unknown nope" in out.output


def test_cli_dynamic_and_plot(small_trace, tmp_path):
    nodes, pods = small_trace
    out = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--dynamic",
                                   "--policy", "fgd", "--json"])
    assert out.exit_code == 0, out.output
    assert {"pending_p50_s", "pending_p99_s", "mean_utilisation"} <= set(json.loads(out.stdout)["fgd"])
    png = tmp_path / "c.png"
    out = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "3",
                                   "--policy", "bestfit", "--plot", str(png), "--workers", "1"])
    assert out.exit_code == 0, out.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
