"""A node agent's own flows still work from the agents' account (shared.nats_auth): its heartbeats
(pipelined publishes, their acknowledgements back through the import), a drift report, and
reading its own binding subject through its reader consumer, whose fetches are answered by many
messages (the export keeps such a response open). The watch of its record and binding are
tested the same way in tests/trust/test_node_reads.py."""

from __future__ import annotations

import asyncio

from schemas import events as ev
from schemas import subjects
from services.node_agent.beats import FleetBeats
from shared import nats_auth
from shared.jetstream import JetStreamEventLog
from shared.service import round_trip

MINE = "gpu-1"


class _Agent:
    node = MINE

    @staticmethod
    def clock() -> float:
        return 1.0


async def test_its_heartbeats_drift_reports_and_reads_go_through(agents_server, ops):
    agent = (await agents_server.connect(nats_auth.node_user_name(MINE))).nc
    beats = FleetBeats([_Agent()], agent, interval_s=lambda: 0.01)
    await beats.publisher.start()
    try:
        for _ in range(500):
            await beats.tick()
            if beats.stored:
                break
            await asyncio.sleep(0.02)
    finally:
        await beats.publisher.stop()
    assert beats.stored and not beats.failed

    log = JetStreamEventLog(agent)
    drift = ev.DriftDetected(node=MINE, kind="missing-device", uuid="GPU-x", at=1.0)
    assert (await log.append(subjects.drift(MINE), drift)).seq > 0

    ops_log = JetStreamEventLog(ops)
    for i in range(300):  # more than one fetch (256) of its reader: many answers to one request
        await ops_log.append(subjects.node_bindings(MINE), ev.ClaimBound(claim_id=f"c-{i}", node=MINE, at=1.0, env={}))
    read = [s.event.claim_id async for s in log.own_subject_after(subjects.node_bindings(MINE))]
    assert read == [f"c-{i}" for i in range(300)]


async def test_the_simulated_fleet_still_answers_ops_commands(agents_server, ops):
    """The fleet serves `gpu.cmd.node.fault|process` from AGENTS: exported there, imported by
    LEDGER, where ops (the CLI, the benchmarks) asks."""
    fleet = (await agents_server.connect(nats_auth.DEMO_AGENTS)).nc

    async def answer(msg) -> None:
        await msg.respond(b'{"ok": true, "node": "sim-a"}')

    await fleet.subscribe(subjects.command("node.fault"), cb=answer)
    await round_trip(fleet)  # the server has the subscription (nats-py's flush alone may not wait for it)
    reply = await ops.request(subjects.command("node.fault"), b'{"node": "sim-a", "index": 0}', timeout=30)
    assert reply.data == b'{"ok": true, "node": "sim-a"}'
