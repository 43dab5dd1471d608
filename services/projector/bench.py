"""Measure the projection rate: `python -m services.projector.bench --events 200000 [--db URL]`.

The target's read-model tables are dropped and recreated: point --db/--schema at a scratch place.

A synthetic log (nodes, then claims submitted, allocated, bound and released, with heartbeats) is
projected in batches; prints events/s for the fold alone and for fold + SQL commits.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import deque

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo, Grant
from ledger.evolve import fold
from services.projector.db import drop_all, make_engine, migrate
from services.projector.projector import Projector


def synthetic_log(events: int, nodes: int = 200, gpus: int = 8) -> list[tuple[int, ev.Event]]:
    log: list[ev.Event] = []
    free = deque()
    for n in range(nodes):
        devices = [DeviceInfo(uuid=f"GPU-{n}-{i}", index=i, model="H100", memory_mib=81920)
                   for i in range(gpus)]
        log.append(ev.NodeRegistered(node=f"n{n}", devices=devices, cpu_milli=64000,
                                     memory_mib=512000, at=float(n)))
        free.extend((f"n{n}", d.uuid, d.index) for d in devices)
    live: deque = deque()
    i, now = 0, float(nodes)
    while len(log) < events:
        now += 0.01
        claim_id, (node, uuid, index) = f"c{i}", free.popleft()
        log.append(ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace=f"ns{i % 20}"), at=now))
        grant = Grant(node=node, uuid=uuid, index=index)
        log.append(ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id=claim_id, namespace=f"ns{i % 20}", node=node, grants=[grant], tflops=989.0,
            vram_mib=81920, at=now)], at=now))
        log.append(ev.ClaimBound(claim_id=claim_id, node=node, env={"CUDA_VISIBLE_DEVICES": str(index)},
                                 at=now))
        log.append(ev.NodeHeartbeat(node=node, at=now))
        live.append((claim_id, node, uuid, index))
        if len(live) > nodes * gpus // 2:
            old_id, old_node, old_uuid, old_index = live.popleft()
            log.append(ev.ClaimReleased(claim_id=old_id, at=now))
            free.append((old_node, old_uuid, old_index))
        i += 1
    return list(enumerate(log[:events], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--db", default="", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--schema", default=None,
                        help="PostgreSQL schema (its read-model tables are dropped and recreated)")
    args = parser.parse_args()
    events = synthetic_log(args.events)
    started = time.perf_counter()
    fold(events)
    fold_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        engine = make_engine(args.db or f"sqlite:///{tmp}/bench.db", args.schema)
        drop_all(engine)
        migrate(engine)
        started = time.perf_counter()
        Projector(engine).project(events, batch=args.batch)
        project_s = time.perf_counter() - started
        engine.dispose()
    print(f"{len(events)} events, batch {args.batch}, {engine.url.get_backend_name()}")
    print(f"fold only:        {len(events) / fold_s:>10.0f} events/s")
    print(f"fold + SQL:       {len(events) / project_s:>10.0f} events/s ({project_s:.2f}s)")


if __name__ == "__main__":
    main()
