"""Outcomes with two claim services (deploy/k8s runs two): every sender finds its claim's outcome
on its own subject (a system's claims on that system's, never the shared publisher's), the last
outcome stored is the claim's last state, and each is written once. Before session 34 both
replicas wrote every outcome (built from the log alone, so the same message, twice), and each
replica's outcome groups (two acks a group, services/claim/ack_window.py) saw the other's messages
between their ends and wrote them again; now one replica writes at a time (outcome_lease.py).
"""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from schemas import subjects
from schemas.systems import parse_systems
from gpuledger_cli.services_cmd import builder_for
from shared.service import start_service, stop_service
from tests.service.helpers import h100_node, register_nodes, request, running
from tests.service.helpers import test_settings as settings_for
from shared.jetstream import JetStreamEventLog
from tests.waiting import until

pytestmark = pytest.mark.timeout(240)
CLAIMS = 60


@pytest.mark.parametrize("claim_services", [1, 2])
async def test_each_sender_finds_its_claims_last_outcome_on_its_own_subject(fresh_nats, claim_services):
    nc = await nats.connect(fresh_nats.url)
    heard: dict[str, list[dict]] = {}

    async def on_outcome(msg) -> None:
        heard.setdefault(msg.subject, []).append(json.loads(msg.data))
    await nc.subscribe("gpu.outcome.>", cb=on_outcome)
    names = ["claim"] * claim_services + ["allocator"]
    try:
        async with running(fresh_nats.url, *names, systems=parse_systems("billing:team-b")) as contexts:
            await register_nodes(JetStreamEventLog(nc), h100_node("n1"), h100_node("n2"))
            js = nc.jetstream()
            plain = [f"p-{i}" for i in range(CLAIMS)]
            billed = [f"b-{i}" for i in range(CLAIMS)]
            for claim_id in plain:
                await js.publish(subjects.INTAKE_CLAIMS, json.dumps(
                    {"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1}).encode())
            for claim_id in billed:
                await js.publish(f"{subjects.INTAKE_CLAIMS}.billing", json.dumps(
                    {"claim_id": claim_id, "namespace": "team-b", "gpus": 0, "cpu_milli": 1}).encode())

            def statuses(ids, system="") -> list[str]:
                return [(heard.get(subjects.outcome(c, system)) or [{}])[-1].get("status", "") for c in ids]

            assert await until(lambda: all(s == "allocated" for s in statuses(plain) + statuses(billed, "billing")),
                               120), (statuses(plain)[:5], statuses(billed, "billing")[:5])
            for claim_id in plain:
                await request(nc, subjects.command("claim.release"), {"claim_id": claim_id})
            for claim_id in billed:  # a system releases on its own subject
                await request(nc, subjects.command("claim.release") + ".billing", {"claim_id": claim_id})
            assert await until(lambda: all(s == "released" for s in statuses(plain) + statuses(billed, "billing")),
                               120)
            await asyncio.sleep(0.5)  # any outcome still on its way
            for claim_id in billed:  # never on the shared publisher's subject
                assert subjects.outcome(claim_id) not in heard, claim_id
            for claim_id, system in [(c, "") for c in plain] + [(c, "billing") for c in billed]:
                stored = json.loads((await js.get_last_msg(subjects.OUTCOMES_STREAM,
                                                          subjects.outcome(claim_id, system))).data)
                assert stored["status"] == "released" and stored["final"], (claim_id, stored)
                seqs = [o["seq"] for o in heard[subjects.outcome(claim_id, system)]]
                assert max(seqs) == stored["seq"], (claim_id, seqs, stored["seq"])
                # each outcome written once, by one replica (outcome_lease.py): before, by each
                assert len(seqs) == len(set(seqs)), (claim_id, seqs)
            writers = [ctx.claim_outcomes.lease.held for ctx in contexts[:claim_services]]
            assert writers.count(True) == 1, writers
    finally:
        await nc.close()


async def test_the_replica_standing_by_writes_the_outcomes_once_the_writer_stops(fresh_nats):
    settings = settings_for(fresh_nats.url)
    replicas = [await start_service("claim", settings, builder_for("claim")) for _ in range(2)]
    nc = await nats.connect(fresh_nats.url)
    try:
        assert await until(lambda: any(r.claim_outcomes.lease.held for r in replicas), 30)
        writer, standby = sorted(replicas, key=lambda r: not r.claim_outcomes.lease.held)
        assert not standby.claim_outcomes.lease.held
        await stop_service(writer)
        replicas.remove(writer)
        js = nc.jetstream()
        # refused: its outcome (`rejected`) is the fold's, written by the outcome writer
        await js.publish(subjects.INTAKE_CLAIMS, json.dumps({"claim_id": "late-1", "namespace": "team-a",
                                                             "gpus": -1}).encode())

        async def written() -> bool:
            try:
                await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome("late-1"))
            except nats.js.errors.NotFoundError:
                return False
            return True
        assert await until(written, 60)
        assert standby.claim_outcomes.lease.held
    finally:
        for ctx in replicas:
            await stop_service(ctx)
        await nc.close()
