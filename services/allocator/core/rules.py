"""The placement rules: one ordered registry that both places and explains.

Each rule is a small predicate on one node view, `check(view, need, arg) -> bool` (True: this node
may take the need), with a stable reason code, the message `claim explain` shows, and whether its
failure can clear by waiting. `RULES` is the one ordered list that placement (`choose`,
`choose_on`), the score memo keys and the explanation (`reasons_for`: the first rule that fails,
counted over nodes) all iterate, so a rule is enforced exactly where it is explained.

A rule that reads something from the claim (or the state: a pool, say) names it with `argument`;
the argument is computed once per claim, handed to `check` and `message`, and is part of every memo
key, so a memoised score can never outlive the input it was computed under. A claim whose argument
is empty (no selector, no CUDA versions, ...) does not ask for the rule: it is not checked at all.

The rules marked `decided_by_pick` say what picking units means (an eligible model, healthy units,
host CPU and memory, enough free units): every policy's `pick` already refuses a node that fails
them, and `choose` only visits groups with room of an accepted kind, so placement does not check
them a second time (a property test holds `default_pick` to them). Every other rule is checked on
each candidate view before the policy picks. Adding a rule is one function and one row below; see
docs/architecture.md.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, NamedTuple

from schemas.catalogue import MODELS, cuda_compatible
from schemas.types import ClaimSpec

from ledger import node_claims
from ledger.state import FREE, NodeView, State
from services.allocator.core.demand import Need
from services.allocator.core.picks import eligible, fitting_units, one_island_fits


class Nodes:
    """"12 nodes" with the verbs that agree with it, for rule messages."""

    __slots__ = ("count", "have", "lack", "do", "are")

    def __init__(self, count: int):
        one = count == 1
        self.count = count
        self.have = "has" if one else "have"
        self.lack = "lacks" if one else "lack"
        self.do = "does" if one else "do"
        self.are = "is" if one else "are"

    def __str__(self) -> str:
        return f"{self.count} node{'' if self.count == 1 else 's'}"


class Rule(NamedTuple):
    code: str  # stable reason code (in ClaimPending reasons, metrics and the docs)
    check: Callable[[NodeView, Need, Any], bool]  # True: the node may take the need
    message: Callable[[Nodes, Need, Any], str]  # why these nodes do not, in words
    # what the rule reads from the claim (and state), once per claim; None: it reads nothing
    argument: Callable[[ClaimSpec, State], Hashable] | None = None
    # False: a fleet-static rule (the nodes' models, labels, drivers): no amount of waiting clears
    # it, only a change to the fleet or to the claim. True: it clears as capacity frees or heals.
    waiting_helps: bool = True
    decided_by_pick: bool = False  # see the module docstring
    explain_rank: int = 9  # on equal node counts, lower is shown first


# --- the checks -------------------------------------------------------------------------------


def selector_matches(view: NodeView, need: Need, selector: tuple[tuple[str, str], ...]) -> bool:
    """Every label the claim selects on, with the same value."""
    labels = dict(view.static.labels)
    return all(labels.get(k) == v for k, v in selector)


def cuda_supported(view: NodeView, need: Need, versions: tuple[str, ...]) -> bool:
    """The driver's CUDA is at least one allowed version that an accepted model's architecture runs."""
    if need.count == 0:
        return True
    models = need.models or set(view.static.models)
    return any(cuda_compatible(view.static.cuda, MODELS[m].arch if m in MODELS else "", versions)
               for m in view.static.models if m in models)


def has_model(view: NodeView, need: Need, _: None) -> bool:
    """A unit of an accepted model, pool and kind (card or MIG profile), in any state."""
    return need.count == 0 or any(eligible(u, need) for u in view.units)


def has_healthy(view: NodeView, need: Need, _: None) -> bool:
    return need.count == 0 or any(u.healthy and eligible(u, need) for u in view.units)


def host_fits(view: NodeView, need: Need, _: None) -> bool:
    return view.cpu_free >= need.cpu and view.mem_free >= need.mem


def units_free(view: NodeView, need: Need, _: None) -> bool:
    return need.count == 0 or len(fitting_units(view, need)) >= need.count


def claims_room(view: NodeView, need: Need, _: bool) -> bool:
    """Room under the node's cap of live claims and grants (ledger/node_claims.py) for one more
    claim and its grants (a CPU-only claim counts one, within the part of the cap its devices do
    not keep for claims that hold them)."""
    if need.count == 0:
        return view.claims_room >= 1 and view.grantless_room
    return view.claims_room >= need.count


# --- the messages -----------------------------------------------------------------------------


def _in_pool(need: Need) -> str:
    return f" in pool {need.pool}" if need.pool else ""


def _they(nodes: Nodes) -> str:
    return "it" if nodes.count == 1 else "they"


def _full(n: Nodes, need: Need) -> str:
    cap = (f"a node's cap: label {node_claims.LABEL}, else its pools' or the fleet default, else "
           f"{node_claims.BASE} + {node_claims.PER_DEVICE} per device, at most {node_claims.CEILING}")
    if need.count == 0:  # the part of the cap its devices keep is not for claims without devices
        return (f"{n} {n.have} as many live claims, or claims without devices, as {_they(n)} may hold "
                f"({cap}; claims without devices take at most the cap less {node_claims.PER_DEVICE} "
                f"per device, and at least {node_claims.BASE} where the cap keeps one claim a device "
                f"beside them)")
    return f"{n} {n.have} as many live claims (or device grants) as {_they(n)} may hold ({cap})"


def _wanted(need: Need) -> str:
    if need.count != 1 or need.milli < FREE or need.mig_profile:
        return need.label
    return f"a free {'/'.join(sorted(need.models)) if need.models else 'GPU'}"


RULES: tuple[Rule, ...] = (
    Rule("node-selector", selector_matches,
         lambda n, need, selector: f"{n} {n.do} not match node selector {dict(selector)}",
         argument=lambda spec, state: tuple(sorted(spec.node_selector.items())),
         waiting_helps=False, explain_rank=5),
    Rule("no-such-gpu", has_model,
         lambda n, need, _: f"{n} {n.have} no {need.label.split(' x ')[-1]} devices{_in_pool(need)}",
         waiting_helps=False, decided_by_pick=True, explain_rank=6),
    Rule("cuda-incompatible", cuda_supported,
         lambda n, need, versions: f"{n} {n.have} drivers without CUDA {', '.join(versions)}",
         argument=lambda spec, state: tuple(spec.cuda_versions),
         waiting_helps=False, explain_rank=4),
    Rule("gpu-unhealthy", has_healthy,
         lambda n, need, _: f"{n} {n.have} only Faulted or Ignored matching devices",
         decided_by_pick=True, explain_rank=3),
    Rule("host-resources", host_fits,
         lambda n, need, _: f"{n} {n.lack} {need.cpu}m CPU / {need.mem}Mi memory",
         decided_by_pick=True, explain_rank=2),
    Rule("no-free-gpu", units_free,
         lambda n, need, _: f"{n} {n.lack} {_wanted(need)}{_in_pool(need)}",
         decided_by_pick=True, explain_rank=1),
    # seed 001: a `contiguous` claim waits for one NVLink island with room rather than spanning two
    # and so does a tensor-parallel claim, on nodes with an island that large (picks.one_island_fits)
    Rule("not-contiguous", one_island_fits,
         lambda n, need, arg: f"{n} {n.lack} {need.count} free GPUs in one NVLink island "
         f"({'policy contiguous' if arg is True else 'tensor-parallel'})",
         argument=lambda spec, state: True if spec.policy == "contiguous" else (
             "tensor-parallel" if spec.model_memory_gib > 0 else False), explain_rank=1),
    # last: a node that would take the claim but for its cap says so (session 33; the cap keeps a
    # node's record for its agent, one NATS message, well under the max payload). Every claim
    # asks for it (its argument is always True), so placement checks it on each candidate view.
    Rule("node-claims-full", claims_room, lambda n, need, _: _full(n, need),
         argument=lambda spec, state: True, explain_rank=1),
)

# Not rules of a node view, but reasons placement gives: every rule passes on a node a starving
# claim holds (`reserved`: the holds are per node, not per view), or no node is registered.
RESERVED = "reserved"
NO_NODES = "no-nodes"
_EXTRA_RANKS = {RESERVED: 0}


def rule_args(spec: ClaimSpec, state: State) -> tuple:
    """Each rule's argument for this claim, in `RULES` order (None for rules that read nothing)."""
    return tuple(rule.argument(spec, state) if rule.argument is not None else None for rule in RULES)


def placement_checks(args: tuple) -> tuple[tuple[Callable, Any], ...]:
    """The (check, argument) pairs placement runs on each candidate view before picking: the
    rules picking does not decide, that this claim asks for."""
    return tuple((rule.check, arg) for rule, arg in zip(RULES, args)
                 if not rule.decided_by_pick and arg)


def first_failing(view: NodeView, need: Need, args: tuple) -> str | None:
    """The code of the first rule this node fails for the need, or None when all pass."""
    for rule, arg in zip(RULES, args):
        if rule.argument is not None and not arg:
            continue  # the claim does not ask for it
        if not rule.check(view, need, arg):
            return rule.code
    return None


def asks_nothing_before(code: str, args: tuple) -> bool:
    """True when every rule before `code` passes every node for this claim: each reads an argument
    and the claim leaves it empty. Then a node failing `code` fails it first."""
    for rule, arg in zip(RULES, args):
        if rule.code == code:
            return True
        if rule.argument is None or arg:
            return False
    raise KeyError(code)


def _find(code: str) -> tuple[int, Rule | None]:
    for i, rule in enumerate(RULES):  # a handful of rules, looked up only to explain
        if rule.code == code:
            return i, rule
    return -1, None


def message(code: str, count: int, need: Need, args: tuple) -> str:
    nodes = Nodes(count)
    if code == RESERVED:
        return f"{nodes} {nodes.are} held for an older waiting claim"
    i, rule = _find(code)
    if rule is None:
        return f"{nodes}: {code}"
    return rule.message(nodes, need, args[i])


def explain_rank(code: str) -> int:
    rule = _find(code)[1]
    return rule.explain_rank if rule is not None else _EXTRA_RANKS.get(code, 9)


def waiting_helps(code: str) -> bool:
    """False for a placement reason no amount of waiting clears on this fleet (a fleet-static
    rule); True for the rest (capacity, health, holds, and codes that are not placement rules)."""
    rule = _find(code)[1]
    return rule.waiting_helps if rule is not None else True


__all__ = ["RULES", "Rule", "Nodes", "rule_args", "placement_checks", "first_failing", "message",
           "explain_rank", "waiting_helps", "RESERVED", "NO_NODES"]
