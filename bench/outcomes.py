"""What writing outcomes costs the claim service: CPU per claim with the outcome writer on and off.

The claim service runs in this process on a real nats-server; claims are published to the intake
in bursts and the CPU time of this process (service, client and writer together) is compared, the
two modes alternated. Usage: python -m bench.outcomes [--claims 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import nats

from schemas import subjects
from services.claim.intake import wait_intake_drained
from services.claim.outcomes import OutcomeWriter
from shared.natsserver import start_nats_server
from shared.service import start_service, stop_service
from shared.settings import Settings


async def one_round(url: str, claims: int, prefix: str, writer_on: bool) -> float:
    from gpuledger_cli.services_cmd import builder_for

    note = OutcomeWriter.note
    if not writer_on:
        OutcomeWriter.note = lambda self, seq, subject, event: None
    try:
        ctx = await start_service("claim", Settings(nats_url=url), builder_for("claim"))
        writer = getattr(ctx, "claim_outcomes", None)
        if writer is not None:  # no allocator here to explain the claims: pending after the plain hold
            writer.unexplained_after_s = writer.pending_after_s
        nc = await nats.connect(url)
        js = nc.jetstream()
        started = time.process_time()
        for i in range(claims):
            await js.publish_async(subjects.INTAKE_CLAIMS, json.dumps(
                {"claim_id": f"{prefix}-{i}", "namespace": "bench"}).encode(),
                headers={"Nats-Msg-Id": f"{prefix}-{i}"})
        await js.publish_async_completed()
        await wait_intake_drained(js, timeout=120.0)
        if writer_on:
            last = f"{prefix}-{claims - 1}"
            while True:
                try:
                    await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(last), direct=True)
                    break
                except Exception:
                    await asyncio.sleep(0.01)
        cpu = time.process_time() - started
        await nc.close()
        await stop_service(ctx)
        return cpu
    finally:
        OutcomeWriter.note = note


async def main(claims: int, rounds: int) -> None:
    figures: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds):
        for on in (False, True):
            server = start_nats_server(Path(tempfile.mkdtemp()) / "nats")  # an empty log each round
            try:
                cpu = await one_round(server.url, claims, f"r{r}", on)
            finally:
                server.stop()
            figures[on].append(cpu / claims * 1e6)
    for on, us in figures.items():
        print(f"outcome writer {'on ' if on else 'off'}: {min(us):.0f} us CPU per claim "
              f"(rounds: {', '.join(f'{u:.0f}' for u in us)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=3000, help="claims per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each mode, alternated")
    args = parser.parse_args()
    asyncio.run(main(args.claims, args.rounds))
