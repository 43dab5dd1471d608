"""`gpuledger simulate --live`: a tiny openb-format trace through real services on a real nats-server."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from gpuledger_cli.main import app
from shared.natsserver import free_port
from simulator.cluster import claim_spec
from simulator.live import LiveError, LiveOptions, replay_live
from simulator.live_plan import RUN_LABEL, PlanError, arrivals
from simulator.trace import read_trace
from tests.service.helpers import running
from tests.simulator.conftest import NODE_HEADER, POD_HEADER, pod_line

RUN = "live-test0001"


@pytest.fixture
def tiny_trace(write):
    """4 nodes (one of a model outside the catalogue) and 15 pods: shares, whole cards, CPU only,
    a model constraint, one that can never fit (8 GPUs), one that never ends and one that ends as
    it starts (released as soon as it is placed)."""
    nodes = write("nodes.csv", NODE_HEADER, ["n0,32000,131072,4,G2", "n1,32000,131072,4,G2",
                                            "n2,16000,65536,2,T4", "n3,16000,65536,1,A10"])
    shapes = [dict(u=500), dict(k=2), dict(k=0, u=0, cpu=4000), dict(u=300, spec="T4"), dict(k=1)]
    lines = [pod_line(f"p{i:02d}", created=10 * i, deleted=10 * i + 35, **shapes[i % len(shapes)])
             for i in range(12)]
    lines += [pod_line("p-huge", k=8, created=50, deleted=60), pod_line("p-forever", u=250, created=60, deleted=""),
              pod_line("p-instant", u=100, created=70, deleted=70)]
    return read_trace(nodes, write("pods.csv", POD_HEADER, lines))


# --- the timetable ------------------------------------------------------------------------------


def test_arrivals_are_the_simulators_claims_confined_to_the_runs_nodes(tiny_trace):
    plan = arrivals(tiny_trace, RUN, speed=100)
    by_pod = {a.pod.name: a for a in plan}
    for i, arrival in enumerate(plan):
        assert arrival.claim.claim_id == f"{RUN}-{i}"
        expected = claim_spec(arrival.pod, arrival.claim.claim_id)
        assert arrival.claim.node_selector == {RUN_LABEL: RUN}
        assert (arrival.claim.gpus, arrival.claim.gpu_milli, arrival.claim.models, arrival.claim.cpu_milli) == \
            (expected.gpus, expected.gpu_milli, expected.models, expected.cpu_milli)
    assert [a.at for a in plan] == sorted(a.at for a in plan)
    assert by_pod["p03"].at == pytest.approx(0.3) and by_pod["p03"].lifetime == pytest.approx(0.35)
    assert by_pod["p-forever"].lifetime is None


def test_limit_takes_the_first_pods_by_creation_and_max_gap_shortens_idle_waits(tiny_trace):
    plan = arrivals(tiny_trace, RUN, speed=1, limit=3, max_gap=0.5)
    assert [a.pod.name for a in plan] == ["p00", "p01", "p02"]
    assert [a.at for a in plan] == [0.0, 0.5, 1.0]
    assert plan[0].lifetime == 35  # lifetimes are not shortened by the gap cap


@pytest.mark.parametrize("options, field", [(dict(speed=0), "--speed"), (dict(speed=float("nan")), "--speed"),
                                            (dict(speed=10, limit=0), "--limit"),
                                            (dict(speed=10, max_gap=-1), "--max-gap"),
                                            (dict(speed=10, node_prefix="Bad prefix"), "--node-prefix")])
def test_bad_options_name_the_option(tiny_trace, options, field):
    with pytest.raises(PlanError, match=field):
        arrivals(tiny_trace, RUN, **options)


# --- through the running system -----------------------------------------------------------------


async def test_live_replay_allocates_binds_and_releases_every_claim(fresh_nats, tiny_trace):
    # A node timeout shorter than the run: the fleet's heartbeats must keep the nodes alive.
    async with running(fresh_nats.url, "claim", "allocator", node_timeout_s=3.0) as (claims, _):
        report = await replay_live(tiny_trace, fresh_nats.url, run_id=RUN,
                                   options=LiveOptions(speed=100, drain_s=4.0, heartbeat_s=0.5))
        state = claims.claims.state
        ours = {cid: c for cid, c in state.claims.items() if cid.startswith(f"{RUN}-")}

    assert report.claims_submitted == report.claims_accepted == len(ours) == 15
    assert report.claims_rejected == report.claims_undecided == report.claims_ended_by_system == 0
    # every claim was allocated, except the 8-GPU one, pending with its reason
    assert report.claims_allocated == 14 and report.claims_pending == 1
    assert sum(report.pending_reasons.values()) == 1 and all(report.pending_reasons)
    huge = next(c for c in ours.values() if c.spec.workload == "p-huge")
    assert huge.reasons and huge.status == "released"
    # bound by the simulated agents, latencies measured and sane
    assert report.claims_bound == 14
    for key in ("submit_to_allocated_p50_ms", "submit_to_allocated_p99_ms", "submit_to_bound_p50_ms"):
        assert getattr(report, key) is not None and getattr(report, key) >= 0
    assert report.submit_to_allocated_p99_ms >= report.submit_to_allocated_p50_ms
    assert report.claims_per_s > 0
    # released at their lifetime, the rest at the end: nothing of the run still holds anything
    assert report.released_at_lifetime >= 1
    assert report.released_at_lifetime + report.released_at_end == 15 and report.release_failures == 0
    assert {c.status for c in ours.values()} == {"released"}
    # the nodes: registered with the trace's shapes under the prefix, alive throughout
    node = state.nodes["live-n0"]
    assert (len(node.units), {u.model for u in node.units}, node.cpu_total) == (4, {"G2"}, 32000)
    assert {u.model for u in state.nodes["live-n3"].units} == {"A10"}
    assert node.labels[RUN_LABEL] == RUN and not any(n.lost for n in state.nodes.values())


async def test_unreachable_nats_is_one_clear_error(tiny_trace):
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(LiveError, match="cannot reach NATS at " + url):
        await replay_live(tiny_trace, url, LiveOptions(speed=100, connect_timeout_s=1))


async def test_a_server_without_the_services_is_named(fresh_nats, tiny_trace):
    with pytest.raises(LiveError, match="no claim service answers"):
        await replay_live(tiny_trace, fresh_nats.url, LiveOptions(speed=100, connect_timeout_s=1))


# --- the command line ---------------------------------------------------------------------------


def _cli(*args: str):
    return CliRunner().invoke(app, ["simulate", *args])


def test_cli_errors_are_one_line_naming_the_problem(write, tiny_trace, tmp_path):
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    bad_pods = write("bad.csv", "name,cpu", ["p,1"])
    url = f"nats://127.0.0.1:{free_port()}"
    cases = [
        (["--live", "--speed", "0"], "--speed: must be a positive number"),
        (["--live", "--speed", "1e3", "--limit", "5", "--node-prefix", "UP"], "--node-prefix"),
        (["--speed", "10"], "--speed: applies to --live"),
        (["--live", "--dynamic"], "pick one"),
        (["--live", "--policy", "fgd", "--policy", "bestfit"], "--policy"),
        (["--live", "--pods", str(bad_pods)], "header"),
        (["--live", "--nats-url", url], f"cannot reach NATS at {url}"),
    ]
    for args, message in cases:
        pods_args = [] if "--pods" in args else ["--pods", str(pods)]
        result = _cli("--nodes", str(nodes), *pods_args, *args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.e2e
def test_without_a_url_it_starts_the_system_and_prints_json_last(write, tmp_path, monkeypatch):
    monkeypatch.delenv("GPULEDGER_NATS_URL", raising=False)
    nodes = write("n.csv", NODE_HEADER, ["n0,32000,131072,4,G2", "n1,16000,65536,2,T4"])
    pods = write("p.csv", POD_HEADER, [pod_line(f"p{i}", u=500, created=10 * i, deleted=10 * i + 30)
                                       for i in range(8)])
    result = _cli("--live", "--nodes", str(nodes), "--pods", str(pods), "--speed", "100", "--drain", "20", "--json")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output.strip().splitlines()[-1])
    assert figures["claims_submitted"] == figures["claims_accepted"] == 8, result.output
    assert figures["claims_submitted"] == figures["claims_allocated"] == figures["claims_bound"] == 8, result.output
    assert figures["released_at_lifetime"] + figures["released_at_end"] == 8
    assert 0 <= figures["submit_to_allocated_p50_ms"] <= figures["submit_to_allocated_p99_ms"]
    assert figures["claims_per_s"] > 0 and re.fullmatch(r"nats://(ops:\*\*\*@)?127\.0\.0\.1:\d+", figures["nats_url"])


@pytest.mark.parametrize("url, shown", [
    ("nats://ops:s3cret@127.0.0.1:4222", "nats://ops:***@127.0.0.1:4222"),
    ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
    ("nats://a:b@h1:1,nats://a:b@h2:2", None),  # a cluster list: no password survives either way
])
def test_a_report_never_prints_a_password(url, shown):
    from simulator.live_report import without_password

    got = without_password(url)
    assert "s3cret" not in got and ":b@" not in got
    if shown is not None:
        assert got == shown
