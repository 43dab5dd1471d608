"""A hostile client of gpuledger's NATS: as one user, it aims every reply it can make nats-server
send (a JetStream publish's acknowledgement, a JetStream API answer, a push consumer's deliveries)
at ledger subjects that user may not publish, and counts what the streams stored there.

nats-server sends an acknowledgement or an API answer to whatever reply subject the request names,
checked against no permission, as a message of the account the request is handled in: in the
streams' account, a stream listening there stores it (docs/security.md). Each provocation here
stores nothing of the attacker's own: its publishes carry an expected last sequence the subject
never has, so the stream refuses them and sends only its error acknowledgement.

    python -m tests.trust_agents.hostile --data-dir .gpuledger   # against `gpuledger up --demo`

(as every user in DATA_DIR/nats-users.json; ops only reads the streams). Prints one JSON line per
user: what was stored on subjects it may not publish, per target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.js import api
from nats.js.errors import NotFoundError

from schemas import subjects
from shared import nats_auth

NEVER = "999999999"  # an expected last sequence no subject has: the publish is refused, not stored
STREAMS = (subjects.STREAM, subjects.OUTCOMES_STREAM, subjects.NODE_GRANTS_STREAM)


def targets(victim_node: str, victim_claim: str) -> list[str]:
    """Subjects no node agent nor service but one writer may publish, each in a stream."""
    return [subjects.DECISIONS, subjects.claim(victim_claim), subjects.outcome(victim_claim),
            subjects.node_grants(victim_node), subjects.node_bindings(victim_node)]


def own_subject(user: str, node: str) -> str | None:
    """A ledger subject `user` may publish (its provocations name it), or None (it may publish on
    none: it can still provoke API answers)."""
    own = {"claim": f"{subjects.DEAD_LETTER}.hostile", "allocator": subjects.ending("hostile"),
           "quota": subjects.quota("hostile"), "pool-controller": subjects.pool("hostile")}
    if user.startswith("node-"):
        return f"{subjects.node(node)}.hostile"
    return own.get(user)


def may_publish(role: nats_auth.Role, subject: str) -> bool:
    return any(nats_auth.matches(p, subject) for p in role.publish)


@dataclass
class Found:
    user: str
    stored: dict[str, int] = field(default_factory=dict)  # target -> messages stored there
    sent: int = 0
    pushed: "Pushed | None" = None  # push consumers' deliveries onto targets

    @property
    def total(self) -> int:
        return sum(self.stored.values())


async def _last_seqs(js) -> dict[str, int]:
    return {s: (await js.stream_info(s)).state.last_seq for s in STREAMS}


async def _stored_since(js, since: dict[str, int], wanted: set[str]) -> dict[str, int]:
    """Messages stored on `wanted` subjects after `since` (each stream's last sequence before)."""
    counts: dict[str, int] = {}
    for stream in STREAMS:
        last = (await js.stream_info(stream)).state.last_seq
        for seq in range(since[stream] + 1, last + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except NotFoundError:  # replaced since (a latest-per-subject stream)
                continue
            if msg.subject in wanted:
                counts[msg.subject] = counts.get(msg.subject, 0) + 1
    return counts


async def _settled(ops, js, sentinel_from: str) -> None:
    """Wait until what the attacker provoked has reached the streams: ops provokes one error
    acknowledgement of the same stream to a subject of its own in each stream, sent after the
    attacker's, and waits for it to be stored."""
    sentinels = {subjects.STREAM: f"{subjects.DEAD_LETTER}.hostile-sentinel",
                 subjects.OUTCOMES_STREAM: subjects.outcome("hostile-sentinel"),
                 subjects.NODE_GRANTS_STREAM: subjects.node_grants("hostile-sentinel")}
    before = await _last_seqs(js)
    for sentinel in sentinels.values():
        await ops.publish(sentinel_from, b"{}", reply=sentinel, headers={"Nats-Expected-Last-Subject-Sequence": NEVER})
    await ops.flush()
    for _ in range(1200):  # a loaded machine takes its time; never a verdict on how long
        if len(await _stored_since(js, before, set(sentinels.values()))) == len(sentinels):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the sentinel acknowledgements were never stored")


async def provoke(attacker, ops, role: nats_auth.Role, node: str, aims: list[str], times: int = 20) -> Found:
    """`attacker` (connected as `role.user`, on its own inbox prefix) aims acknowledgements and API
    answers at each of `aims` `times` times; `ops` reads what the streams stored there."""
    js = ops.jetstream()
    found = Found(role.user)
    wanted = {a for a in aims if not may_publish(role, a)}
    before = await _last_seqs(js)
    own = own_subject(role.user, node)
    for aim in wanted:
        for _ in range(times):
            if own and may_publish(role, own):  # an acknowledgement (a refusal) to `aim`
                await attacker.publish(own, b"{}", reply=aim, headers={"Nats-Expected-Last-Subject-Sequence": NEVER})
                found.sent += 1
            await attacker.publish("$JS.API.INFO", b"", reply=aim)  # an API answer to `aim`
            found.sent += 1
    await attacker.flush()
    await _settled(ops, js, own if own else f"{subjects.DEAD_LETTER}.hostile")
    found.stored = await _stored_since(js, before, wanted)
    return found


@dataclass
class Pushed:
    stored: int = 0  # deliveries the streams stored on an aim or off their stream's subjects
    heard: int = 0  # deliveries a listener on an aim received (ops or a waiting publisher)
    made: int = 0  # push consumers the server let the attacker make


def _push_consumers(role: nats_auth.Role, node: str) -> list[tuple[str, str, str | None]]:
    """(stream, consumer name, filter) of the push consumers `role`'s user may make: a node agent
    its own watch (its record's key); a service any consumer on each stream it reads."""
    if role.user.startswith("node-") and role.user != nats_auth.DEMO_AGENTS:
        return [(subjects.NODE_GRANTS_STREAM, subjects.records_watcher(node), subjects.node_grants(node))]
    readable = [s for s in (*STREAMS, subjects.INTAKE_STREAM) if f"$JS.API.CONSUMER.CREATE.{s}.>" in role.publish]
    return [(s, "hostile-push", None) for s in readable]


async def push_onto(attacker, ops, role: nats_auth.Role, node: str, aims: list[str], publisher=None,
                    ops_listens: bool = True) -> Pushed:
    """Push consumers the attacker may make (`_push_consumers`) delivering onto each of `aims`,
    with someone listening there: ops on every aim (an operator's `nats sub`; unless not
    `ops_listens`), and `publisher` (a
    PUBLIC connection) on outcome aims, as a publisher waiting for that claim's outcome would.
    What the streams stored, and what the listeners heard."""
    js, ajs = ops.jetstream(), attacker.jetstream()
    found = Pushed()
    before = await _last_seqs(js)
    for aim in aims:
        listeners = [ops] if ops_listens else []
        listeners += [publisher] if publisher and aim.startswith("gpu.outcome.") else []
        for stream, name, only in _push_consumers(role, node):
            subs = [await nc.subscribe(aim) for nc in listeners]
            for nc in listeners:
                await nc.flush()
            try:
                await ajs.add_consumer(stream, config=api.ConsumerConfig(
                    name=name, filter_subject=only, deliver_subject=aim,
                    deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT if only else api.DeliverPolicy.LAST,
                    ack_policy=api.AckPolicy.NONE))
                found.made += 1
            except Exception:  # refused: nothing to count
                for sub in subs:
                    await sub.unsubscribe()
                continue
            for sub in subs:
                try:
                    await sub.next_msg(timeout=2)  # delivered (it is not, where the server refuses)
                    found.heard += 1
                except nats.errors.TimeoutError:
                    pass
                await sub.unsubscribe()
            try:
                await ajs.delete_consumer(stream, name)
            except Exception:
                pass
    await _settled(ops, js, f"{subjects.DEAD_LETTER}.hostile")
    found.stored = await _misplaced_since(js, before, set(aims))
    return found


async def _misplaced_since(js, since: dict[str, int], aims: set[str]) -> int:
    """Messages stored after `since` on one of `aims`, or on a subject outside their stream's own
    (a stream stores a delivery it takes in under the subject the message was first published on)."""
    count = 0
    for stream in STREAMS:
        info = await js.stream_info(stream)
        for seq in range(since[stream] + 1, info.state.last_seq + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except NotFoundError:
                continue
            if msg.subject in aims or not any(nats_auth.matches(s, msg.subject) for s in info.config.subjects):
                count += 1
    return count


async def run(data_dir: Path, host: str, port: int, times: int, ops_listens: bool = True) -> list[Found]:
    passwords = json.loads((data_dir / nats_auth.SECRETS_FILE).read_text())
    url = lambda user: nats_auth.user_url(user, passwords[user], host, port)  # noqa: E731
    ops = await nats.connect(url(nats_auth.OPS), inbox_prefix=nats_auth.user_inbox(nats_auth.OPS))
    publisher = await nats.connect(url(nats_auth.PUBLISHER))
    keys = [k.rsplit(".", 1)[-1] for k in await _grant_keys(ops.jetstream())]
    out = []
    for user in passwords:
        if user in (nats_auth.OPS, nats_auth.PUBLISHER) or user.startswith("system-"):
            continue
        node = user[len("node-"):] if user.startswith("node-") and user != nats_auth.DEMO_AGENTS else \
            (keys or ["gpu-x"])[0]
        victim = next((k for k in keys if k != node), "gpu-y")
        aims = targets(victim, "hostile-victim")
        role = _role_of(user, node)
        attacker = await nats.connect(url(user), inbox_prefix=nats_auth.user_inbox(user))
        try:
            found = await provoke(attacker, ops, role, node, aims, times)
            found.pushed = await push_onto(attacker, ops, role, node, [a for a in aims if not may_publish(role, a)],
                                           publisher, ops_listens)
        finally:
            await attacker.close()
        out.append(found)
    await ops.close()
    await publisher.close()
    return out


async def _grant_keys(js) -> list[str]:
    info = await js.stream_info(subjects.NODE_GRANTS_STREAM, subjects_filter=">")
    return sorted((info.state.subjects or {}).keys())


def _role_of(user: str, node: str) -> nats_auth.Role:
    if user.startswith("node-"):
        return nats_auth.node_role(user, [node], simulated=user == nats_auth.DEMO_AGENTS)
    return next(r for r in nats_auth.service_roles() if r.user == user)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(".gpuledger"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4222)
    parser.add_argument("--times", type=int, default=20, help="provocations per target and kind")
    parser.add_argument("--no-ops-listener", action="store_true",
                        help="push consumers' aims: only a publisher listens (on outcome subjects), not ops")
    args = parser.parse_args()
    for found in asyncio.run(run(args.data_dir, args.host, args.port, args.times, not args.no_ops_listener)):
        pushed = found.pushed or Pushed()
        print(json.dumps({"user": found.user, "sent": found.sent, "stored": found.stored,
                          "stored_total": found.total, "push_made": pushed.made,
                          "push_heard": pushed.heard, "push_stored": pushed.stored}))


if __name__ == "__main__":
    main()
