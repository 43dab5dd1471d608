"""Who may write what: each event type, the subjects it may arrive on and the writer that owns them.

Defence in depth behind NATS permissions (docs/trust.md): every fold of the log (the one
`ledger.follower`, the projector's replay, a node agent's drift catch-up) admits an event only
on a subject its type belongs to, and drops (and counts) any other. The subject names the thing
the event is about, so a writer allowed one subject cannot speak for another: a node's events
name that node (`NodeLost` or `NodeRegistered` forged on `gpu.evt.node.x` about node `y` is
dropped), a quota event names the namespace of its subject, and a decision is believed only
inside a `DecisionBatch` on the allocator's fenced `gpu.evt.decision` (so an empty batch elsewhere
cannot move the allocator's fence either).

A pattern is a subject with at most one placeholder: `{attr}` must be the subject token of the
event's field (`schemas.subjects._token`, the rewrite writers use), `*` any one token, and
`{node^}` a fleet token the event's node starts with (a simulated fleet speaks for its nodes).
An `EventBatch` is admitted where its row allows and only if every member is admitted on the same
subject. Events on the dead-letter subjects are records for people, never folded.

Every type in `schemas.events.AnyEvent` has a row (tests/trust/test_authority.py fails otherwise);
a new event type needs one before any fold will believe it.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

from schemas import events as ev
from schemas import subjects
from schemas.subjects import _token

CLAIM, NODE_AGENT, ALLOCATOR = "claim", "node-agent", "allocator"
POOL_CONTROLLER, QUOTA, SIMULATOR = "pool-controller", "quota", "simulator"
IN_DECISION_BATCH = "in-decision-batch"  # a decision: believed only inside the allocator's batch

_ROOT = "gpu.evt."
NOT_FOLDED = (subjects.DEAD_LETTER + ".",)  # copies of refusals, kept for people to read


class Pattern(NamedTuple):
    prefix: str
    key: str  # "" exact subject, "*" any one token, "attr.path" keyed, "node^" fleet prefix
    suffix: str


class Rule(NamedTuple):
    patterns: tuple[Pattern, ...]
    role: str


def _pattern(text: str) -> Pattern:
    if "{" not in text and "*" not in text:
        return Pattern(text, "", "")
    head, _, rest = text.partition("{") if "{" in text else text.partition("*")
    key, _, tail = rest.partition("}") if "{" in text else ("*", "", rest)
    return Pattern(head, key, tail)


def _rule(role: str, *patterns: str) -> Rule:
    return Rule(tuple(_pattern(p) for p in patterns), role)


_CLAIM = _ROOT + "claim.{claim_id}"
_NODE = _ROOT + "node.{node}"
_FLEET = _ROOT + "fleet.{node^}"
_DECISION = _rule(IN_DECISION_BATCH)

AUTHORITY: dict[type, Rule] = {
    ev.ClaimSubmitted: _rule(CLAIM, _ROOT + "claim.{claim.claim_id}", subjects.INTAKE_BATCHES),
    # gpu.evt.intake is the claim service's own batch subject: any of its claim events may go there
    ev.ClaimRejected: _rule(CLAIM, _CLAIM, subjects.INTAKE_BATCHES),
    # and on a node's release subject: the releases of claims allocated there, not yet bound
    ev.ClaimReleased: _rule(CLAIM, _CLAIM, subjects.INTAKE_BATCHES, _ROOT + "fence.*.release"),
    ev.LeaseRenewed: _rule(CLAIM, _CLAIM, subjects.INTAKE_BATCHES),
    ev.ClaimActivity: _rule(CLAIM, _CLAIM, subjects.INTAKE_BATCHES),
    # the allocator's mark before a decision ends an unbound claim: fences that claim's binding.
    # Only on its own subject, which only the allocator may write: a mark on the claim's subject
    # (where the claim service writes, and where marks went before session 21) is dropped; no fold
    # changed state on those, so old logs fold as they did
    # on its node's ending subject (session 25 on: the node's bindings are fenced there), or on
    # the claim's ending subject, where marks went in sessions 21-24
    ev.ClaimEnding: _rule(ALLOCATOR, _ROOT + "fence.{node}.ending", _ROOT + "ending.{claim_id}"),
    ev.NodeRegistered: _rule(NODE_AGENT, _NODE),
    ev.NodeHeartbeat: _rule(NODE_AGENT, _NODE, _FLEET),
    ev.DeviceHealthChanged: _rule(NODE_AGENT, _NODE),
    ev.NodeConditionChanged: _rule(NODE_AGENT, _NODE),
    ev.UsageObserved: _rule(NODE_AGENT, _NODE),
    ev.ProcessKilled: _rule(NODE_AGENT, _NODE),
    ev.ClaimBound: _rule(NODE_AGENT, _NODE + ".bound", _FLEET),
    ev.DriftDetected: _rule(NODE_AGENT + "|" + QUOTA, _ROOT + "drift.{node}"),
    ev.DriftCleared: _rule(NODE_AGENT + "|" + QUOTA, _ROOT + "drift.{node}"),
    ev.PoolCreated: _rule(POOL_CONTROLLER, _ROOT + "pool.{pool.name}"),
    ev.PoolAccessChanged: _rule(POOL_CONTROLLER, _ROOT + "pool.{pool}"),
    ev.PoolDeleted: _rule(POOL_CONTROLLER, _ROOT + "pool.{pool}"),
    ev.DeviceIgnoreChanged: _rule(POOL_CONTROLLER, _ROOT + "marks.{node}"),
    ev.QuotaSet: _rule(QUOTA, _ROOT + "quota.{namespace}"),
    ev.QuotaDeleted: _rule(QUOTA, _ROOT + "quota.{namespace}"),
    ev.QuotaAlertRaised: _rule(QUOTA, _ROOT + "quota.{namespace}"),
    ev.QuotaAlertCleared: _rule(QUOTA, _ROOT + "quota.{namespace}"),
    ev.QuotaDefaultSet: _rule(QUOTA, subjects.DEFAULT_QUOTA),
    ev.QuotaDefaultDeleted: _rule(QUOTA, subjects.DEFAULT_QUOTA),
    ev.EndpointCreated: _rule(CLAIM, _ROOT + "endpoint.{endpoint.name}"),
    ev.EndpointUpdated: _rule(CLAIM, _ROOT + "endpoint.{endpoint.name}"),
    ev.EndpointDeleted: _rule(CLAIM, _ROOT + "endpoint.{name}"),
    ev.EndpointLoadReported: _rule(CLAIM, _ROOT + "endpoint.{name}"),
    ev.EndpointScaled: _rule(CLAIM, _ROOT + "endpoint.{name}"),
    ev.SlotRequestStarted: _rule(CLAIM, _ROOT + "slot.{slot_id}"),
    ev.SlotRequestFinished: _rule(CLAIM, _ROOT + "slot.{slot_id}"),
    ev.DecisionBatch: _rule(ALLOCATOR, subjects.DECISIONS),
    # members are checked one by one against the same subject
    ev.EventBatch: _rule(CLAIM + "|" + NODE_AGENT, subjects.INTAKE_BATCHES, _ROOT + "node.*.bound",
                         _ROOT + "fleet.*", _ROOT + "fence.*.release"),
    **{decision: _DECISION for decision in ev.DECISION_TYPES},
}


# Every fold checks every event: the token of an id is cached (node names and claim ids recur).
_tok = functools.lru_cache(maxsize=1 << 16)(_token)
KNOWN_NODES = 1 << 16  # node names remembered as safe tokens, per pattern (forgotten all at once)


def _field(event: Any, path: str) -> str:
    value = event
    for name in path.split("."):
        value = getattr(value, name, None)
    return value if isinstance(value, str) else ""


def _checker(pattern: Pattern) -> Callable[[str, Any], bool]:
    """A pattern as one function of (subject, event): built once per row."""
    prefix, key, suffix = pattern
    start, tail = len(prefix), len(suffix)
    if not key:
        return lambda subject, event: subject == prefix

    def token_of(subject: str) -> str:
        if not subject.startswith(prefix) or not subject.endswith(suffix):
            return ""
        token = subject[start:len(subject) - tail]
        return "" if "." in token else token

    if key == "*":
        return lambda subject, event: bool(token_of(subject))
    if key == "node^":  # a fleet's token must be a prefix of the node's own
        def fleet(subject: str, event: Any) -> bool:
            token = token_of(subject)
            return token != "" and _tok(_field(event, "node")).startswith(token)
        return fleet
    field = operator.attrgetter(key)  # decoded events: the field is a str
    safe = subjects._SAFE_TOKEN.fullmatch
    # node names recur (a binding, heartbeat or usage report of one of a fleet's nodes is most of a
    # log): the names found safe are remembered, so their check is one look-up, not a regex match
    known: dict[str, None] | None = {} if key == "node" else None

    def keyed(subject: str, event: Any) -> bool:
        value = field(event)
        if not value:
            return False
        if subject == prefix + value + suffix:  # the usual case: the id is its own token
            if known is not None:
                if value in known:
                    return True
                if safe(value) is not None:
                    if len(known) >= KNOWN_NODES:
                        known.clear()
                    known[value] = None
                    return True
                return _token(value) == value
            return safe(value) is not None or _token(value) == value
        return subject == prefix + _tok(value) + suffix
    return keyed


# Each row's patterns split in two: subjects that admit the type whatever the event says (one set
# look-up per message, the common case of batches and decisions), and those keyed on the event.
_EXACT: frozenset[tuple[type, str]] = frozenset(
    (kind, p.prefix) for kind, rule in AUTHORITY.items() for p in rule.patterns if not p.key)
_KEYED: dict[type, tuple[Callable[[str, Any], bool], ...]] = {
    kind: tuple(_checker(p) for p in rule.patterns if p.key) for kind, rule in AUTHORITY.items()}


def admits(subject: str, event: Any) -> bool:
    """Whether a fold may believe `event`, stored on `subject`."""
    kind = type(event)
    if (kind, subject) not in _EXACT:
        for check in _KEYED.get(kind, ()):
            if check(subject, event):
                break
        else:
            return False
    if kind is ev.EventBatch:
        for member in event.events:
            if not admits(subject, member):
                return False
    return True


def folded(subject: str) -> bool:
    """False for subjects whose events are records only (dead letters)."""
    return not subject.startswith(NOT_FOLDED)


def home_subject(event: Any) -> str:
    """The subject a writer puts `event` on: its row's first pattern filled in (a decision's is the
    decision subject, inside a DecisionBatch; an EventBatch's is its first member's)."""
    if type(event) is ev.EventBatch:
        return home_subject(event.events[0]) if event.events else subjects.INTAKE_BATCHES
    rule = AUTHORITY[type(event)]
    if not rule.patterns:
        return subjects.DECISIONS
    prefix, key, suffix = rule.patterns[0]
    return prefix + _tok(_field(event, key)) + suffix if key else prefix


def writer_of(event_type: type) -> str:
    """The writer role the table gives a type (e.g. for docs and permissions)."""
    return AUTHORITY[event_type].role
