"""An endpoint's worker is idle by when the claim service heard it show life (services/claim/
heard.py), not by the writer's time: a node agent an hour ahead whose last busy report is a
minute old does not keep the worker for an hour, and one an hour behind that reports it busy now
does not get it released. Pure: the book, the hook and the autoscaler, stamped as the claim
service stamps them (tests/trust_clocks/test_skewed_serverless.py runs the service)."""

from __future__ import annotations

import msgspec

from schemas import events as ev
from schemas.types import DeviceUsage, EndpointSpec

from services.claim.autoscaler import decide_scaling
from services.claim.endpoints import EndpointBook, worker_claim
from services.claim.heard import WORKER_SIGNS, HeardHere
from tests.quota.builders import add, fleet, node, of_type, step

HOUR = 3600.0
T = 100_000.0  # the claim service's and the allocator's clock
IDLE_S = 30.0
SPEC = EndpointSpec(name="chat", namespace="team-a", gpu_groups=["any"], workers_max=2, idle_timeout_s=IDLE_S)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _released_after_busy_report(agent_skew_s: float, heard_after_s: float, judged_after_s: float) -> tuple:
    """chat-w1 allocated at T; its agent reports its device busy (on its clock) and the claim
    service hears that `heard_after_s` later; the queue is empty; judged `judged_after_s` after T."""
    clock = Clock(T)
    worker = msgspec.structs.replace(worker_claim(SPEC, 1), gpu_groups=[])  # any GPU: the H100 here
    state = fleet(node("n1", 1))
    heard = HeardHere(clock, lambda: state, lambda spec: bool(spec.endpoint), WORKER_SIGNS)
    heard.begin()
    book = EndpointBook()
    events = [ev.EndpointCreated(endpoint=SPEC, at=T),
              ev.EndpointScaled(name="chat", workers_before=0, workers_after=1, reason="cold start",
                                added=["chat-w1"], at=T),
              ev.ClaimSubmitted(claim=worker, at=T)]
    for seq, event in enumerate(events, start=1):
        add(state, event)
        book.apply(seq, "gpu.evt.endpoint.chat", event)
        heard.hear(seq, "", event)
    allocated = step(state, now=T)
    assert of_type(allocated, ev.ClaimAllocated)
    heard.hear(0, "", ev.DecisionBatch(decisions=allocated, at=T))
    clock.now = T + heard_after_s
    uuid = state.claims["chat-w1"].grants[0].uuid
    report = ev.UsageObserved(node="n1", at=T + heard_after_s + agent_skew_s,
                              devices=[DeviceUsage(uuid=uuid, pids=[42], utilization_percent=90)])
    add(state, report)
    heard.hear(0, "", report)
    clock.now = T + judged_after_s
    return decide_scaling(book.view("chat", state, heard), clock.now).release


def test_a_busy_report_from_an_agent_an_hour_behind_keeps_the_worker():
    assert _released_after_busy_report(-HOUR, heard_after_s=60, judged_after_s=80) == ()


def test_an_agent_an_hour_ahead_does_not_keep_the_worker_for_an_hour():
    assert _released_after_busy_report(+HOUR, heard_after_s=10, judged_after_s=80) == ("chat-w1",)
