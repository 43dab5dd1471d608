"""CPU priorities of the processes `gpuledger up` starts: the claim path first.

A claim goes publisher -> nats-server -> claim service -> nats-server -> allocator -> nats-server ->
its holder; the projector (the SQL read model), quota, the pool controller, the simulated node
agents and the dashboard read the same log but are on no claim's path to its allocation. On a
machine whose cores are busy (every process of the stack on two cores, `bench e2e --rate 1000`),
the kernel shares the CPU by weight: with these read-model processes at a lower priority (a
higher nice value) a wake-up of the claim path does not wait behind a projector commit or a batch
of the fleet's heartbeats. They still get every cycle the claim path leaves (nice is a weight, not
a starvation: on an idle core a niced process runs at full speed), so the only cost is that under
load they lag a little more (the read model, drift checks, the agents' bindings, all of which are
asynchronous already). `GPULEDGER_UP_NICE=0` starts every process at the same priority.

A service among them starts at full priority and lowers its own once it announced itself ready
(shared/priority.py): its start (imports, catch-up) does not run at the low weight, which on a busy
machine could take it past `up`'s ready timeout. The agents and the dashboard start lowered.
"""

from __future__ import annotations

import os

from shared.priority import lower_session

# nice increments (0 = as `up` itself); the claim path (nats-server, claim, allocator) stays at 0.
# The agents less than the rest: their heartbeats keep nodes alive (node_timeout_s, 30 s by default).
NICE = {"projector": 10, "quota": 10, "pool-controller": 10, "dashboard": 10, "node-agents": 5}


def nice_of(name: str, env: dict[str, str] | None = None) -> int:
    """The nice increment for the child named `name` (0 when GPULEDGER_UP_NICE is 0)."""
    env = os.environ if env is None else env
    if env.get("GPULEDGER_UP_NICE", "1").strip() in ("0", "false", "no", "off"):
        return 0
    return NICE.get(name, 0)


def lower_priority(increment: int):
    """A `preexec_fn` that lowers the child's priority before it runs (every thread it starts
    later inherits it), or None for no change."""
    if increment <= 0:
        return None

    def run_in_child() -> None:
        os.nice(increment)
        lower_session(increment)  # the child's new session: its share against the others (shared/priority.py)

    return run_in_child
