"""Who may do what on NATS: the one table of users and their permissions (docs/security.md).

Every writer of the ledger gets a user of its own that may publish only the subjects its events
belong on (only the allocator writes `gpu.evt.decision` and the node-grant records; a node agent
only its own node's subjects), `ops` may do everything (the CLI), `publisher` may only submit
claims and read their outcomes, and each declared publishing system (`system-<name>`,
schemas/systems.py) may submit, release and renew on the subjects carrying its own name. `gpuledger up`, `gpuledger nats config` and deploy/nats all build
their nats-server configuration from `roles()` here, so the three cannot drift apart.

Several NATS accounts. nats-server sends a JetStream publish's acknowledgement (and a JetStream
API answer) to whatever reply subject the publisher names, checked against no permission; inside
the streams' account that put the server's own message on any ledger or outcome subject, where the
streams stored it. So only ops shares the streams' account (`LEDGER`); the publishers (`PUBLIC`:
`publisher` and every `system-<name>`, session 31), the node agents (`AGENTS`: every `node-<name>`
and a simulated fleet's `node-agents`, session 32) and each service (`SVC_<NAME>`, session 33)
have accounts of their own that reach the ledger only through imports (`account_imports`): what
their users may publish as service imports (the acknowledgement or reply goes back through the
import's response mapping, to the reply subject in their own account, where no stream listens),
what they may subscribe to as stream imports (a service's or node agent's inbox prefix too: its
consumers' deliveries are published in LEDGER). What a service or a fleet serves (`Role.exported`)
goes the other way: LEDGER imports it from the serving account (`served_imports`), and
a publisher's live outcomes come from the claim service's account, which publishes them
(`published_imports`), so nothing in LEDGER subscribes where a push consumer could be aimed at them.

JetStream is driven through request subjects (`$JS.API.<verb>.<stream>...`): a user gets the verbs
it needs on the streams it needs. No role but ops may delete, purge or update a stream (the
allocator purges only the chunks of its own snapshot bucket, which the object store requires).
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from schemas import subjects
from schemas import systems as sysmod

OBJECT_STREAM = f"OBJ_{subjects.SNAPSHOT_BUCKET}"
ALL_STREAMS = (subjects.STREAM, subjects.INTAKE_STREAM, subjects.OUTCOMES_STREAM,
               subjects.NODE_GRANTS_STREAM)
SERVICES = ("claim", "allocator", "quota", "pool-controller", "projector", "dashboard")
OPS, PUBLISHER = "ops", "publisher"
DEMO_AGENTS = "node-agents"  # the simulated fleet of `up --demo`: one process for every node
SECRETS_FILE = "nats-users.json"
NKEYS_FILE = "nats-nkeys.json"  # each user's nkey seed (private: mode 0600)
NKEY_SEED_ENV = "GPULEDGER_NATS_NKEY_SEED_FILE"  # a client's seed file (shared.natscluster)
LEDGER_ACCOUNT, PUBLIC_ACCOUNT, AGENTS_ACCOUNT = "LEDGER", "PUBLIC", "AGENTS"  # module docstring


def service_account(user: str) -> str:
    """The account of one service's user (`SVC_CLAIM`, `SVC_POOL_CONTROLLER`): each service alone
    in an account without the streams (session 33), so no reply it provokes is stored and none
    reaches another service (an acknowledgement aimed at another service's inbox or requests)."""
    return "SVC_" + "".join(c if c.isalnum() else "_" for c in user).upper()


SERVICE_ACCOUNTS = tuple(service_account(u) for u in SERVICES)
# Each service in an account of its own (session 33, on again since session 34). A publisher's live
# outcomes come from the claim user's account only (`published_imports`), so every claim service
# must run as the `claim` user (as `up`, compose and deploy/ run it; `claim_account_warning` says
# so loudly when one does not).
SERVICES_IN_OWN_ACCOUNTS = True
# every account but LEDGER: they reach the ledger through imports only (`account_imports`)
OUTSIDE_ACCOUNTS = (PUBLIC_ACCOUNT, AGENTS_ACCOUNT, *SERVICE_ACCOUNTS)
# the accounts whose users create push consumers (a service's followers, a node agent's watch of
# its record): the deliveries, published in LEDGER on the user's inbox prefix, are imported as a
# stream; the publishers make no consumer
DELIVERED_ON_INBOX = (AGENTS_ACCOUNT, *SERVICE_ACCOUNTS)
# requests with several answers (a pull consumer's fetch): their exports keep the response open
STREAMED_RESPONSES = ("$JS.API.CONSUMER.MSG.NEXT.",)
# nats-server answers it in every account (its system account's import): who this connection is
USER_INFO = "$SYS.REQ.USER.INFO"
SYSTEM_REQUESTS = "$SYS."  # never imported from LEDGER: the server's own system account answers
READY = "gpu.sys.ready"  # shared.service.READY_SUBJECT (kept here: shared.service imports faststream)


@dataclass(frozen=True)
class Role:
    """A NATS user's rights. `allow_responses` lets it answer the requests it receives (its reply
    goes to the asker's inbox) without any right to publish on inboxes in general."""

    user: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool = True
    notes: str = field(default="", compare=False)
    account: str = LEDGER_ACCOUNT
    exported: tuple[str, ...] = ()  # subscriptions it serves, from its account, to LEDGER


def _info() -> list[str]:
    # stream info of every stream: each service checks at start that the streams exist
    return ["$JS.API.INFO", *(f"$JS.API.STREAM.INFO.{s}" for s in ALL_STREAMS)]


def _read(stream: str) -> list[str]:
    """Read a stream: direct and API gets, consumers of its own (ordered, pull, durable), acks
    and flow control of its deliveries."""
    return [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}",
            f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>",
            f"$JS.API.CONSUMER.CREATE.{stream}", f"$JS.API.CONSUMER.CREATE.{stream}.>",
            f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.*", f"$JS.API.CONSUMER.INFO.{stream}.*",
            f"$JS.API.CONSUMER.DELETE.{stream}.*", f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*",
            f"$JS.ACK.{stream}.>", f"$JS.FC.{stream}.>"]


def _create(*streams: str) -> list[str]:
    # creating a stream that exists with the same config is a no-op; it cannot change one
    return [f"$JS.API.STREAM.CREATE.{s}" for s in streams]


def _service(user: str, publish: list[str], serves: list[str], reads: tuple[str, ...] = (subjects.STREAM,),
             notes: str = "") -> Role:
    pub = [*publish, f"{READY}.{user}", USER_INFO, *_info(), *_create(*ALL_STREAMS)]
    for stream in reads:
        pub += _read(stream)
    # replies and deliveries on its own inbox prefix: no service may listen to another's replies
    return Role(user, tuple(dict.fromkeys(pub)), tuple(dict.fromkeys([*serves, f"{user_inbox(user)}.>"])),
                notes=notes, account=service_account(user) if SERVICES_IN_OWN_ACCOUNTS else LEDGER_ACCOUNT,
                exported=tuple(serves) if SERVICES_IN_OWN_ACCOUNTS else ())


def foreign_user_warning(service: str, url: str) -> str | None:
    """What a service connecting with `url` as another user than its own (`ops`, say) should say
    loudly at start, or None (its own user, an open server, an nkey seed: no name in the URL).
    The claim service's outcomes reach publishers live only from the claim user's account
    (`published_imports`): run as ops, they go to LEDGER, where no publisher hears them."""
    from shared.natscluster import url_user

    user = url_user(url)
    if service not in SERVICES or not user or user == service:
        return None
    if service == "claim" and SERVICES_IN_OWN_ACCOUNTS:
        what = ("publishers subscribed to their claims' outcomes (gpu.outcome.>) will receive none "
                "live: those come from the claim user's account only")
    else:
        what = "it runs with that user's rights and account, not its own"
    return (f"{service}: connected to NATS as user {user!r}, not {service!r}: {what}. Run each service "
            f"as its own user, as `gpuledger up`, docker-compose and deploy/k8s do "
            f"(`gpuledger nats creds {service}` prints its URL; docs/security.md)")


OWN_USER_ENV = "GPULEDGER_NATS_REQUIRE_OWN_USER"  # Settings.nats_require_own_user


def _is_nkey(user: str) -> bool:
    """nats-server names an nkey user by its public key: 56 characters starting with U."""
    return len(user) == 56 and user.startswith("U") and user.isalnum() and user.isupper()


def account_holder(account: str) -> str:
    """Whose credentials land in `account`, in words (for the refusal below)."""
    for user in SERVICES:
        if SERVICES_IN_OWN_ACCOUNTS and account == service_account(user):
            return f"the {user} service's"
    return {LEDGER_ACCOUNT: "ops' (or another user of the streams' account)", PUBLIC_ACCOUNT: "a publisher's",
            AGENTS_ACCOUNT: "a node agent's", GLOBAL_ACCOUNT: "none: an open server without users"
            }.get(account, "no gpuledger user's")


def identity_refusal(service: str, user: str, account: str) -> str | None:
    """Why `service`, connected as `user` in `account` (what nats-server's $SYS.REQ.USER.INFO
    says), must not start, or None. The account decides: each service is alone in its own (an nkey
    user's name is its public key, which says nothing of whose it is); a password user must also
    carry the service's own name. Only for gpuledger's services (`SERVICES`)."""
    if service not in SERVICES:
        return None
    expected = service_account(service) if SERVICES_IN_OWN_ACCOUNTS else LEDGER_ACCOUNT
    if account == expected and (user == service or _is_nkey(user)):
        return None
    found = f"nkey user {user[:8]}... in account {account!r}" if _is_nkey(user) else f"user {user!r} in account {account!r}"
    return (f"{service}: connected to NATS as {found} ({account_holder(account)} credentials), expected "
            f"user {service!r} (or its nkey) in account {expected!r}: refusing to start ({OWN_USER_ENV}=1). "
            f"A service with another's credentials writes with that one's rights, and its replies and "
            f"outcomes go where the other's go. Give it its own: `gpuledger nats creds {service}` prints "
            f"its URL; on Kubernetes its nkey seed is the Secret gpuledger-nats-{service} (docs/security.md)")


def service_roles() -> list[Role]:
    return [
        # gpu.evt.fence.*.release: releases of claims allocated on a node and not bound yet, under
        # the node's binding fence (subjects.node_fence); never the allocator's ending marks there
        _service("claim", ["gpu.evt.claim.*", subjects.INTAKE_BATCHES, subjects.SUBMITS, "gpu.evt.fence.*.release",
                           f"{subjects.DEAD_LETTER}.>",
                           "gpu.evt.endpoint.>", "gpu.evt.slot.>", subjects.OUTCOMES],
                 ["gpu.cmd.claim.>", "gpu.qry.claim.>", "gpu.qry.cluster.>", "gpu.cmd.endpoint.>",
                  "gpu.qry.endpoint.>", "gpu.qry.gpus.>", "gpu.cmd.slot.>", "gpu.qry.slot.>"],
                 (subjects.STREAM, subjects.INTAKE_STREAM, subjects.OUTCOMES_STREAM),
                 "claims, intake batches, dead letters, endpoints, model slots, outcomes"),
        # gpu.evt.fence.*.ending: ClaimEnding before a decision ends an unbound claim (under its
        # node's binding fence); only the allocator writes there (gpu.evt.ending.*: where marks
        # went in sessions 21-24), and it writes on no claim's subject nor a node's releases
        _service("allocator", [subjects.DECISIONS, "gpu.evt.fence.*.ending", "gpu.evt.ending.*",
                               subjects.NODE_GRANTS,
                               f"$O.{subjects.SNAPSHOT_BUCKET}.>",
                               *_create(OBJECT_STREAM), f"$JS.API.STREAM.PURGE.{OBJECT_STREAM}"],
                 ["gpu.qry.allocator.>", "gpu.cmd.allocator.>"],
                 (subjects.STREAM, subjects.NODE_GRANTS_STREAM, OBJECT_STREAM),
                 "the only writer of decisions, node-grant records and claims' ending marks"),
        _service("quota", ["gpu.evt.quota.>", "gpu.evt.drift.>"], ["gpu.cmd.quota.>", "gpu.qry.quota.>"],
                 notes="quotas, drift cleared"),
        _service("pool-controller", ["gpu.evt.pool.>", "gpu.evt.marks.>"],
                 ["gpu.cmd.pool.>", "gpu.qry.pool.>", "gpu.cmd.device.>"], notes="pools, device marks"),
        _service("projector", [], ["gpu.qry.projection.>"], notes="reads only"),
        _service("dashboard", ["gpu.qry.>"], [], notes="reads, and asks the services' queries"),
    ]


def _own_records(nodes: list[str]) -> list[str]:
    """Read only these nodes' records of live claims: through the node's one watch (a consumer of
    a fixed name whose create request names the node's key: shared.latest), a direct get of that
    key; never an unfiltered consumer, a get by sequence, another node's key, or another node's
    watch (checking or deleting it would stall that node's agent)."""
    grants = subjects.NODE_GRANTS_STREAM
    out = [f"$JS.API.STREAM.INFO.{grants}", f"$JS.FC.{grants}.>"]
    for node in nodes:
        key, watch = subjects.node_grants(node), subjects.records_watcher(node)
        out += [f"$JS.API.CONSUMER.CREATE.{grants}.{watch}.{key}", f"$JS.API.CONSUMER.INFO.{grants}.{watch}",
                f"$JS.API.CONSUMER.DELETE.{grants}.{watch}", f"$JS.API.DIRECT.GET.{grants}.{key}"]
    return out


def _own_subjects(nodes: list[str]) -> list[str]:
    """Read only these nodes' own binding and drift subjects of the ledger: a direct get of a
    subject's last message (the subject in the request's subject) and a consumer whose create
    request names the subject (`JetStreamEventLog.own_subject_after`); never a get whose subject
    is in the body, an unfiltered consumer, another node's subjects, a claim or a decision. A node
    agent binds on condition of the fence its record carries (schemas.grants): it reads no claim."""
    ledger = subjects.STREAM
    out = [f"$JS.API.STREAM.INFO.{ledger}"]
    for node in nodes:
        # its node's fence (releases and ending marks of its claims): read after a refused binding
        for own in (subjects.node_bindings(node), subjects.drift(node), subjects.node_fence(node)):
            # its one reader consumer per subject, by name: never another's (the services'
            # followers read this stream: deleting or pulling from theirs would stall them)
            reader = subjects.subject_reader(own)
            out += [f"$JS.API.DIRECT.GET.{ledger}.{own}", f"$JS.API.CONSUMER.CREATE.{ledger}.{reader}.{own}",
                    f"$JS.API.CONSUMER.INFO.{ledger}.{reader}",
                    f"$JS.API.CONSUMER.MSG.NEXT.{ledger}.{reader}", f"$JS.API.CONSUMER.DELETE.{ledger}.{reader}"]
    return out


def node_role(user: str, nodes: list[str], simulated: bool = False) -> Role:
    """A node agent (or the one process of a simulated fleet): its nodes' own subjects, bindings
    and drift reports included, and nothing else; it reads its own nodes' subjects of the ledger
    and its own nodes' records of live claims only (a simulated fleet, which watches all its nodes
    through one consumer of several filters, reads every record and the whole ledger)."""
    pub = [f"{READY}.node-agent", *_info()]
    for node in nodes:
        own = subjects.node(node)
        pub += [own, f"{own}.>", subjects.drift(node)]
    shared_reads = simulated or len(nodes) != 1
    pub += _read(subjects.STREAM) if shared_reads else _own_subjects(nodes)
    pub += _read(subjects.NODE_GRANTS_STREAM) if shared_reads else _own_records(nodes)
    serves = ["gpu.cmd.node.fault", "gpu.cmd.node.process"] if simulated else []
    # one node's agent: its replies and deliveries on its own inbox prefix, so it cannot listen
    # in on another consumer's deliveries (another node's record) on the shared `_INBOX.>`
    inbox = user_inbox(user) if shared_reads else node_inbox(nodes[0])
    return Role(user, tuple(dict.fromkeys(pub)), (*serves, f"{inbox}.>"),
                notes=f"node agent of {', '.join(nodes)}", account=AGENTS_ACCOUNT, exported=tuple(serves))


PLAIN_OUTCOMES = subjects.outcome("x").rsplit(".", 1)[0] + ".>"  # gpu.outcome.claim.>: no system's


def publisher_role() -> Role:
    """Submit claims (the intake stream, or the submit request) and read outcomes; no consumer of
    its own (a push consumer's deliveries could be pointed at another stream's subjects). One user
    shared by every system that has none of its own: it gets no power over claims once submitted
    (a system of its own may release and renew its claims: `system_role`)."""
    pub = [subjects.INTAKE_CLAIMS, subjects.command("claim.submit"), *_outcome_reads()]
    return Role(PUBLISHER, tuple(pub), (PLAIN_OUTCOMES, "_INBOX.>"), allow_responses=False,
                notes="submit claims, read outcomes", account=PUBLIC_ACCOUNT)


def _outcome_reads() -> list[str]:
    """Plain claims' outcomes only, by the direct get that names the subject in the request
    subject (nats-py `get_last_msg(direct=True)`, nats.js `direct.getMessage` with
    `last_by_subj`), so nats-server checks it: not the gets whose subject is in the body
    (`DIRECT.GET.<stream>`, `STREAM.MSG.GET`), nor the outcome stream's info (its subjects filter
    lists every system's claim tokens). Those read any system's outcome (session 26)."""
    return ["$JS.API.INFO", f"$JS.API.STREAM.INFO.{subjects.INTAKE_STREAM}",
            f"$JS.API.DIRECT.GET.{subjects.OUTCOMES_STREAM}.{PLAIN_OUTCOMES}"]


def system_role(system: sysmod.System) -> Role:
    """A publishing system (schemas/systems.py): submit, release, renew and report activity on the
    subjects carrying its own name only, so no system can speak on another's; read its own claims'
    outcomes only (`gpu.outcome.system.<name>.>`), which carry namespace, node, devices and env.
    Replies and acks on its own inbox prefix (`_INBOX_system-<name>`): no system reads another's
    replies (which carry the same)."""
    own_outcomes = sysmod.outcomes(system.name)
    # a direct get by subject only (`$JS.API.DIRECT.GET.<stream>.<subject>`: nats-py's
    # get_last_msg(direct=True), nats.js' direct.getMessage with last_by_subj), so nats-server
    # checks the subject; not the get whose subject is in the body, not STREAM.MSG.GET (any
    # sequence), not the outcome stream's info (its subjects filter lists every claim's token)
    reads = ["$JS.API.INFO", f"$JS.API.STREAM.INFO.{subjects.INTAKE_STREAM}",
             f"$JS.API.DIRECT.GET.{subjects.OUTCOMES_STREAM}.{own_outcomes}"]
    pub = [sysmod.intake(system.name), *(sysmod.command(verb, system.name) for verb in sysmod.VERBS), *reads]
    return Role(system.user, tuple(pub), (own_outcomes, f"{user_inbox(system.user)}.>"),
                allow_responses=False,
                notes=f"system {system.name}: its own claims, in {', '.join(system.namespaces)}",
                account=PUBLIC_ACCOUNT)


def ops_role() -> Role:
    return Role(OPS, (">",), (">",), notes="the CLI and operators: everything")


def roles(agent_nodes: list[str] = (), demo_fleet: list[str] = (),
          systems: tuple[sysmod.System, ...] = ()) -> list[Role]:
    """Every user: the services, ops, publisher, one user per publishing system (`system-<name>`),
    one user per node agent in `agent_nodes` (`node-<name>`, as in production), and one user for
    the whole simulated `demo_fleet`, which `up --demo` runs in one process."""
    out = [*service_roles(), ops_role(), publisher_role(), *(system_role(s) for s in systems)]
    out += [node_role(node_user_name(node), [node]) for node in agent_nodes]
    if demo_fleet:
        out.append(node_role(DEMO_AGENTS, list(demo_fleet), simulated=True))
    return out


def account_imports(all_roles: list[Role], account: str) -> tuple[list[str], list[str]]:
    """What `account` (PUBLIC, AGENTS, a service's) imports from LEDGER, which exports it to that
    account only: each subject its users may publish, as a service (its acknowledgement or reply
    comes back through the import, never onto a ledger subject), and each they may subscribe to, as
    a stream (but what they serve themselves, and inboxes unless the account's users are delivered
    there: `DELIVERED_ON_INBOX`; and what one other account publishes: `published_imports`). A
    request another account serves crosses LEDGER, which imports it from there (`served_imports`),
    so ops sees it as before. A subject another import of the account covers is left out (two
    overlapping service imports would both carry a request). Nothing else of LEDGER is visible
    from the account; its users' permissions narrow it further."""
    users = [r for r in all_roles if r.account == account]
    services = _widest(s for r in users for s in r.publish if not s.startswith(SYSTEM_REQUESTS))
    inboxes = account in DELIVERED_ON_INBOX
    elsewhere = {t for _, t in published_imports(all_roles, account)}
    streams = _widest(s for r in users for s in r.subscribe
                      if s not in r.exported and s not in elsewhere and (inboxes or not s.startswith("_INBOX")))
    return services, streams


def published_imports(all_roles: list[Role], account: str) -> list[tuple[str, str]]:
    """(source account, subject): the stream imports of `account` from the one other account whose
    users publish what its users subscribe to (a publisher's live outcomes, from the claim
    service's account), not from LEDGER: then nothing in LEDGER carries the subscription, so no
    push consumer (which delivers in LEDGER, whoever made it) can be pointed at a publisher waiting
    for its outcome (session 33; docs/security.md). It is needed anyway: nats-server hands a
    message that reached LEDGER through a service import (the claim service's outcome append) to
    no stream import of LEDGER's."""
    out = []
    for subject in (s for r in all_roles if r.account == account for s in r.subscribe
                    if s not in r.exported and not s.startswith("_INBOX")):
        sources = {r.account for r in all_roles if r.account not in (account, LEDGER_ACCOUNT)
                   and any(covers(p, subject) for p in r.publish)}
        if len(sources) == 1:
            out.append((sources.pop(), subject))
    return list(dict.fromkeys(out))


def served_imports(all_roles: list[Role]) -> list[tuple[str, str]]:
    """(source account, subject): LEDGER's service imports of what the users of the other accounts
    serve (`Role.exported`: each service's `gpu.cmd|qry.<area>.>`, a fleet's commands). Ops asks
    them there, and so does every other account through its own import of LEDGER (the dashboard's
    `gpu.qry.>`, a publisher's `gpu.cmd.claim.submit`): a request crosses two imports, and ops
    sees it in LEDGER as before."""
    out = [(r.account, t) for r in all_roles if r.account != LEDGER_ACCOUNT for t in r.exported]
    wanted = _widest(t for _, t in out)
    return [(a, t) for a, t in dict.fromkeys(out) if t in wanted]


def _widest(subjects_: object) -> list[str]:
    """The subjects, in order, without duplicates or any another one covers."""
    unique = list(dict.fromkeys(subjects_))
    return [s for s in unique if not any(o != s and covers(o, s) for o in unique)]


def covers(pattern: str, other: str) -> bool:
    """Whether every subject `other` (a pattern too) matches is matched by `pattern`."""
    want, have = pattern.split("."), other.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or have[i] == ">" or (token != "*" and (have[i] == "*" or token != have[i])):
            return False
    return len(want) == len(have)


def overlaps(a: str, b: str) -> bool:
    """Whether some subject is matched by both patterns."""
    x, y = a.split("."), b.split(".")
    for i in range(max(len(x), len(y))):
        if i >= len(x) or i >= len(y):
            return False
        if x[i] == ">" or y[i] == ">":
            return True
        if "*" not in (x[i], y[i]) and x[i] != y[i]:
            return False
    return True


def matches(pattern: str, subject: str) -> bool:
    """NATS wildcard matching: `*` one token, `>` one or more at the end."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def node_user_name(node: str) -> str:
    return "node-" + subjects.node(node).rsplit(".", 1)[-1]


def user_inbox(user: str) -> str:
    """A user's inbox prefix (nats-py's `inbox_prefix`): only that user may subscribe under it, so
    no service or agent reads another's replies or consumer deliveries. Each process sets its own
    (shared.service.serve, the node agent, the dashboard: shared.natscluster.INBOX_PREFIX_ENV).
    The publisher keeps `_INBOX` (any NATS client works with it), ops may read everything; a
    system sets `_INBOX_system-<name>` in its client (nats.js `inboxPrefix`)."""
    return "_INBOX_" + user


def node_inbox(node: str) -> str:
    """The inbox prefix of one node's agent."""
    return user_inbox(node_user_name(node))


# --- secrets ----------------------------------------------------------------------------------


def load_secrets(data_dir: Path, users: list[str]) -> dict[str, str]:
    """The password of each user, made once and kept in DATA_DIR/nats-users.json (mode 0600):
    stable across restarts, so the URLs printed by an earlier `up` keep working."""
    return _kept(Path(data_dir) / SECRETS_FILE, users, lambda: secrets.token_urlsafe(24))


def load_nkeys(data_dir: Path, users: list[str]) -> dict[str, str]:
    """Each user's nkey seed (`SU...`), made once and kept in DATA_DIR/nats-nkeys.json (mode
    0600). The server's configuration holds only the public keys (`public_nkey`): no secret."""
    import nkeys

    return _kept(Path(data_dir) / NKEYS_FILE, users,
                 lambda: nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER).decode())


def _kept(path: Path, users: list[str], make) -> dict[str, str]:
    """Each user's secret from the private JSON file at `path`, those missing made and stored."""
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    missing = [u for u in users if u not in known]
    if missing or not path.exists():
        known.update({u: make() for u in missing})
        _write_private(path, json.dumps(known, indent=1, sort_keys=True) + "\n")
    os.chmod(path, 0o600)
    return {u: known[u] for u in users}


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def public_nkey(seed: str) -> str:
    """The public key (`U...`) of a user's seed: what nats-server's configuration lists."""
    import nkeys

    return nkeys.from_seed(bytearray(seed.encode())).public_key.decode()


def user_url(user: str, password: str, host: str, port: int) -> str:
    return f"nats://{user}:{password}@{host}:{port}"


# --- a store made before the accounts ---------------------------------------------------------


GLOBAL_ACCOUNT = "$G"  # nats-server's account when no accounts are configured (--no-auth)


def move_store_account(store_dir: Path, accounts: bool) -> bool:
    """A single server keeps each account's streams in `<store>/jetstream/<account>`: a store
    written before the accounts (session 31) or by `--no-auth` holds them under `$G`, one written
    with them under LEDGER. Move the one to the other when only it exists, so the ledger keeps its
    streams either way (True when moved). A cluster's stores are not moved (docs/security.md)."""
    root = Path(store_dir) / "jetstream"
    want, other = (LEDGER_ACCOUNT, GLOBAL_ACCOUNT) if accounts else (GLOBAL_ACCOUNT, LEDGER_ACCOUNT)
    if (root / other).is_dir() and not (root / want).exists():
        (root / other).rename(root / want)
        return True
    return False


# --- nats-server configuration ----------------------------------------------------------------


def env_password(user: str) -> str:
    """The environment variable a deployed nats-server reads a user's password from."""
    return "GPULEDGER_NATS_" + "".join(c if c.isalnum() else "_" for c in user).upper() + "_PASSWORD"


def users_block(all_roles: list[Role], passwords: dict[str, str] | None = None,
                public_keys: dict[str, str] | None = None) -> str:
    """The `accounts { LEDGER {...} PUBLIC {...} AGENTS {...} SVC_<NAME> {...} }` block: each
    account's users, LEDGER's exports to the others and their imports of them (`account_imports`),
    what the services and a simulated fleet serve, to LEDGER (`served_imports`), and the claim
    service's outcomes to the publishers (`published_imports`). Without `passwords` each password
    is the environment variable `env_password(user)` (how deploy/nats keeps secrets out of the file).
    With `public_keys` (user -> `U...` public nkey) the users are nkey users instead: the
    configuration then holds no secret at all (production: `gpuledger nats config --nkeys`)."""
    exports: dict[str, dict[str, list[str]]] = {a: {} for a in (LEDGER_ACCOUNT, *OUTSIDE_ACCOUNTS)}
    imports: dict[str, list[str]] = {a: [] for a in exports}
    for account in OUTSIDE_ACCOUNTS:
        services, streams = account_imports(all_roles, account)
        for kind, listed in (("service", services), ("stream", streams)):
            for subject in listed:
                exports[LEDGER_ACCOUNT].setdefault(f"{kind}\0{subject}", []).append(account)
                imports[account].append(_import(kind, LEDGER_ACCOUNT, subject))
    for source, subject in served_imports(all_roles):  # what the services (and a fleet) serve
        exports[source].setdefault(f"service\0{subject}", []).append(LEDGER_ACCOUNT)
        imports[LEDGER_ACCOUNT].append(_import("service", source, subject))
    for account in OUTSIDE_ACCOUNTS:  # a publisher's outcomes, from the claim service's account
        for source, subject in published_imports(all_roles, account):
            exports[source].setdefault(f"stream\0{subject}", []).append(account)
            imports[account].append(_import("stream", source, subject))
    lines = ["accounts {"]
    for account in exports:
        # every account even without users: nats-server's reload (SIGHUP) wires the imports of an
        # account it knows, not of one it is given anew (2.15.1), so adding the first node's user
        # to a running server needs AGENTS to be there already
        users = [r for r in all_roles if r.account == account]
        extra = ["jetstream: enabled"] if account == LEDGER_ACCOUNT else []
        lines += [f"  {account} {{", *(f"    {x}" for x in extra), "    users = ["]
        for role in users:
            lines += _user_lines(role, passwords, public_keys)
        lines.append("    ]")
        for word, listed in (("exports", [_export(k, to) for k, to in exports[account].items()]),
                             ("imports", imports[account])):
            if listed:
                lines += [f"    {word} = [", *(f"      {x}" for x in listed), "    ]"]
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _export(key: str, accounts: list[str]) -> str:
    kind, subject = key.split("\0")
    streamed = kind == "service" and subject.startswith(STREAMED_RESPONSES)
    return (f"{{{kind}: {json.dumps(subject)}, accounts: {json.dumps(accounts)}"
            + (", response_type: stream" if streamed else "") + "}")


def _import(kind: str, source: str, subject: str) -> str:
    return f"{{{kind}: {{account: {json.dumps(source)}, subject: {json.dumps(subject)}}}}}"


def _user_lines(role: Role, passwords: dict[str, str] | None, public_keys: dict[str, str] | None) -> list[str]:
    lines = [f"      # {role.user}: {role.notes}" if role.notes else f"      # {role.user}"]
    if public_keys is not None:
        lines.append(f"      {{nkey: {json.dumps(public_keys[role.user])}, permissions: {{")
    else:
        secret = json.dumps(passwords[role.user]) if passwords else "$" + env_password(role.user)
        lines.append(f"      {{user: {json.dumps(role.user)}, password: {secret}, permissions: {{")
    lines.append(f"        publish: {{allow: {_subject_list(role.publish)}}}")
    lines.append(f"        subscribe: {{allow: {_subject_list(role.subscribe)}}}")
    if role.allow_responses:
        lines.append("        allow_responses: true")
    lines.append("      }}")
    return lines


def _subject_list(items: tuple[str, ...]) -> str:
    # quoted: an unquoted `$JS...` would be read as a variable
    return "[" + ", ".join(json.dumps(s) for s in items) + "]"


def server_config(all_roles: list[Role], passwords: dict[str, str] | None, store_dir: Path, port: int,
                  host: str = "127.0.0.1", public_keys: dict[str, str] | None = None) -> str:
    """A whole single-server configuration, as `gpuledger up` runs it."""
    head = [f"host: {json.dumps(host)}", f"port: {port}",
            f"jetstream {{ store_dir: {json.dumps(str(store_dir))} }}", ""]
    return "\n".join(head) + users_block(all_roles, passwords, public_keys)
