"""Where a node's cap of live claims comes from (ledger/node_claims.py), first set wins: the node's
label `gpuledger.io/max-claims`, the lowest `max_claims_per_node` of the pools its devices are in,
the fleet default (FleetDefaultsSet, `gpuledger pool defaults`), else 110 + 10 per device. Pools
and the fleet default are in the log, so every fold (allocator, claim service, `gpuledger state`)
gives a node the same cap; bad values are refused naming the field."""

from __future__ import annotations

import json

import msgspec
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.authority import admits
from schemas.commands import CreatePool, Query, SetFleetDefaults
from schemas.types import PoolSpec
from ledger import node_claims
from ledger.snapshot import from_snapshot, to_snapshot
from services.pool_controller.decisions import Append, decide_fleet_defaults
from services.pool_controller.manifest import ManifestError, pool_from_document
from tests.fleet import Ledger, claim, h100_node

CAP = node_claims.LABEL


def cap(ledger: Ledger, node: str) -> int:
    return ledger.state.nodes[node].view.static.max_claims


def allocated(decisions) -> dict[str, str]:
    return {d.claim_id: d.node for d in decisions if isinstance(d, ev.ClaimAllocated)}


def cpu_claim(claim_id: str, node: str) -> ev.ClaimSubmitted:
    return claim(claim_id, gpus=0, cpu_milli=1, node_selector={"name": node})


def test_label_then_pool_then_fleet_default_then_the_formula():
    ledger = Ledger()
    ledger.append(h100_node("plain", labels={"name": "plain"}),
                  h100_node("labelled", labels={"name": "labelled", "pool": "yes", CAP: "7"}),
                  h100_node("pooled", labels={"name": "pooled", "pool": "yes"}))
    assert [cap(ledger, n) for n in ("plain", "labelled", "pooled")] == [190, 7, 190]
    ledger.append(ev.FleetDefaultsSet(max_claims_per_node=40))
    assert [cap(ledger, n) for n in ("plain", "labelled", "pooled")] == [40, 7, 40]
    ledger.append(ev.PoolCreated(pool=PoolSpec(name="p", node_selector={"pool": "yes"}, max_claims_per_node=12)))
    assert [cap(ledger, n) for n in ("plain", "labelled", "pooled")] == [40, 7, 12]
    ledger.append(ev.FleetDefaultsSet(max_claims_per_node=0))  # unset: the formula again
    assert [cap(ledger, n) for n in ("plain", "labelled", "pooled")] == [190, 7, 12]
    ledger.append(ev.PoolDeleted(pool="p"))
    assert [cap(ledger, n) for n in ("plain", "labelled", "pooled")] == [190, 7, 190]


def test_a_node_in_two_pools_takes_the_lower_cap_and_a_pool_without_one_sets_none():
    ledger = Ledger()
    ledger.append(ev.PoolCreated(pool=PoolSpec(name="first", max_devices_per_node=2, max_claims_per_node=30)),
                  ev.PoolCreated(pool=PoolSpec(name="second", max_devices_per_node=2, max_claims_per_node=20)),
                  ev.PoolCreated(pool=PoolSpec(name="rest")),  # no cap: it does not lower the others
                  ev.FleetDefaultsSet(max_claims_per_node=50), h100_node("n"))
    assert {u.pool for u in ledger.state.nodes["n"].units} == {"first", "second", "rest"}
    assert cap(ledger, "n") == 20
    assert node_claims.max_claims([], {}, pool_caps=[0, 0], fleet=0) == 110


def test_the_fleet_default_is_placed_by_and_survives_a_snapshot():
    ledger = Ledger()
    ledger.append(h100_node("a", labels={"name": "a"}), ev.FleetDefaultsSet(max_claims_per_node=2))
    ledger.append(*[cpu_claim(f"c{i}", "a") for i in range(3)])
    assert sorted(allocated(ledger.decide(1.0))) == ["c0", "c1"]
    assert [r.code for r in ledger.state.claims["c2"].reasons][0] == "node-claims-full"
    restored = from_snapshot(to_snapshot(ledger.state))
    assert restored.fleet_max_claims == 2 and restored.nodes["a"].view.static.max_claims == 2
    ledger.append(ev.FleetDefaultsSet(max_claims_per_node=3))  # raising it lets the waiting claim in
    assert allocated(ledger.decide(2.0)) == {"c2": "a"}


def test_the_fleet_default_is_the_pool_controllers_to_write():
    event = ev.FleetDefaultsSet(max_claims_per_node=5)
    assert admits(subjects.FLEET_DEFAULTS, event)
    assert not admits(subjects.pool("gpu"), event) and not admits(subjects.DEFAULT_QUOTA, event)


def test_setting_the_fleet_default_appends_once_and_names_the_field_of_a_bad_value():
    ledger = Ledger()
    outcome = decide_fleet_defaults(ledger.state, SetFleetDefaults(max_claims_per_node=64), now=1.0)
    assert isinstance(outcome, Append) and outcome.subject == subjects.FLEET_DEFAULTS
    assert outcome.event.max_claims_per_node == 64 and outcome.reply.data["changed"] is True
    ledger.append(outcome.event)
    again = decide_fleet_defaults(ledger.state, SetFleetDefaults(max_claims_per_node=64), now=2.0)
    assert again.ok and again.data == {"max_claims_per_node": 64, "changed": False}
    for bad in (-1, 1001, "lots", 2.5):
        with pytest.raises(msgspec.ValidationError, match=r"max_claims_per_node"):
            msgspec.json.decode(json.dumps({"max_claims_per_node": bad}), type=SetFleetDefaults)


@pytest.mark.parametrize("value, problem", [(1001, "<= 1000"), (-3, ">= 0"), ("ten", "Expected `int`")])
def test_a_pools_cap_out_of_range_is_refused_naming_the_field(value, problem):
    with pytest.raises(ManifestError) as refused:
        pool_from_document({"apiVersion": "gpu.gpuledger.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": "p"},
                            "spec": {"allocation": {"maxClaimsPerNode": value}}})
    assert refused.value.field.endswith("max_claims_per_node") and problem in str(refused.value)
    with pytest.raises(msgspec.ValidationError, match=r"pool.max_claims_per_node"):
        msgspec.json.decode(json.dumps({"pool": {"name": "p", "max_claims_per_node": value}}), type=CreatePool)
    assert pool_from_document({"name": "p", "max_claims_per_node": 250}).max_claims_per_node == 250


async def test_the_pool_controller_sets_and_shows_the_fleet_default(fresh_nats):
    """Over NATS, as `gpuledger pool defaults` asks: set, show, no-op, bad value."""
    from services.pool_controller.app import build
    from shared import rpc
    from shared.service import start_service, stop_service
    from shared.settings import Settings
    from tests.cli import run_cli

    ctx = await start_service("pool-controller", Settings(nats_url=fresh_nats.url), build)
    try:
        shown = await rpc.call(ctx.nc, subjects.query("pool.defaults.get"), Query())
        assert shown.ok and shown.data == {"max_claims_per_node": 0}
        cli = await run_cli("pool", "defaults", "--max-claims-per-node", "300", "--nats-url", fresh_nats.url)
        assert cli.returncode == 0 and "max claims per node: 300" in cli.stdout, cli.stderr
        again = await run_cli("pool", "defaults", "--max-claims-per-node", "300", "--nats-url", fresh_nats.url)
        assert "(unchanged)" in again.stdout
        listed = await run_cli("pool", "defaults", "--json", "--nats-url", fresh_nats.url)
        assert json.loads(listed.stdout)["max_claims_per_node"] == 300
        raw = await ctx.nc.request(subjects.command("pool.defaults.set"), b'{"max_claims_per_node": 5000}', timeout=5)
        reply = json.loads(raw.data)
        assert reply["ok"] is False and reply["error"]["field"] == "max_claims_per_node"
        too_big = await run_cli("pool", "defaults", "--max-claims-per-node", "1001", "--nats-url", fresh_nats.url)
        assert too_big.returncode != 0 and "--max-claims-per-node" in too_big.stderr
        stored = [s.event async for s in ctx.log.read(subject=subjects.FLEET_DEFAULTS)]
        assert [e.max_claims_per_node for e in stored] == [300]
    finally:
        await stop_service(ctx)
