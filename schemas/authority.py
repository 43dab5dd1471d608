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
    # every new claim goes on gpu.evt.submit (session 34 on), alone or in an EventBatch, fenced there
    # so two claim-service replicas never both append one id; its own subject and gpu.evt.intake
    # are where claims went before
    ev.ClaimSubmitted: _rule(CLAIM, _ROOT + "claim.{claim.claim_id}", subjects.INTAKE_BATCHES, subjects.SUBMITS),
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
    ev.FleetDefaultsSet: _rule(POOL_CONTROLLER, subjects.FLEET_DEFAULTS),
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
    ev.EventBatch: _rule(CLAIM + "|" + NODE_AGENT, subjects.INTAKE_BATCHES, subjects.SUBMITS, _ROOT + "node.*.bound",
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
    if key == "node":
        return _node_checker(prefix, suffix, field, safe)

    def keyed(subject: str, event: Any) -> bool:
        value = field(event)
        if not value:
            return False
        if subject == prefix + value + suffix:  # the usual case: the id is its own token
            return safe(value) is not None or _token(value) == value
        return subject == prefix + _tok(value) + suffix
    return keyed


def _node_checker(prefix: str, suffix: str, field: Callable[[Any], Any],
                  safe: Callable[[str], Any]) -> Callable[[str, Any], bool]:
    """A `{node}` pattern: node subjects recur (a binding, heartbeat or usage report of one of a
    fleet's nodes is most of a log), so each subject is remembered with the node found admitted on
    it, and the next event naming that node there is admitted with one look-up. The check is a pure
    function of (subject, node): a remembered pair is admitted as it was the first time."""
    admitted: dict[str, str] = {}  # subject -> the node admitted on it (forgotten all at once)

    def keyed(subject: str, event: Any) -> bool:
        value = field(event)
        if not value:
            return False
        if admitted.get(subject) == value:
            return True
        if subject == prefix + value + suffix:  # the usual case: the id is its own token
            if safe(value) is None and _token(value) != value:
                return False
        elif subject != prefix + _tok(value) + suffix:
            return False
        if len(admitted) >= KNOWN_NODES:
            admitted.clear()
        admitted[subject] = value
        return True
    return keyed


def _refuse(subject: str, event: Any) -> bool:
    return False


def _admitter(kind: type, rule: Rule) -> Callable[[str, Any], bool]:
    """A row as one function of (subject, event): its exact subjects first (one comparison or set
    look-up: batches, decisions, the intake), then its keyed patterns in order."""
    exact = frozenset(p.prefix for p in rule.patterns if not p.key)
    checks = tuple(_checker(p) for p in rule.patterns if p.key)
    if not checks:
        if len(exact) == 1:
            (only,) = exact
            return lambda subject, event: subject == only
        return lambda subject, event: subject in exact
    if not exact and len(checks) == 1:
        return checks[0]

    def admit(subject: str, event: Any) -> bool:
        if subject in exact:
            return True
        for check in checks:
            if check(subject, event):
                return True
        return False
    return admit


def _batch_admitter(own: Callable[[str, Any], bool]) -> Callable[[str, Any], bool]:
    """An EventBatch: its own row, and then every member on the same subject. A member whose type
    the subject admits whatever it says (an exact subject: the intake's submits) settles that type
    for the rest of the batch."""

    def admit(subject: str, event: Any) -> bool:
        if not own(subject, event):
            return False
        settled, exact, table = None, _EXACT, ADMIT
        for member in event.events:
            kind = type(member)
            if kind is settled:
                continue
            if (kind, subject) in exact:
                settled = kind
            elif not table.get(kind, _refuse)(subject, member):
                return False
        return True
    return admit


# (type, subject) pairs admitted whatever the event says (exact subjects of each row)
_EXACT: frozenset[tuple[type, str]] = frozenset(
    (kind, p.prefix) for kind, rule in AUTHORITY.items() for p in rule.patterns if not p.key)
# event type -> whether a fold may believe an event of it on a subject: `ADMIT[type(event)](subject,
# event)` is `admits(subject, event)` for a known type, for loops that have the type at hand
ADMIT: dict[type, Callable[[str, Any], bool]] = {kind: _admitter(kind, rule) for kind, rule in AUTHORITY.items()}
ADMIT[ev.EventBatch] = _batch_admitter(ADMIT[ev.EventBatch])


def admits(subject: str, event: Any) -> bool:
    """Whether a fold may believe `event`, stored on `subject`."""
    return ADMIT.get(type(event), _refuse)(subject, event)


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
