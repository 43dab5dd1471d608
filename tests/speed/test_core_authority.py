"""The writer-authority check's fast path (exact subjects in one set, an id that is its own token
checked without the token cache) admits exactly what the table says (pure, no server).

The reference below reads `schemas.authority.AUTHORITY` the plain way, pattern by pattern with the
writers' token rewrite (`schemas.subjects._token`); the check every fold runs must agree with it on
events whose ids are safe tokens, ids a writer's rewrite changes ("a.b", "a b", "#", non-ASCII
letters), on subjects they belong to, and on the subjects of other rows.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import authority
from schemas import events as ev
from schemas import subjects
from schemas.subjects import _token
from schemas.types import ClaimSpec


def _field(event, path: str):
    value = event
    for name in path.split("."):
        value = getattr(value, name, None)
    return value if isinstance(value, str) else ""


def _matches(pattern: authority.Pattern, subject: str, event) -> bool:
    prefix, key, suffix = pattern
    if not key:
        return subject == prefix
    if not (subject.startswith(prefix) and subject.endswith(suffix)):
        return False
    token = subject[len(prefix):len(subject) - len(suffix)]
    if key == "*":
        return token != "" and "." not in token
    if key == "node^":
        return token != "" and "." not in token and _token(_field(event, "node")).startswith(token)
    value = _field(event, key)
    return bool(value) and subject == prefix + _token(value) + suffix


def reference_admits(subject: str, event) -> bool:
    rule = authority.AUTHORITY.get(type(event))
    if rule is None or not any(_matches(p, subject, event) for p in rule.patterns):
        return False
    if isinstance(event, ev.EventBatch):
        return all(reference_admits(subject, member) for member in event.events)
    return True


IDS = st.one_of(
    st.sampled_from(["c1", "node-00564", "a.b", "a b", "#", "é", "x*", "x>", "", "team-0", "n_0:1"]),
    st.text(alphabet="ab.-_:é# *", min_size=0, max_size=6),
)


def _events(claim_id: str, node: str, namespace: str) -> list:
    spec = ClaimSpec(claim_id=claim_id or "c", namespace=namespace or "ns")
    submitted = ev.ClaimSubmitted(claim=spec)
    released = ev.ClaimReleased(claim_id=claim_id)
    bound = ev.ClaimBound(claim_id=claim_id, node=node, env={})
    return [submitted, released, ev.LeaseRenewed(claim_id=claim_id), bound,
            ev.NodeHeartbeat(node=node), ev.QuotaDeleted(namespace=namespace),
            ev.DecisionBatch(decisions=[]), ev.EventBatch(events=[submitted, released]),
            ev.EventBatch(events=[bound, ev.NodeHeartbeat(node=node)]), ev.EventBatch(events=[])]


def _subjects(claim_id: str, node: str, namespace: str, other: str) -> list[str]:
    raw = [f"gpu.evt.claim.{claim_id}", f"gpu.evt.node.{node}", f"gpu.evt.node.{node}.bound",
           f"gpu.evt.fleet.{node[:3]}", f"gpu.evt.quota.{namespace}", f"gpu.evt.claim.{other}"]
    return raw + [subjects.claim(claim_id or "_"), subjects.node(node or "_"),
                  subjects.node_bindings(node or "_"), subjects.fleet(node[:3] or "_"),
                  subjects.quota(namespace or "_"), subjects.INTAKE_BATCHES, subjects.DECISIONS,
                  subjects.DEAD_LETTER + ".x", "gpu.evt.decision.x"]


@settings(max_examples=300, deadline=None)
@given(IDS, IDS, IDS, IDS)
def test_admits_as_the_table_says(claim_id, node, namespace, other):
    for event in _events(claim_id, node, namespace):
        for subject in _subjects(claim_id, node, namespace, other):
            assert authority.admits(subject, event) == reference_admits(subject, event), (subject, event)


def test_an_id_the_rewrite_changes_is_refused_on_its_raw_subject():
    """'a.b' is written on gpu.evt.claim.a_b: the raw 'gpu.evt.claim.a.b' is someone else's subject,
    and 'é' (a letter the rewrite keeps) is admitted on its own."""
    assert not authority.admits("gpu.evt.claim.a.b", ev.ClaimReleased(claim_id="a.b"))
    assert authority.admits("gpu.evt.claim.a_b", ev.ClaimReleased(claim_id="a.b"))
    assert not authority.admits("gpu.evt.claim.#", ev.ClaimReleased(claim_id="#"))
    assert authority.admits("gpu.evt.claim._", ev.ClaimReleased(claim_id="#"))
    assert authority.admits("gpu.evt.claim.é", ev.ClaimReleased(claim_id="é"))
    assert not authority.admits("gpu.evt.claim.", ev.ClaimReleased(claim_id=""))
