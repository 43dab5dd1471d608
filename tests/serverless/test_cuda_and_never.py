"""Issue 11 item 2: a group and CUDA version that can never meet are refused at once, and a claim
no node of the fleet could take even empty is told apart from one that waits."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.catalogue import cuda_allowed_for, cuda_conflict
from schemas.reasons import never_satisfiable_here
from schemas.types import ClaimSpec
from services.claim.validation import ClaimInvalid, validate_claim
from tests.fleet import Ledger, a100_mig_node, claim, h100_node


def spec(**fields) -> ClaimSpec:
    return ClaimSpec(claim_id="c", namespace="ns", **fields)


@pytest.mark.parametrize("fields, words", [
    ({"gpu_groups": ["ADA_80_PRO"], "cuda_versions": ["11.8"]},
     "ADA_80_PRO is Hopper, which runs CUDA 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.7, 12.8 "
     "(recommended 12.4+); cuda_versions allow only 11.8"),
    ({"gpu_groups": ["AMPERE_80", "HOPPER_141"], "cuda_versions": ["11.8"]}, "HOPPER_141 is Hopper"),
    ({"models": ["H100"], "cuda_versions": ["11.8"]}, "H100 is Hopper"),
    ({"gpu_groups": ["ADA_32_PRO"], "cuda_versions": ["12.4"]}, "ADA_32_PRO is Blackwell, which runs CUDA 12.8"),
])
def test_a_group_or_model_that_runs_none_of_the_cuda_versions_is_refused(fields, words):
    with pytest.raises(ClaimInvalid) as err:
        validate_claim(spec(**fields))
    assert err.value.field == "cuda_versions" and words in err.value.message


@pytest.mark.parametrize("fields", [
    {"gpu_groups": ["ADA_80_PRO"], "cuda_versions": ["11.8", "12.4"]},  # one version runs
    {"gpu_groups": ["any"], "cuda_versions": ["11.8"]},  # any picks the groups that run it
    {"gpu_groups": ["AMPERE_24"], "cuda_versions": ["11.8"]},  # L4 (Ada) and A5000 (Ampere) both do
    {"gpu_groups": ["HOPPER_141"]},  # no version asked: any driver
])
def test_a_group_that_runs_one_of_the_versions_is_accepted(fields):
    assert validate_claim(spec(**fields)).cuda_versions == fields.get("cuda_versions", [])


def test_the_mapping_follows_the_gpus_in_a_group_not_its_name():
    assert cuda_allowed_for("ADA_80_PRO") == cuda_allowed_for("HOPPER_141") == cuda_allowed_for("H100")
    assert cuda_allowed_for("AMPERE_80")[0] == "11.8"
    assert cuda_conflict("ADA_48_PRO", ["11.8"]) is None


def pending(decisions) -> dict[str, ev.ClaimPending]:
    return {d.claim_id: d for d in decisions if isinstance(d, ev.ClaimPending)}


@pytest.fixture
def ledger() -> Ledger:
    led = Ledger()
    led.append(h100_node("h0"), h100_node("h1"))  # 8 x H100 each, 128 cores, 1 TiB
    return led


@pytest.mark.parametrize("fields, words", [
    ({"gpus": 16, "models": ["H100"]}, "2 nodes lack 16 x H100"),
    ({"gpus": 1, "cpu_milli": 500_000}, "2 nodes lack 500000m CPU"),
    ({"gpus": 1, "models": ["A100"]}, "2 nodes have no A100 devices"),
    ({"gpus": 1, "node_selector": {"zone": "mars"}}, "2 nodes do not match node selector"),
])
def test_a_claim_no_node_could_take_even_empty_says_never_satisfiable_first(ledger, fields, words):
    ledger.append(claim("big", **fields))
    [why] = pending(ledger.decide(1.0)).values()
    first = why.reasons[0]
    assert first.code == "never-satisfiable" and words in first.message, why.reasons
    assert never_satisfiable_here([r.code for r in why.reasons])


def test_a_claim_that_fits_an_empty_node_only_waits(ledger):
    ledger.append(claim("all", gpus=8, models=["H100"]), claim("all2", gpus=8, models=["H100"]))
    ledger.decide(1.0)
    ledger.append(claim("more", gpus=8, models=["H100"]))
    why = pending(ledger.decide(2.0))["more"]
    codes = [r.code for r in why.reasons]
    assert "never-satisfiable" not in codes and codes[0] == "no-free-gpu"
    assert not never_satisfiable_here(codes)


def test_a_faulted_fleet_is_waited_out_not_never(ledger):
    faulted = [ev.DeviceHealthChanged(node=n, uuid=f"GPU-{n}-{i}", health="Faulted", at=0.5)
               for n in ("h0", "h1") for i in range(8)]
    ledger.append(*faulted, claim("c", gpus=1))
    why = pending(ledger.decide(1.0))["c"]
    assert [r.code for r in why.reasons][0] != "never-satisfiable"


def test_a_node_that_joins_makes_it_satisfiable(ledger):
    ledger.append(claim("big", gpus=1, models=["A100"]))
    assert pending(ledger.decide(1.0))["big"].reasons[0].code == "never-satisfiable"
    ledger.append(a100_mig_node("a0"))
    assert any(isinstance(d, ev.ClaimAllocated) for d in ledger.decide(2.0))


def test_a_gang_with_a_member_no_node_could_take_is_never_satisfiable(ledger):
    ledger.append(claim("g1", gpus=2, models=["H100"], gang_id="job", gang_size=2),
                  claim("g2", gpus=12, models=["H100"], gang_id="job", gang_size=2))
    decisions = pending(ledger.decide(1.0))
    for member in ("g1", "g2"):
        codes = [r.code for r in decisions[member].reasons]
        assert codes[:2] == ["never-satisfiable", "gang-unplaceable"], codes


def test_a_gang_that_only_waits_for_room_is_not_never_satisfiable(ledger):
    ledger.append(claim("hold", gpus=8, models=["H100"]))
    ledger.decide(1.0)
    ledger.append(claim("g1", gpus=8, models=["H100"], gang_id="job", gang_size=2),
                  claim("g2", gpus=8, models=["H100"], gang_id="job", gang_size=2))
    codes = [r.code for r in pending(ledger.decide(2.0))["g1"].reasons]
    assert codes[0] == "gang-unplaceable" and "never-satisfiable" not in codes


@pytest.mark.parametrize("members, words", [
    ([8, 8, 8], "its members take 24 whole GPUs together; the nodes that could take any of them have 16"),
    ([5, 5, 5], "3 members, and the nodes that could take them hold at most 2 at once"),
    ([1] * 3, None),  # fits: only waits, if at all
])
def test_a_gang_whose_members_each_fit_but_never_all_at_once_is_never_satisfiable(ledger, members, words):
    size = len(members)
    ledger.append(*[claim(f"g{i}", gpus=n, models=["H100"], gang_id="job", gang_size=size)
                    for i, n in enumerate(members)])
    decisions = ledger.decide(1.0)
    if words is None:
        assert sum(isinstance(d, ev.ClaimAllocated) for d in decisions) == size
        return
    for i in range(size):
        first = pending(decisions)[f"g{i}"].reasons[0]
        assert first.code == "never-satisfiable" and words in first.message, first


def test_a_gang_that_never_fits_waits_parked_until_the_fleet_grows(ledger):
    ledger.append(*[claim(f"g{i}", gpus=8, models=["H100"], gang_id="job", gang_size=3) for i in range(3)])
    ledger.decide(1.0)
    assert set(ledger.state.parked) == {"g0", "g1", "g2"}
    ledger.append(h100_node("h2"))
    assert sum(isinstance(d, ev.ClaimAllocated) for d in ledger.decide(2.0)) == 3


def test_a_gang_bounded_by_cpu_summed_over_its_nodes_is_never_satisfiable(ledger):
    ledger.append(*[claim(f"g{i}", gpus=1, cpu_milli=70_000, gang_id="job", gang_size=3) for i in range(3)])
    first = pending(ledger.decide(1.0))["g0"].reasons[0]
    assert first.code == "never-satisfiable" and "hold at most 2 at once" in first.message, first


@pytest.mark.parametrize("first, words", [
    ("even with nothing in use: quota exceeded in namespace q for vram", "under its namespace's quota"),
    ("gang job could never fit at once, even on an empty fleet: ...", "its gang could never fit at once"),
    ("no node of the fleet could take it even empty: 2 nodes lack 16 x H100", "no node could take it even empty"),
])
def test_the_cli_says_what_a_never_satisfiable_claim_waits_for(first, words):
    from gpuledger_cli.claims import _never_line

    assert words in _never_line([{"message": first}])
