"""Every reason code gpuledger writes, and what each tells a publisher to do.

Kinds:
- `wait`: the claim stays pending and is retried as capacity frees (other claims end, quota use
  drops, a device recovers, the rest of a gang arrives).
- `fleet`: the claim stays pending, but no node of the fleet as it is can ever take it (the model,
  driver or labels it needs are not there): it waits for the fleet to change. A pending claim all
  of whose reasons are `fleet` is never satisfiable on this fleet.
- `never`: the claim was rejected (status `rejected`, final): it cannot be satisfied as asked;
  change it and submit it under a new id.
- `end`: why an allocated claim ended (ClaimOutcome.code of a final outcome).

tests/contract/test_reason_codes.py fails when code writes a reason code not listed here or one
listed here is missing from docs/contract.md, and when `fleet` here disagrees with the placement
rules' own `waiting_helps` (services/allocator/core/rules.py).
"""

from __future__ import annotations

from typing import NamedTuple


class ReasonCode(NamedTuple):
    code: str
    kind: str  # wait | fleet | never | end
    meaning: str


REASONS: tuple[ReasonCode, ...] = (
    # pending: the allocator's placement filters, counted over nodes (ClaimPending)
    ReasonCode("no-free-gpu", "wait", "nodes with the right devices have none free now"),
    ReasonCode("reserved", "wait", "nodes held for an older claim that has waited too long"),
    ReasonCode("host-resources", "wait", "nodes lack the CPU or memory the claim asks now"),
    ReasonCode("gpu-unhealthy", "wait", "the matching devices are Faulted or Ignored now"),
    ReasonCode("quota-exceeded", "wait", "the namespace (or its cohort) total would be exceeded"),
    ReasonCode("gang-incomplete", "wait", "not every member of the gang is submitted yet"),
    ReasonCode("gang-unplaceable", "wait", "the whole gang does not fit at once now"),
    ReasonCode("no-nodes", "wait", "no schedulable node is registered yet"),
    ReasonCode("not-contiguous", "wait", "no node has the GPUs free in one NVLink island (policy contiguous)"),
    ReasonCode("node-claims-full", "wait", "nodes that would take it hold as many live claims (or device "
               "grants) as their cap allows (label gpuledger.io/max-claims, else its pools' or the fleet "
               "default, else 110 + 10 per device, at most 1,000; claims without devices at most the cap "
               "less 10 per device, at least 110 where the cap keeps one a device beside them, else the cap "
               "less one a device): it waits for claims there to end, or goes to "
               "another node"),
    ReasonCode("no-such-gpu", "fleet", "nodes have no device of the model, group, pool or MIG profile"),
    ReasonCode("cuda-incompatible", "fleet", "nodes' drivers run none of the allowed CUDA versions"),
    ReasonCode("node-selector", "fleet", "nodes do not match the node selector"),
    ReasonCode("never-satisfiable", "fleet", "no node of the fleet could take the claim even with "
               "nothing allocated and every device healthy (more GPUs, CPU or memory than any node "
               "has, or a model, driver or label none has), a gang could never fit at once, or the "
               "namespace's total quota could not take it even with nothing in use: first of its "
               "reasons; it waits only for the fleet or the quota to change"),
    # rejected by the allocator (AllocationRejected)
    ReasonCode("quota-single-exceeded", "never", "a per-workload quota limit is smaller than the claim"),
    ReasonCode("quota-waiting-exceeded", "never", "it could not be placed when decided, and its namespace "
               "already had as many claims waiting as its quota's max_waiting allows (a gang: too few "
               "places left for its members, each one claim; the whole gang is refused); the reasons it "
               "would have waited for follow"),
    ReasonCode("pool-not-found", "never", "the pool named does not exist"),
    ReasonCode("pool-access-denied", "never", "the namespace (or service account) may not use the pool"),
    ReasonCode("no-such-shape", "never", "no model in the fleet can hold the memory (or TFLOPS) asked per device"),
    ReasonCode("pending-expired", "never", "it was pending longer than the allocator's limit (GPULEDGER_PENDING_EXPIRE_S); its last reasons follow"),
    # rejected at intake (ClaimRejected)
    ReasonCode("invalid", "never", "the claim breaks the contract; the reason names the field"),
    ReasonCode("conflict", "never", "the claim id is already used by a different claim (that claim is "
                                    "untouched): the refusal is a dead letter, and also the sender's own "
                                    "outcome when the id is another submitter's (a submit request answers it)"),
    ReasonCode("forbidden", "never", "the publishing system may not claim in the claim's namespace, "
                                     "or is not declared to the claim service (schemas/systems.py): "
                                     "the reason names the namespace or the system"),
    ReasonCode("unprocessable", "never", "the claim service could not handle the message at all; "
                                         "dead-lettered once with the error"),
    ReasonCode("undeliverable", "never", "the intake delivered the message many times and the claim "
                                         "service never finished it (it stopped on it each time): "
                                         "dead-lettered once and not delivered again"),
    # why an allocated claim ended (ClaimOutcome.code)
    ReasonCode("released", "end", "released by its holder (or the endpoint autoscaler)"),
    ReasonCode("stale", "end", "evicted: no activity for longer than the stale limit"),
    ReasonCode("priority", "end", "evicted for a claim of higher priority"),
    ReasonCode("quota-reclaim", "end", "evicted: the namespace it borrowed quota from took it back"),
    ReasonCode("fair-share", "end", "evicted: a sibling namespace borrowing a smaller share took its share"),
    ReasonCode("unused", "end", "released: its node agent showed no process on its devices past the grace"),
    ReasonCode("lease-expired", "end", "its lease was not renewed in time"),
    ReasonCode("node-lost", "end", "its node stopped sending heartbeats"),
    ReasonCode("device-vanished", "end", "its device disappeared when the node re-registered"),
)

BY_CODE: dict[str, ReasonCode] = {r.code: r for r in REASONS}
# the codes of kind `fleet`: a code this version does not know counts as `wait`, never as these
FLEET_CODES = frozenset(r.code for r in REASONS if r.kind == "fleet")


def never_satisfiable_here(codes: list[str]) -> bool:
    """A pending claim no node as the fleet is can take: the allocator said so
    (`never-satisfiable`, which also covers sizes: 16 GPUs on 8-GPU nodes), or every reason is
    `fleet`-bound."""
    if "never-satisfiable" in codes:
        return True
    if not codes:
        return False
    fleet = FLEET_CODES  # every pending decision folded asks this: no tuple made per code
    for code in codes:
        if code not in fleet:
            return False
    return True
