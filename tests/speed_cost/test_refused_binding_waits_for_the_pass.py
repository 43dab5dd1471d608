"""A binding refused by its node's fence waits for the node's next record long enough for the
allocator's pass to end: at saturation the allocator writes the records a release marked only
after the pass it is running (services/allocator/node_writer.py), hundreds of milliseconds later,
and a 50 ms wait fell back to reading the fence subjects for nearly every refusal (a direct get,
a consumer made, fetched from and deleted: four requests, half of the agents' NATS traffic in
`bench e2e --claims 20000`). The order of the two timers decides here, not the clock: the record
is offered 0.3 s after the refusal, the wait is longer."""

from services.node_agent.binder import REFUSED_WAIT_S
from tests.node_agent.test_binder import running  # noqa: F401
from tests.speed_followers.test_refused_binding_waits_for_a_record import (
    AllocatorBehind, binds_from_the_next_record_without_reading_the_fence)

PASS_S = 0.3  # the record after the release comes this long after the refusal


def test_the_wait_outlasts_a_pass_at_saturation():
    assert REFUSED_WAIT_S > PASS_S


async def test_a_record_after_a_pass_binds_without_reading_the_fence(running):
    await binds_from_the_next_record_without_reading_the_fence(AllocatorBehind(record_after_s=PASS_S), running)
