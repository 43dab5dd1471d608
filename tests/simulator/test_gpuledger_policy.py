"""gpuledger's policy: FGD's gradient plus the GPU a placement strands for lack of CPU.

Hand-checked cases where FGD alone ties (and so takes the first node in rank) and the stranding
term decides, and properties the placement code relies on: the CPU margin behind the memo shared
across CPU amounts, and the score ceiling behind the early stop of the rank-ordered scan.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.allocator.core.demand import Need
from ledger.shapes import TypicalShape, typical_shapes
from services.allocator.core.policy import PlacementContext
from services.allocator.core.model_mismatch import bound_shape_weights
from services.allocator.core.scorers import (STRAND_CARDS, cpu_stranded, get_policy,
                                             gpu_pods_cpu_per_milli)
from ledger.state import FREE
from simulator.cluster import cluster_state
from tests.fleet import Ledger, a100_mig_node, claim
from tests.simulator.test_policies import node, place, pod

# One typical GPU pod: a whole card with 4 cores, so the GPU pods ask 4 CPU milli per milli-GPU.
SHAPES = typical_shapes({TypicalShape(4000, 1000, 1, None): 3, TypicalShape(2000, 0, 0, None): 1})


def test_gpu_pods_cpu_per_milli_weighs_gpu_shapes_only():
    assert gpu_pods_cpu_per_milli(SHAPES) == 4.0
    assert gpu_pods_cpu_per_milli(typical_shapes({TypicalShape(2000, 0, 0, None): 1})) == 0.0
    assert cpu_stranded(4000, 8000, 4.0) == 2000  # 8 cores serve 2 of the 4 idle cards
    assert cpu_stranded(4000, 64000, 4.0) == 0
    assert cpu_stranded(4000, 0, 0.0) == 0  # no GPU pods in the mix: nothing counts as stranded


def test_a_cpu_heavy_gpu_pod_is_kept_off_a_node_short_of_cpu():
    # a: 4 cards and exactly the CPU they need; b: plenty of CPU. FGD sees no fragment either way
    # (the typical pod still fits on both) and takes the first node; 12 cores on a would leave
    # 3 idle cards with CPU for one.
    heavy = pod(u=1000, cpu=12000)
    assert place(cluster_state((node("a", 4, 16000), node("b", 4, 64000))), heavy, "fgd", 1, SHAPES)[0] == "a"
    assert place(cluster_state((node("a", 4, 16000), node("b", 4, 64000))), heavy, "gpuledger", 1,
                 SHAPES)[0] == "b"


def test_a_cpu_light_gpu_pod_is_drawn_to_a_node_short_of_cpu():
    # b's 8 cores serve 2 of its 4 cards; a 1-core pod there uses a card that would stay idle.
    light = pod(u=1000, cpu=1000)
    assert place(cluster_state((node("a", 4, 64000), node("b", 4, 8000))), light, "fgd", 1, SHAPES)[0] == "a"
    assert place(cluster_state((node("a", 4, 64000), node("b", 4, 8000))), light, "gpuledger", 1,
                 SHAPES)[0] == "b"


def test_cpu_only_pods_keep_fgds_choice():
    for cpu in (1000, 6000, 30000):
        nodes = (node("a", 4, 8000), node("b", 4, 64000), node("c", 4, 40000))
        assert (place(cluster_state(nodes), pod(k=0, u=0, cpu=cpu), "gpuledger", 1, SHAPES)
                == place(cluster_state(nodes), pod(k=0, u=0, cpu=cpu), "fgd", 1, SHAPES))


@settings(max_examples=200, deadline=None)
@given(idle=st.integers(0, 32 * FREE), cpu_free=st.integers(0, 400_000), rate=st.floats(0.001, 50.0),
       taken=st.integers(0, 8 * FREE), cpu=st.integers(0, 400_000))
def test_a_node_keeping_the_margin_strands_nothing(idle, cpu_free, rate, taken, cpu):
    margin = get_policy("gpuledger").cpu_margin(PlacementContext(typical_shapes=_mix(rate)))
    if cpu_free - cpu >= margin:
        assert cpu_stranded(max(idle - taken, 0), cpu_free - cpu, rate) == 0.0
    assert cpu_stranded(idle, cpu_free, rate) <= min(idle, STRAND_CARDS * FREE)


def _mix(rate: float):
    """A mix whose GPU pods ask `rate` CPU milli per milli-GPU."""
    return ((1.0, TypicalShape(round(rate * 1000), 1000, 1, None)),)


needs = st.tuples(st.sampled_from([(0, 1000), (1, 1000), (1, 250), (1, 500), (1, 810), (2, 1000), (4, 1000)]),
                  st.sampled_from([0, 1000, 3152, 8000, 12000, 24000, 64000]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placed=st.lists(needs, max_size=12), probe=needs)
def test_no_node_scores_above_the_ceiling_and_the_margin_makes_cpu_irrelevant(placed, probe):
    # CPU-short, balanced, CPU-rich, and one with CPU beyond the margin (the shared-memo case)
    state = cluster_state((node("a", 4, 16000), node("b", 8, 96000), node("c", 2, 104000),
                           node("d", 8, 400000)))
    shapes = typical_shapes({TypicalShape(11000, 1000, 1, None): 5, TypicalShape(3152, 810, 1, None): 2,
                             TypicalShape(8000, 470, 1, None): 2, TypicalShape(12500, 0, 0, None): 1})
    for n, ((k, u), cpu) in enumerate(placed):
        place(state, pod(k=k, u=u if k else 0, cpu=cpu), "gpuledger", n, shapes)
    policy, ctx = get_policy("gpuledger"), PlacementContext(typical_shapes=shapes)
    (k, u), cpu = probe
    need = Need(k, u if k else 0, "", cpu, 0, "", None, "")
    margin = policy.cpu_margin(ctx)
    for name in state.nodes:
        view = state.nodes[name].view
        picks, score = policy.pick_scored(view, need, ctx)
        if picks is not None:
            assert score <= policy.max_score(need, ctx)
            assert policy.score(view, need, picks, ctx) == score
        if view.cpu_free - cpu >= margin:  # any other CPU that keeps the margin: the same answer
            for other in (0, view.cpu_free - margin):
                assert policy.pick_scored(view, need._replace(cpu=other), ctx) == (picks, score)




def test_mig_instances_score_as_fgd_scores_them():
    # the stranding term, like FGD's measure, sees plain cards only: a MIG instance taken on a node
    # short of CPU (3 cores left for its one plain card) neither frees nor strands any of them
    ledger = Ledger()
    ledger.append(a100_mig_node("m"), claim("cpu", gpus=0, cpu_milli=61000))
    assert ledger.decide(0.0, typical_shapes=SHAPES)
    view = ledger.state.nodes["m"].view
    assert view.cpu_free == 3000
    ctx = PlacementContext(typical_shapes=SHAPES)
    for cpu in (500, 1000, 3000):
        need = Need(1, FREE, "1g.10gb", cpu, 0, "", None, "")
        picks, score = get_policy("gpuledger").pick_scored(view, need, ctx)
        assert picks is not None and (picks, score) == get_policy("fgd").pick_scored(view, need, ctx)


def test_an_unbound_pod_is_not_pushed_to_the_models_that_bound_shapes_exclude():
    # Two nodes alike but for the model. FGD counts a card's whole idle as fragment for a shape
    # bound to another model, so it sends an unbound pod to whichever model the bound shape
    # excludes; gpuledger leaves that mismatch out, and the first node in rank takes it both times.
    nodes = (node("t4", 2, 64000, "T4"), node("g2", 2, 64000, "G2"))
    for bound, fgd_node in (("T4", "g2"), ("G2", "t4")):
        shapes = typical_shapes({TypicalShape(1000, 1000, 1, None): 1,
                                 TypicalShape(1000, 1000, 1, frozenset([bound])): 1})
        assert place(cluster_state(nodes), pod(), "fgd", 1, shapes)[0] == fgd_node
        assert place(cluster_state(nodes), pod(), "gpuledger", 1, shapes)[0] == "t4"


def test_without_bound_shapes_the_mismatch_is_zero_and_bound_weights_add_up():
    assert bound_shape_weights(SHAPES) == (0.0, {})
    shapes = typical_shapes({TypicalShape(1000, 1000, 1, None): 2, TypicalShape(1000, 500, 1, frozenset(["T4"])): 1,
                             TypicalShape(1000, 1000, 1, frozenset(["T4", "G2"])): 1})
    total, allowed = bound_shape_weights(shapes)
    assert total == 0.5 and allowed == {"T4": 0.5, "G2": 0.25}
