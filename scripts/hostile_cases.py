"""Issue 16's hostile cases against a running `gpuledger up --demo --agent-node gpu-x` (docs/trust.md).

Usage: .venv/bin/python scripts/hostile_cases.py DATA_DIR   (one line per case; "ok" or "FAIL")
Run from the repository root (it imports schemas). Cases 5, 7, 9-11 were run by hand (docs/trust.md).
"""
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import nats

from schemas import events as ev
from schemas import subjects
from schemas.events import encode_event
from schemas.types import ClaimSpec

DATA = Path(sys.argv[1])
ENV = dict(line.split("=", 1) for line in (DATA / "env").read_text().split() if "=" in line)
PASSWORDS = json.loads((DATA / "nats-users.json").read_text())
OPS, PUB = ENV["GPULEDGER_NATS_URL"], ENV["GPULEDGER_PUBLISHER_URL"]
HOSTPORT = OPS.rsplit("@", 1)[1]
GPULEDGER = str(Path(sys.executable).parent / "gpuledger")
OUT = []


def say(case, verdict, detail=""):
    line = f"{case:4} {verdict:8} {detail}"
    OUT.append(line)
    print(line, flush=True)


def url(user):
    return f"nats://{user}:{PASSWORDS[user]}@{HOSTPORT}"


def cli(*args):
    done = subprocess.run([GPULEDGER, *args], env={"GPULEDGER_NATS_URL": OPS, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def status(claim_id):
    rc, out = cli("claim", "get", claim_id, "--json")
    try:
        return json.loads(out)["status"] if rc == 0 else f"rc={rc}"
    except ValueError:
        return out.strip()[-80:]


async def connect(user_url, **kw):
    errors = []

    async def on_error(err):
        errors.append(str(err))
    nc = await nats.connect(user_url, error_cb=on_error, allow_reconnect=False, **kw)
    return nc, errors


async def publish_refused(user, subject, payload=b"{}", **kw):
    nc, errors = await connect(url(user), **kw)
    await nc.publish(subject, payload)
    await nc.flush()
    for _ in range(50):
        if any("violation" in e.lower() for e in errors):
            break
        await asyncio.sleep(0.05)
    await nc.close()
    return any("violation" in e.lower() for e in errors)


async def request_refused(user, subject, payload=b"", **kw):
    nc, errors = await connect(url(user), **kw)
    try:
        await nc.request(subject, payload, timeout=1)
        got = True
    except Exception:
        got = False
    for _ in range(50):
        if any("violation" in e.lower() for e in errors):
            break
        await asyncio.sleep(0.05)
    await nc.close()
    return (not got) and any("violation" in e.lower() for e in errors)


async def submit(claim, wait=10.0):
    nc = await nats.connect(PUB)
    await nc.jetstream().publish(subjects.INTAKE_CLAIMS, claim if isinstance(claim, bytes) else json.dumps(claim).encode(),
                                 headers={"Nats-Msg-Id": f"h-{time.time_ns()}"})
    await nc.close()


async def outcome(claim_id, wanted, timeout=30.0):
    nc = await nats.connect(PUB)
    js = nc.jetstream()
    seen = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                seen = json.loads((await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(claim_id), direct=True)).data)
                if seen.get("status") in wanted:
                    return seen
            except Exception:
                pass
            await asyncio.sleep(0.2)
        return seen
    finally:
        await nc.close()


async def main():
    # 1. who writes the ledger
    try:
        nc = await nats.connect(f"nats://{HOSTPORT}", allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=2)
        await nc.close()
        say("1a", "FAIL", "anonymous connection accepted")
    except Exception:
        say("1a", "ok", "anonymous connection refused")
    forged = encode_event(ev.DecisionBatch(decisions=[ev.ClaimEvicted(claim_id="x", rule="priority")], at=1.0))
    say("1b", "ok" if await publish_refused("publisher", subjects.DECISIONS, forged) else "FAIL",
        "publisher refused on gpu.evt.decision")
    say("1c", "ok" if await publish_refused("publisher", subjects.claim("x"), forged) else "FAIL",
        "publisher refused on a claim's subject")
    agent = dict(inbox_prefix=b"_INBOX_node-gpu-x")
    say("1d", "ok" if await publish_refused("node-gpu-x", subjects.node("h100-0"), b"{}", **agent) else "FAIL",
        "node agent gpu-x refused on another node's subject")
    mark = encode_event(ev.ClaimEnding(claim_id="x", decision="ClaimEvicted", fence=0, at=1.0))
    say("1e", "ok" if await publish_refused("claim", subjects.ending("x"), mark, inbox_prefix=b"_INBOX_claim") else "FAIL",
        "claim service refused on gpu.evt.ending.x (a forged ending mark)")
    say("1e2", "ok" if await publish_refused("claim", subjects.node_endings("x"), mark, inbox_prefix=b"_INBOX_claim")
        else "FAIL", "claim service refused on gpu.evt.fence.x.ending (a forged ending mark)")
    stream = subjects.STREAM
    reads = [f"$JS.API.DIRECT.GET.{stream}.{subjects.DECISIONS}", f"$JS.API.DIRECT.GET.{stream}.{subjects.claim('x')}",
             f"$JS.API.CONSUMER.CREATE.{stream}", f"$JS.API.DIRECT.GET.{stream}"]
    refused = [await request_refused("node-gpu-x", s, b'{"last_by_subj":"gpu.evt.decision"}', **agent) for s in reads]
    say("1f", "ok" if all(refused) else "FAIL", f"node agent gpu-x refused reading decisions/claims/unfiltered: {refused}")

    # a claim to watch, then forgeries the fold must drop
    await submit({"claim_id": "h-held", "namespace": "team-a", "gpus": 8})
    held = await outcome("h-held", {"bound"})
    say("  ", "..", f"h-held {held.get('status')} on {held.get('node')}")
    nc = await nats.connect(url("claim"), inbox_prefix=b"_INBOX_claim")
    js = nc.jetstream()
    await js.publish(subjects.claim("h-held"), encode_event(ev.DecisionBatch(decisions=[ev.ClaimEvicted(claim_id="h-held", rule="priority")], at=1.0)))
    await js.publish(subjects.claim("h-held"), encode_event(ev.ClaimEnding(claim_id="h-held", decision="ClaimEvicted", fence=0, at=1.0)))
    # 2. an empty DecisionBatch elsewhere used to stall the allocator
    await js.publish(subjects.claim("x-empty"), encode_event(ev.DecisionBatch(decisions=[], at=1.0)))
    await nc.close()
    await submit({"claim_id": "h-after-forgery", "namespace": "team-b", "gpus": 1})
    after = await outcome("h-after-forgery", {"bound", "allocated"})
    say("1g", "ok" if status("h-held") == "bound" else "FAIL", f"forged eviction and ending mark on the claim's subject dropped: h-held {status('h-held')}")
    say("2", "ok" if after.get("status") in ("bound", "allocated") else "FAIL",
        f"empty DecisionBatch on a claim's subject: next claim {after.get('status')}")

    # 3. poison on the intake
    for raw in (b'{"claim_id": "h-utf", "namespace": "team-a\xff\xfe", "gpus": 1}', b"[" * 1000 + b"]" * 1000, b"not json"):
        await submit(raw)
    await submit({"claim_id": "h-after-poison", "namespace": "team-a", "gpus": 1})
    poisoned = await outcome("h-after-poison", {"bound", "allocated"})
    ops = await nats.connect(OPS)
    dead = 0
    try:
        info = await ops.jetstream().stream_info(stream, subjects_filter=f"{subjects.DEAD_LETTER}.>")
        dead = sum((info.state.subjects or {}).values())
    except Exception as err:
        dead = f"? {err}"
    await ops.close()
    say("3", "ok" if poisoned.get("status") in ("bound", "allocated") else "FAIL",
        f"invalid UTF-8, 1000-deep nesting, not JSON: next claim {poisoned.get('status')}; dead letters stored {dead}")

    # 4. numbers that crashed every allocator
    for cid, extra in (("h-big-limit", {"limit_vram_gib": 1e307}), ("h-big-mem", {"gpu_memory_gib": 1.7e308})):
        await submit({"claim_id": cid, "namespace": "team-a", "gpus": 1, **extra})
    big = [(await outcome(c, {"rejected"}, 10)).get("status") for c in ("h-big-limit", "h-big-mem")]
    await submit({"claim_id": "h-after-big", "namespace": "team-a", "gpus": 1})
    ok4 = (await outcome("h-after-big", {"bound", "allocated"})).get("status")
    say("4", "ok" if ok4 in ("bound", "allocated") and all(b in ("rejected", None) for b in big) else "FAIL",
        f"1e307 / 1.7e308: outcomes {big}; next claim {ok4}")

    # 6. the intake must not cancel another's pending claim
    await submit({"claim_id": "h-pending", "namespace": "team-c", "gpus": 8, "models": ["H100"], "priority": -5})
    first = (await outcome("h-pending", {"pending", "allocated", "bound"})).get("status")
    await submit({"claim_id": "h-pending", "namespace": "team-c", "gpus": 1})
    await submit(b'{"claim_id": "h-pending", "namespace": 5}')
    await asyncio.sleep(2)
    say("6", "ok" if status("h-pending") in ("pending", "allocated", "bound") else "FAIL",
        f"a different spec and a malformed payload under h-pending's id: it stays {status('h-pending')} (was {first})")

    # 8. names
    await submit({"claim_id": "h-nl", "namespace": "team-a\n", "gpus": 1})
    nl = (await outcome("h-nl", {"rejected"}, 5)).get("status")
    await submit({"claim_id": "col.a", "namespace": "team-a", "gpus": 0, "cpu_milli": 100})
    await outcome("col.a", {"bound", "allocated", "pending"}, 10)
    await submit({"claim_id": "col_a", "namespace": "team-a", "gpus": 0, "cpu_milli": 100})
    await asyncio.sleep(2)
    say("8", "ok" if nl in ("rejected", None) and status("col_a") != "bound" else "FAIL",
        f"'team-a\\n' -> {nl or 'no outcome (dead-lettered)'}; 'col_a' after 'col.a' -> {status('col_a')}")
    print("\n".join(OUT), file=sys.stderr)


asyncio.run(main())
