"""The allocator's catch-up measured without NATS, for comparing trees and counting instructions.

`bench replay` times a rebuild over a real stream, which mixes the read (frames cut out of the
socket) with the catch-up and takes minutes to write its log. This writes the same log once (the
generator and seed of `bench replay`) to a file, as the stored batches a range read hands over,
then catches up on it in this process as often as asked: the allocator's own catch-up
(`bench.replay.catch_up_without_read`: decode, admit, fold, shed, index flush), with the CPU
seconds of each run and the rebuilt state checked against the live fold's digest.

    python -m bench.replay_offline write --events 200000 --out /tmp/log200k.pkl
    python -m bench.replay_offline catch-up /tmp/log200k.pkl --runs 3

Each catch-up runs inside `operator.call`, so callgrind can count it alone (not the loading):

    valgrind --tool=callgrind --toggle-collect=_operator_call \\
        python -m bench.replay_offline catch-up /tmp/log200k.pkl --runs 1

To compare two trees, run each from its own folder with itself on PYTHONPATH, byte-compiled first
(`python -m compileall -q TREE`: where PYTHONDONTWRITEBYTECODE is set, a tree without .pyc files
pays for compiling in every run), and alternate them. The file is a pickle: read only files you
wrote yourself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import pickle
import sys
import time

from schemas.events import encode_event

from bench.replay import catch_up_without_read
from bench.replay_child import state_digest
from bench.replay_log import SyntheticLog

BATCH = 4096  # messages per stored batch: what one pull of shared.fastread hands over


def stored_log(events: int, nodes: int = 1000, seed: int = 1) -> dict:
    """`bench replay`'s log of at least `events` events, as stored batches of (seq, subject,
    payload, headers), with the digest of the live fold of exactly those messages."""
    log = SyntheticLog(nodes, seed=seed, batched=True)
    rows, count = [], 0
    for seq, (subject, event, carried) in enumerate(log.messages(), 1):
        rows.append((seq, subject, encode_event(event), {}))
        count += carried
        if count >= events:
            break
    return {"batches": [rows[i:i + BATCH] for i in range(0, len(rows), BATCH)], "events": count,
            "messages": len(rows), "nodes": nodes, "seed": seed, "digest": state_digest(log.settled())}


def catch_up(batches: list) -> tuple[str, float, float]:
    """One catch-up over `batches`: (digest of the rebuilt state, CPU seconds, wall seconds)."""
    rebuilt = []

    async def run() -> None:  # returns nothing: the state stays out of asyncio.run's task
        state, _seconds = await catch_up_without_read(batches)
        rebuilt.append(state)

    cpu, wall = time.process_time(), time.perf_counter()
    operator.call(asyncio.run, run())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return state_digest(rebuilt.pop()), cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replay_offline", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="write bench replay's log to a file as stored batches")
    write.add_argument("--events", type=int, default=200_000, help="events in the log (at least 1)")
    write.add_argument("--nodes", type=int, default=1000, help="nodes of the fleet (at least 1)")
    write.add_argument("--out", required=True, help="the file to write (a pickle)")
    run = commands.add_parser("catch-up", help="catch up on a written log; one JSON line per run")
    run.add_argument("log", help="a file written by `write`")
    run.add_argument("--runs", type=int, default=1, help="catch-ups in this process (at least 1)")
    args = parser.parse_args(argv)
    if args.command == "write":
        if args.events < 1 or args.nodes < 1:
            parser.error("--events and --nodes must be at least 1")
        log = stored_log(args.events, args.nodes)
        with open(args.out, "wb") as out:
            pickle.dump(log, out, protocol=pickle.HIGHEST_PROTOCOL)
        print(json.dumps({key: log[key] for key in ("events", "messages", "nodes", "digest")}))
        return 0
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    with open(args.log, "rb") as source:
        log = pickle.load(source)
    if not isinstance(log, dict) or not {"batches", "digest"} <= log.keys():
        parser.error(f"{args.log} is not a log written by `write` (no batches and digest)")
    messages = sum(len(batch) for batch in log["batches"])  # older logs did not say
    agreed = True
    for _ in range(args.runs):
        digest, cpu, wall = catch_up(log["batches"])
        agreed = agreed and digest == log["digest"]
        print(json.dumps({"events": log.get("events"), "messages": messages, "cpu_s": round(cpu, 3),
                          "wall_s": round(wall, 3), "digest_checked": digest == log["digest"],
                          "cpu_load_1m": round(os.getloadavg()[0], 2)}), flush=True)
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
