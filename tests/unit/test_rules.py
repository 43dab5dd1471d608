"""The placement rules, table-driven: each case is a node view, a need and the claim's argument,
and says whether the rule passes or, failing, what it tells the user."""

from __future__ import annotations

import pytest

from ledger.state import FREE, NodeStatic, NodeView, UnitView
from services.allocator.core import rules
from services.allocator.core.demand import Need
from services.allocator.core.rules import RULES, Rule, first_failing, message, waiting_helps


def unit(model="H100", milli_free=FREE, holders=0, healthy=True, pool="", mig="", island=0, index=0):
    return UnitView(milli_free, holders, healthy, model, island, mig, pool, 0, 81559, index, -1)


def view(*units, cpu=64000, mem=1 << 20, labels=(("zone", "a"),), cuda="12.4") -> NodeView:
    units = units or (unit(), unit(index=1))
    models = tuple(sorted({u.model for u in units}))
    return NodeView(NodeStatic(models, labels, cuda, 128000, 1 << 20), cpu, mem, tuple(units))


def need(count=1, milli=FREE, models=frozenset({"H100"}), cpu=1000, mem=1024, pool="", mig=""):
    what = "/".join(sorted(models)) if models else "GPU"
    label = f"{count} x {what}" if milli >= FREE else f"{milli}m of {what}"
    return Need(count, milli, mig, cpu, mem, pool, models, label)


BUSY = unit(milli_free=0, holders=1)

# (rule code, case, view, need, the rule's argument, passes, the message for 2 nodes when it fails)
_CPU_FULL = ("2 nodes have as many live claims, or claims without devices, as they may hold (a node's cap: "
             "label gpuledger.io/max-claims, else its pools' or the fleet default, else 110 + 10 per device, "
             "at most 1000; claims without devices take at most the cap less 10 per device, and at least 110 "
             "where the cap keeps one claim a device beside them)")

CASES = [
    ("node-selector", "labels match", view(), need(), (("zone", "a"),), True, None),
    ("node-selector", "another value", view(), need(), (("zone", "b"),), False,
     "2 nodes do not match node selector {'zone': 'b'}"),
    ("node-selector", "label missing", view(labels=()), need(), (("zone", "a"),), False,
     "2 nodes do not match node selector {'zone': 'a'}"),
    ("no-such-gpu", "model present", view(), need(), None, True, None),
    ("no-such-gpu", "other model", view(), need(models=frozenset({"A100"})), None, False,
     "2 nodes have no A100 devices"),
    ("no-such-gpu", "model outside the pool", view(), need(pool="p1"), None, False,
     "2 nodes have no H100 devices in pool p1"),
    ("no-such-gpu", "CPU only needs no GPU", view(), need(count=0, models=None), None, True, None),
    ("cuda-incompatible", "driver new enough", view(cuda="12.8"), need(), ("12.4",), True, None),
    ("cuda-incompatible", "driver too old", view(cuda="12.2"), need(), ("12.4", "12.8"), False,
     "2 nodes have drivers without CUDA 12.4, 12.8"),
    ("cuda-incompatible", "CPU only ignores CUDA", view(cuda="11.0"), need(count=0, models=None),
     ("12.4",), True, None),
    ("gpu-unhealthy", "a healthy card", view(unit(healthy=False), unit(index=1)), need(), None, True, None),
    ("gpu-unhealthy", "all faulted", view(unit(healthy=False), unit(healthy=False, index=1)), need(),
     None, False, "2 nodes have only Faulted or Ignored matching devices"),
    ("host-resources", "room", view(), need(cpu=64000), None, True, None),
    ("host-resources", "CPU short", view(cpu=500), need(cpu=1000, mem=2048), None, False,
     "2 nodes lack 1000m CPU / 2048Mi memory"),
    ("host-resources", "memory short", view(mem=100), need(), None, False,
     "2 nodes lack 1000m CPU / 1024Mi memory"),
    ("no-free-gpu", "one free card", view(BUSY, unit(index=1)), need(), None, True, None),
    ("no-free-gpu", "all held", view(BUSY, BUSY), need(), None, False, "2 nodes lack a free H100"),
    ("no-free-gpu", "two wanted, one free", view(BUSY, unit(index=1)), need(count=2), None, False,
     "2 nodes lack 2 x H100"),
    ("no-free-gpu", "a share fits a shared card", view(unit(milli_free=600, holders=1), BUSY),
     need(milli=500), None, True, None),
    ("no-free-gpu", "a share too large", view(unit(milli_free=400, holders=1), BUSY), need(milli=500),
     None, False, "2 nodes lack 500m of H100"),
    # seed 001's policy: contiguous
    ("not-contiguous", "one island has room",
     view(unit(island=0), unit(island=0, index=1), unit(island=1, index=2)), need(count=2), True, True, None),
    ("not-contiguous", "room only across islands",
     view(unit(island=0), BUSY._replace(index=1), unit(island=1, index=2)), need(count=2), True, False,
     "2 nodes lack 2 free GPUs in one NVLink island (policy contiguous)"),
    ("not-contiguous", "one GPU is always contiguous", view(unit(island=0), unit(island=1, index=1)),
     need(count=1), True, True, None),
    # session 33: a node's cap of live claims and grants (ledger/node_claims.py)
    ("node-claims-full", "far from its cap", view(), need(count=2), True, True, None),
    ("node-claims-full", "room for the grants", view()._replace(claims_room=2), need(count=2), True, True, None),
    ("node-claims-full", "room for fewer grants", view()._replace(claims_room=1), need(count=2), True, False,
     "2 nodes have as many live claims (or device grants) as they may hold (a node's cap: label "
     "gpuledger.io/max-claims, else its pools' or the fleet default, else 110 + 10 per device, at most 1000)"),
    ("node-claims-full", "a CPU-only claim counts one", view()._replace(claims_room=0),
     need(count=0, models=None), True, False, _CPU_FULL),
    # session 34: claims without devices take at most the part of the cap the devices do not keep
    ("node-claims-full", "room, but not for claims without devices", view()._replace(grantless_room=False),
     need(count=0, models=None), True, False, _CPU_FULL),
    ("node-claims-full", "room for a GPU claim beside a full part for claims without devices",
     view()._replace(grantless_room=False), need(count=1), True, True, None),
]


def _args_with(code: str, arg) -> tuple:
    return tuple(arg if rule.code == code else None for rule in RULES)


@pytest.mark.parametrize("code, case, node, wanted, arg, passes, text", CASES,
                         ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_each_rule_passes_or_names_its_reason(code, case, node, wanted, arg, passes, text):
    rule = next(r for r in RULES if r.code == code)
    assert rule.check(node, wanted, arg) is passes
    if not passes:
        assert first_failing(node, wanted, _args_with(code, arg)) == code
        assert message(code, 2, wanted, _args_with(code, arg)) == text


def test_every_rule_has_a_case_that_passes_and_one_that_fails():
    for rule in RULES:
        outcomes = {passes for code, *_, passes, _ in CASES if code == rule.code}
        assert outcomes == {True, False}, rule.code


def test_the_codes_and_their_order_are_stable():
    # codes are in the log (ClaimPending reasons) and in users' scripts; the order decides which
    # reason a node is counted under
    assert [r.code for r in RULES] == ["node-selector", "no-such-gpu", "cuda-incompatible",
                                       "gpu-unhealthy", "host-resources", "no-free-gpu", "not-contiguous",
                                       "node-claims-full"]


def test_a_claim_that_leaves_an_argument_empty_is_not_checked_by_that_rule():
    args = _args_with("node-selector", ())
    assert first_failing(view(labels=()), need(), args) is None
    assert rules.placement_checks(args) == ()


def test_the_first_failing_rule_in_order_is_the_reason():
    node = view(BUSY, BUSY, labels=())
    args = _args_with("node-selector", (("zone", "a"),))
    assert first_failing(node, need(), args) == "node-selector"
    assert first_failing(node, need(), _args_with("node-selector", ())) == "no-free-gpu"


def test_fleet_static_rules_say_waiting_does_not_help():
    static = {r.code for r in RULES if not waiting_helps(r.code)}
    assert static == {"node-selector", "no-such-gpu", "cuda-incompatible"}
    assert waiting_helps("no-free-gpu") and waiting_helps(rules.RESERVED)
    assert waiting_helps("quota-exceeded")  # not a placement rule: usage drops


def test_a_message_for_one_node_agrees_in_number():
    assert message("no-free-gpu", 1, need(), _args_with("", None)) == "1 node lacks a free H100"
    assert message(rules.RESERVED, 1, need(), ()) == "1 node is held for an older waiting claim"


def test_rule_arguments_come_from_the_claim():
    from schemas.types import ClaimSpec

    from ledger.state import State

    spec = ClaimSpec(claim_id="c", namespace="n", node_selector={"zone": "a", "rack": "r1"},
                     cuda_versions=["12.8", "12.4"], policy="contiguous")
    args = rules.rule_args(spec, State())
    assert args == ((("rack", "r1"), ("zone", "a")), None, ("12.8", "12.4"), None, None, None, True, True)
    assert Rule("x", lambda *_: True, lambda *_: "").decided_by_pick is False  # new rules are checked
