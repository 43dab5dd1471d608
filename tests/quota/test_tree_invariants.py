"""Hypothesis over random quota trees, limits and claim sequences, through the real decide and
evolve: no namespace or cohort ever uses more than the tree grants it, reclaim never evicts from
a namespace within its own quota, and what a lending limit keeps for its owner stays available."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import events as ev

from ledger.cohorts import Subtrees, books_of
from ledger.evolve import apply_decision
from ledger.quota import DIMS, SHARED_DIMS, Cost, quota_check
from tests.quota.builders import add, claim, fleet, node, quota
from services.allocator.core.decide import DecideContext, decide

VRAM, WORKERS = DIMS[1], DIMS[4]
COHORTS = ("c0", "c1", "c2")
NAMESPACES = ("n0", "n1", "n2", "n3")
GI = 1024


@st.composite
def trees(draw):
    """A forest over three cohorts and four namespaces: each node's parent is an earlier cohort or
    none; nominal, borrowing and lending limits drawn per node."""
    nodes = {}
    for i, name in enumerate(COHORTS + NAMESPACES):
        earlier = [c for c in COHORTS[:min(i, len(COHORTS))]]
        parent = draw(st.sampled_from([""] + earlier))
        nominal = draw(st.sampled_from([None, 0, 80, 160, 240, 400] if name in COHORTS else [0, 40, 80, 160]))
        fields = {"parent": parent}
        if nominal is not None:
            fields["requests_vram"] = f"{nominal}Gi"
        if parent:
            fields["borrowing_limit_vram"] = draw(st.sampled_from(["0Gi", "40Gi", "80Gi", "unlimited"]))
            lend = draw(st.sampled_from([None, 0, 40, 80]))
            if lend is not None and nominal is not None and lend <= nominal:
                fields["lending_limit_vram"] = f"{lend}Gi"
            fields["fair_sharing_weight"] = draw(st.sampled_from([1.0, 2.0, 0.5]))
        if draw(st.booleans()):
            fields["max_workers"] = draw(st.integers(1, 4))
        nodes[name] = fields
    return nodes


actions = st.lists(st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(NAMESPACES), st.sampled_from(["gpu", "half", "two"]),
              st.integers(-1, 1), st.integers(1, 3)),  # a burst: several decided in one pass
    st.tuples(st.just("release"), st.integers(0, 60)),
    # a namespace's quota lowered or raised under running claims (nothing is evicted for it)
    st.tuples(st.just("requota"), st.sampled_from(NAMESPACES), st.sampled_from([0, 40, 80, 160])),
), min_size=1, max_size=30)

SHAPES = {"gpu": {}, "half": {"gpu_memory_gib": 40}, "two": {"gpus": 2}}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(), actions=actions)
def test_no_namespace_or_cohort_ever_uses_more_than_the_tree_grants(tree, actions):
    state = fleet(node("n1", 8), node("n2", 8), *(quota(name, **fields) for name, fields in tree.items()))
    ids: list[str] = []
    requoted = False
    for i, action in enumerate(actions):
        if action[0] == "claim":
            _, namespace, shape, priority, burst = action
            for j in range(burst):
                ids.append(f"k{i}-{j}")
                add(state, claim(ids[-1], namespace=namespace, priority=priority, at=float(i), **SHAPES[shape]))
        elif action[0] == "requota":
            _, namespace, nominal = action
            fields = dict(tree[namespace], requests_vram=f"{nominal}Gi")
            if "lending_limit_vram" in fields and int(fields["lending_limit_vram"][:-2]) > nominal:
                del fields["lending_limit_vram"]
            add(state, quota(namespace, **fields))
            requoted = True
        elif ids:
            add(state, ev.ClaimReleased(claim_id=ids[action[1] % len(ids)], at=float(i)))
        _decide_checking_each_decision(state, now=float(i) + 0.5)
        if not requoted:  # a lowered quota may leave use above it: only new grants are bounded then
            _assert_within_the_tree(state)
            _assert_guarantees_available(state)
        _assert_use_is_the_fold(state)


def _decide_checking_each_decision(state, now: float) -> None:
    """One decide, folded decision by decision: every reclaim victim is over its own quota as it is
    evicted, and every grant leaves each node on its path within what the tree grants it."""
    decisions = decide(state, DecideContext(now=now, check_timers=False))
    for decision in decisions:
        if isinstance(decision, ev.ClaimEvicted) and decision.rule in ("quota-reclaim", "fair-share"):
            victim = state.claims[decision.claim_id].spec.namespace
            books = Subtrees(state)
            assert any(books.over(victim, d) > 0 for d in SHARED_DIMS), (victim, decision)
        apply_decision(state, decision)
        if isinstance(decision, ev.ClaimAllocated):
            _assert_path_within_the_tree(state, decision.namespace)
    state.last_seq += 1


def _assert_path_within_the_tree(state, namespace: str) -> None:
    books, cached = Subtrees(state), books_of(state)
    for name in books.tree.ancestors(namespace):
        _assert_node_within(books, name)
        assert cached.used(name, VRAM) == books.used(name, VRAM)  # the pass's cache is never stale
        assert cached.held_back(name, VRAM) == books.held_back(name, VRAM)


def _assert_within_the_tree(state) -> None:
    books = Subtrees(state)
    for name in state.quotas:
        _assert_node_within(books, name)


def _assert_node_within(books: Subtrees, name: str) -> None:
    """Use within capacity plus borrowing limit (a root: within capacity); workers never borrowed."""
    capacity, used = books.capacity(name, VRAM), books.used(name, VRAM)
    if capacity is not None:
        if name in books.tree.parent:
            limit = books.borrowing_limit(name, VRAM)
            assert limit is None or used <= capacity + limit + 1e-6, (name, used, capacity, limit)
        else:
            assert used <= capacity + 1e-6, (name, used, capacity)
    workers = books.capacity(name, WORKERS)
    if workers is not None:
        assert books.used(name, WORKERS) <= workers, (name, "workers")


def _assert_use_is_the_fold(state) -> None:
    for namespace, usage in state.usage.items():
        held = sum(c.vram_mib for c in state.claims.values() if c.holds_devices and c.spec.namespace == namespace)
        assert held == usage.vram_mib  # use is the fold of the allocations, nothing else


def _consistent(books: Subtrees, node: str) -> bool:
    """Every cohort above `node` has room for the capacities of all its children."""
    for cohort in books.tree.ancestors(node)[1:]:
        capacity = books.capacity(cohort, VRAM)
        kids = [books.capacity(c, VRAM) for c in books.tree.children[cohort]]
        if capacity is None or None in kids or sum(kids) > capacity + 1e-6:
            return False
    return True


def _assert_guarantees_available(state) -> None:
    """A namespace with a lending limit can always take the unused part of what it keeps, where
    every cohort above it can hold all of its children's quotas."""
    books = Subtrees(state)
    for namespace in NAMESPACES:
        if namespace not in books.tree.parent or not _consistent(books, namespace):
            continue
        unused = books.guarantee(namespace, VRAM) - books.used(namespace, VRAM)
        if unused < 1:
            continue
        refusal = quota_check(state, namespace, Cost(0.0, int(unused), 0.0, int(unused), 1)).refusal
        assert refusal is None or refusal.detail["resource"] != "vram", refusal.message


# --- reclaim, on one fixed shape so that every example exercises it -----------------------------

reclaim_actions = st.lists(st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(["a", "b", "c"]), st.integers(-2, 2), st.integers(1, 3)),
    st.tuples(st.just("requota"), st.sampled_from(["a", "b"]), st.sampled_from([0, 80, 160, 240])),
    st.tuples(st.just("release"), st.integers(0, 40)),
), min_size=4, max_size=24)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=reclaim_actions, nominal_a=st.sampled_from([80, 160]), nominal_c=st.sampled_from([160, 240]))
def test_reclaim_never_evicts_a_namespace_within_its_own_quota(actions, nominal_a, nominal_c):
    """top -> {ab -> {a, b}, c}: a and b borrow freely, c reclaims; quotas move under running claims."""
    nominals = {"a": nominal_a, "b": 80}
    state = fleet(node("n1", 8), quota("top", requests_vram=f"{nominal_a + 80 + nominal_c}Gi"),
                  quota("ab", parent="top", borrowing_limit_vram="unlimited"),
                  *(quota(ns, requests_vram=f"{v}Gi", parent="ab", borrowing_limit_vram="unlimited")
                    for ns, v in nominals.items()),
                  quota("c", requests_vram=f"{nominal_c}Gi", parent="top"))
    ids: list[str] = []
    for i, action in enumerate(actions):
        if action[0] == "claim":
            for j in range(action[3]):
                ids.append(f"k{i}-{j}")
                add(state, claim(ids[-1], namespace=action[1], priority=action[2], at=float(i)))
        elif action[0] == "requota":
            add(state, quota(action[1], requests_vram=f"{action[2]}Gi", parent="ab",
                             borrowing_limit_vram="unlimited"))
        elif ids:
            add(state, ev.ClaimReleased(claim_id=ids[action[1] % len(ids)], at=float(i)))
        _decide_checking_each_decision(state, now=float(i) + 0.5)
