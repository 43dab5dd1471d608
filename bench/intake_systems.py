"""What a publishing system's claim costs the intake: CPU per claim of `handle_intake_batch` (the
claim service's intake path, in process, on the in-memory log), plain claims and claims of a
declared system (namespace check, ownership recorded), the two alternated.

Usage: python -m bench.intake_systems [--claims 20480] [--rounds 5]
To compare with an older tree, run the plain mode there with PYTHONPATH pointing at it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import msgspec


async def cpu_per_claim(claims: int, system: bool, batch: int = 256) -> float:
    """Microseconds of CPU per claim."""
    from services.claim.app import ClaimService
    from services.claim.intake import handle_intake_batch
    from shared.eventlog import InMemoryEventLog

    kwargs = {}
    if system:
        from schemas.systems import parse_systems

        kwargs["systems"] = parse_systems("bench:*")
    service = ClaimService(InMemoryEventLog(), clock=lambda: 10.0, **kwargs)
    follower = asyncio.create_task(service.follower.run())
    tail = ("bench",) if system else ()
    msgs = [(msgspec.json.encode({"claim_id": f"c-{i}", "namespace": "team-a", "gpus": 1 + i % 4}), {}, i + 1, *tail)
            for i in range(claims)]
    start = time.process_time()
    for k in range(0, claims, batch):
        await handle_intake_batch(service, msgs[k:k + batch])
    spent = time.process_time() - start
    follower.cancel()
    return spent / claims * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=20480, help="claims per run")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each mode, alternated")
    args = parser.parse_args()
    plain, system = [], []
    for _ in range(args.rounds):
        plain.append(asyncio.run(cpu_per_claim(args.claims, False)))
        system.append(asyncio.run(cpu_per_claim(args.claims, True)))
    print(f"plain  µs/claim: median {statistics.median(plain):.1f} ({', '.join(f'{v:.1f}' for v in plain)})")
    print(f"system µs/claim: median {statistics.median(system):.1f} ({', '.join(f'{v:.1f}' for v in system)})")


if __name__ == "__main__":
    main()
