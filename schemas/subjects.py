"""Subjects and stream names: the one place they are spelled."""

import hashlib
import re

STREAM = "GPULEDGER"
EVENTS = "gpu.evt.>"
INTAKE_STREAM = "GPULEDGER_INTAKE"
INTAKE_CLAIMS = "gpu.intake.claim"  # durable: other systems publish JSON claims here
DECISIONS = "gpu.evt.decision"  # the allocator's fenced subject
INTAKE_BATCHES = "gpu.evt.intake"  # the claim service's batches: releases (and its drained intake until session 34)
# Every new claim (session 34 on): a ClaimSubmitted, or an EventBatch of them, appended on condition
# of this subject's last sequence, so two claim-service replicas never both append one id
# (services/claim/intake_fence.py). Before, claims went on their own subject or INTAKE_BATCHES.
SUBMITS = "gpu.evt.submit"
DEAD_LETTER = "gpu.evt.deadletter"
OUTCOMES_STREAM = "GPULEDGER_OUTCOMES"
OUTCOMES = "gpu.outcome.>"
SYSTEM_OUTCOMES = "gpu.outcome.system"  # + .<system>.<token>: a publishing system's claims
OUTCOME_CHECKPOINT = "gpu.outcome.checkpoint"  # the claim service's own: outcomes written up to here
OUTCOMES_MAX_AGE_S = 7 * 24 * 3600  # an ended claim's outcome is kept a week after its last change
SNAPSHOT_BUCKET = "gpuledger_snapshots"
# What is live on each node (schemas.grants): a key-value bucket the allocator writes, one key per
# node; a node agent watches its own key.
NODE_GRANTS_BUCKET = "gpuledger_node_grants"
NODE_GRANTS_STREAM = f"KV_{NODE_GRANTS_BUCKET}"
NODE_GRANTS = f"$KV.{NODE_GRANTS_BUCKET}.>"


def claim(claim_id: str) -> str:
    return f"gpu.evt.claim.{_token(claim_id)}"


def ending(claim_id: str) -> str:
    """Where the allocator marked a claim it was about to end unbound (`ClaimEnding`) before
    session 25 (a binding was then fenced per claim, `claim_fence`); marks now go on the claim's
    node's `node_endings`. Still believed there, so old logs fold as they did."""
    return f"gpu.evt.ending.{_token(claim_id)}"


def node_releases(name: str) -> str:
    """Where the claim service releases, several per message, the claims allocated on a node and
    not bound in its fold (a binding may still come): under the node's fence, `node_fence`."""
    return f"gpu.evt.fence.{_token(name)}.release"


def node_endings(name: str) -> str:
    """Where the allocator marks a claim on a node that it is about to end unbound
    (`ClaimEnding`): a subject only the allocator may write, under the node's fence."""
    return f"gpu.evt.fence.{_token(name)}.ending"


def node_fence(name: str) -> str:
    """What a node's bindings are conditioned on (services/node_agent/binder.py): the last sequence
    over the node's fence subjects, `node_releases` (the claim service) and `node_endings` (the
    allocator). One condition for all the claims of a record: a release or an ending mark of any
    claim on the node after the record refuses the binding message, and the next record, which
    the allocator writes because that claim left or the fence moved, carries the new fence."""
    return f"gpu.evt.fence.{_token(name)}.*"


def claim_fence(claim_id: str) -> str:
    """What a binding was conditioned on before session 25 (now `node_fence`): the last sequence over every `gpu.evt.<kind>.<token>`
    subject of the claim's token (nats-server takes a wildcard in
    `Nats-Expected-Last-Subject-Sequence-Subject`): its own subject (a release, by the claim
    service) and its ending subject (a mark, by the allocator). An aggregate of another kind
    named like the claim (a node `x` and a claim `x`) matches too; the allocator's fold counts
    those as well (services/allocator/claim_fences.py)."""
    return f"gpu.evt.*.{_token(claim_id)}"


def outcome(claim_id: str, system: str = "") -> str:
    """Where a claim's ClaimOutcome is written: `gpu.outcome.claim.<token>`, or for a claim a
    publishing system submitted `gpu.outcome.system.<system>.<token>`, which only that system's
    NATS user may read (shared.nats_auth.system_role). Outside `gpu.outcome.claim.>`, so a
    subscriber of every plain outcome sees no system's."""
    if system:
        return f"{SYSTEM_OUTCOMES}.{system}.{_token(claim_id)}"
    return f"gpu.outcome.claim.{_token(claim_id)}"


def node(name: str) -> str:
    return f"gpu.evt.node.{_token(name)}"


def is_node_bindings(subject: str) -> bool:
    """Whether `subject` is a node's binding subject (`node_bindings`), where only ClaimBound is
    believed (schemas.authority): followers that need no binding skip these messages undecoded."""
    return subject.endswith(".bound") and subject.startswith("gpu.evt.node.") and subject.count(".") == 4


def node_bindings(name: str) -> str:
    """Where a node's agent records its bindings (ClaimBound, those of one record in one message):
    its own subject, each append on condition that the node's fence (`node_fence`) has not moved
    since the record (services/node_agent/binder.py), with a message id nobody else can guess, so
    a retried append is stored once."""
    return f"gpu.evt.node.{_token(name)}.bound"


def node_grants(name: str) -> str:
    """The key of a node's record of live claims in the node-grants bucket."""
    return f"$KV.{NODE_GRANTS_BUCKET}.{_token(name)}"


def fleet(prefix: str) -> str:
    """A simulated fleet's own subject (`simulator.live_fleet`): the heartbeats and bindings of
    all its nodes, batched; the fold believes them only for nodes whose names start with
    `prefix` (schemas.authority)."""
    return f"gpu.evt.fleet.{_token(prefix)}"


def pool(name: str) -> str:
    return f"gpu.evt.pool.{_token(name)}"


def device_marks(node_name: str) -> str:
    """Operator marks on a node's devices (Ignored), written by the pool controller: not the
    node's own subject, which only its agent writes."""
    return f"gpu.evt.marks.{_token(node_name)}"


def quota(namespace: str) -> str:
    return f"gpu.evt.quota.{_token(namespace)}"


# The default quota's subject: under the quota service's `gpu.evt.quota.>`, and no namespace can
# be called `_default` (names start with a letter or digit), so it never collides with one.
DEFAULT_QUOTA = "gpu.evt.quota._default"
# The fleet's defaults (FleetDefaultsSet): under the pool controller's `gpu.evt.pool.>`, and no pool
# can be called `_fleet` (names start with a letter or digit), so it never collides with one.
FLEET_DEFAULTS = "gpu.evt.pool._fleet"


def endpoint(name: str) -> str:
    return f"gpu.evt.endpoint.{_token(name)}"


def slot(slot_id: str) -> str:
    """A model slot's requests (claim service), fenced per slot."""
    return f"gpu.evt.slot.{_token(slot_id)}"


def drift(node_name: str) -> str:
    return f"gpu.evt.drift.{_token(node_name)}"


def records_watcher(node_name: str) -> str:
    """The one consumer name a node's agent watches its record of live claims through (a process
    hosting one node): fixed, so that its user may create, check and delete that consumer and no
    other node's (shared.nats_auth); remade under the same name (shared.latest)."""
    return "watch-" + hashlib.sha256(node_grants(node_name).encode()).hexdigest()[:20]


def subject_reader(subject: str) -> str:
    """The one consumer name a reader of a single subject uses for it (a node agent reading its
    own binding or drift subject: `JetStreamEventLog.own_subject_after`). Fixed, so that a user's
    permissions can allow creating, pulling from and deleting that consumer and no other: with
    random names they had to allow every consumer of the stream (shared.nats_auth)."""
    return "reader-" + hashlib.sha256(subject.encode()).hexdigest()[:20]


def command(name: str) -> str:
    """Request/reply command subjects, e.g. command('claim.submit')."""
    return f"gpu.cmd.{name}"


def query(name: str) -> str:
    return f"gpu.qry.{name}"


_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_:-]+")


def _token(value: str) -> str:
    # NATS tokens may not contain '.', '*', '>' or whitespace; ids are validated upstream, this
    # keeps a stray character from splitting a subject. Valid ids take the fast path: every fold
    # compares an event's id with its subject's token (schemas.authority).
    if _SAFE_TOKEN.fullmatch(value):
        return value
    return "".join(c if c.isalnum() or c in "-_:" else "_" for c in value) or "_"
