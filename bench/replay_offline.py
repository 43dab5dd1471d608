"""The allocator's catch-up measured without NATS, for comparing trees and counting instructions.

`bench replay` times a rebuild over a real stream, which mixes the read (frames cut out of the
socket) with the catch-up and takes minutes to write its log. This writes the same log once (the
generator and seed of `bench replay`) to a file, as the stored batches a range read hands over,
then catches up on it in this process as often as asked: the allocator's own catch-up
(`bench.replay.catch_up_without_read`: decode, admit, fold, shed, index flush), with the CPU
seconds of each run and the rebuilt state checked against the live fold's digest.

    python -m bench.replay_offline write --events 200000 --out /tmp/log200k.pkl
    python -m bench.replay_offline catch-up /tmp/log200k.pkl --runs 3
    python -m bench.replay_offline catch-up /tmp/log200k.pkl --frames decoded

`--frames rows` or `decoded` hands the batches over as the read-ahead helper's frames
(`shared.readahead`, made before the clock starts): the caller's whole share of a rebuild.

Each catch-up runs inside `operator.call`, so callgrind can count it alone (not the loading):

    valgrind --tool=callgrind --toggle-collect=_operator_call \\
        python -m bench.replay_offline catch-up /tmp/log200k.pkl --runs 1

The full rebuild over a real stream, without the minutes `bench replay` takes to generate its log:
`rebuild` stores a written log in an embedded nats-server once, then runs the rebuild process of
`bench replay` (`bench.replay_child`: the allocator's start path, read-ahead helper included) from
each `--tree` in turn, as often as asked, and checks each rebuilt state against the log's digest.
Runs alternate between the trees under the same load, on the same stored stream:

    python -m bench.replay_offline rebuild /tmp/log1m.pkl --tree /tmp/before --tree . --runs 3

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


class Frames:
    """The batches as the read-ahead helper's frames (`shared.readahead`), made before the clock
    starts; the catch-up takes each out of its frame as the caller does (`frames="rows"`: rows
    with the helper's authority marks, `"decoded"`: `DecodedRows` as the allocator's catch-up gets
    them, the events of claims released later left out; `"decoded-all"`: every event)."""

    def __init__(self, batches: list, frames: str):
        import msgspec

        from shared import readahead

        encode, self.kind, self.readahead = msgspec.msgpack.Encoder().encode, frames, readahead
        self.end = batches[-1][-1][0] if batches else 0
        if frames in ("decoded", "decoded-all"):  # as the allocator's catch-up gets them, or every event
            maker = readahead.DecodedFrames(drop_dead=frames == "decoded", until_seq=self.end)
            self.frames = [body for batch in batches for body in maker.add(batch)] + maker.finish()
        else:
            self.frames = [encode((batch, readahead._admitted(batch))) for batch in batches]

    async def last_seq(self) -> int:
        return self.end

    async def follow_raw(self, from_seq: int = 1, **_):
        readahead = self.readahead
        for body in self.frames:
            if self.kind != "rows":
                yield readahead.decoded_rows(body)
            else:
                yield readahead.AdmittedRows(*readahead._ROWS.decode(body))
        await asyncio.Event().wait()  # no live tail


def catch_up(batches: list, frames: str = "none") -> tuple[str, float, float]:
    """One catch-up over `batches`: (digest of the rebuilt state, CPU seconds, wall seconds).
    `frames`: "none" (rows as a range read gives them, every check made here), or "rows" /
    "decoded" (what the read-ahead helper hands over: `Frames`)."""
    rebuilt = []
    log = Frames(batches, frames) if frames != "none" else None

    async def run() -> None:  # returns nothing: the state stays out of asyncio.run's task
        state, _seconds = await catch_up_without_read(batches, log)
        rebuilt.append(state)

    cpu, wall = time.process_time(), time.perf_counter()
    operator.call(asyncio.run, run())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return state_digest(rebuilt.pop()), cpu, wall


async def store(url: str, batches: list) -> dict:
    """Publish a written log's rows to a fresh GPULEDGER stream as `bench replay` writes them (a
    window of acks, no headers); returns the messages, seconds and the stream's last sequence."""
    from bench.replay import Writer
    from shared.jetstream import JetStreamEventLog, connect, ensure_streams

    nc = await connect(url, name="bench-replay-offline")
    try:
        await ensure_streams(nc.jetstream())
        log = JetStreamEventLog(nc)
        if await log.last_seq() != 0:
            raise SystemExit("the stream is not empty")
        writer, start, messages = Writer(nc), time.perf_counter(), 0
        await writer.start()
        for batch in batches:
            for _seq, subject, payload, _headers in batch:
                await writer.publish(subject, payload)
                messages += 1
        await writer.drain()
        return {"messages": messages, "seconds": time.perf_counter() - start,
                "last_seq": await log.last_seq()}
    finally:
        await nc.close()


def rebuild_from(tree: str, url: str) -> dict:
    """`bench.replay_child` run from `tree` (its own code on its path, as the lead compares trees)."""
    import subprocess

    root = os.path.abspath(tree)
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run([sys.executable, "-m", "bench.replay_child", url], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the rebuild from {tree} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cpu_of(pid: int) -> float:
    """CPU seconds a process has used (user + system, Linux's /proc), 0.0 where unreadable: the
    nats-server's share of a rebuild shares the read-ahead helper's core."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def rebuilds(log: dict, trees: list[str], runs: int) -> bool:
    import tempfile

    from shared.natsserver import start_nats_server

    agreed = True
    with tempfile.TemporaryDirectory(prefix="gpuledger-replay-offline-") as folder:
        server = start_nats_server(folder)
        try:
            wrote = asyncio.run(store(server.url, log["batches"]))
            print(json.dumps({"stored_messages": wrote["messages"], "last_seq": wrote["last_seq"],
                              "write_seconds": round(wrote["seconds"], 2)}), flush=True)
            for run in range(runs):
                for tree in trees:
                    served = _cpu_of(server.process.pid)
                    child = rebuild_from(tree, server.url)
                    child["nats_server_cpu_s"] = round(_cpu_of(server.process.pid) - served, 2)
                    checked = child.pop("digest") == log["digest"]
                    agreed = agreed and checked
                    print(json.dumps({"tree": tree, "run": run, "seconds": round(child.pop("seconds"), 3),
                                      **child, "digest_checked": checked,
                                      "cpu_load_1m": round(os.getloadavg()[0], 2)}), flush=True)
        finally:
            server.stop()
    return agreed


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
    run.add_argument("--frames", choices=("none", "rows", "decoded", "decoded-all"), default="none",
                     help="none: rows as a range read gives them; rows / decoded: as the read-ahead "
                          "helper's frames give them (made before the clock starts; decoded: as the "
                          "allocator gets them, without the events of claims released later; "
                          "decoded-all: with every event)")
    full = commands.add_parser("rebuild", help="store a written log in an embedded nats-server and time "
                               "the full rebuild (read-ahead included) from each tree; one JSON line per run")
    full.add_argument("log", help="a file written by `write`")
    full.add_argument("--tree", action="append", help="a source tree whose rebuild to run (repeatable; "
                      "default: this one); runs alternate between trees")
    full.add_argument("--runs", type=int, default=1, help="rebuilds per tree (at least 1)")
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
    if args.command == "rebuild":
        trees = args.tree or [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
        return 0 if rebuilds(log, trees, args.runs) else 1
    messages = sum(len(batch) for batch in log["batches"])  # older logs did not say
    agreed = True
    for _ in range(args.runs):
        digest, cpu, wall = catch_up(log["batches"], args.frames)
        agreed = agreed and digest == log["digest"]
        print(json.dumps({"events": log.get("events"), "messages": messages, "frames": args.frames,
                          "cpu_s": round(cpu, 3),
                          "wall_s": round(wall, 3), "digest_checked": digest == log["digest"],
                          "cpu_load_1m": round(os.getloadavg()[0], 2)}), flush=True)
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
