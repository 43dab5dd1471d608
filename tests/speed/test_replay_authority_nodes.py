"""A catch-up checks every stored event's subject against its writer's (schemas.authority): the
subjects of nodes are remembered per pattern with the node admitted on each, so a fleet's bindings,
heartbeats and usage reports cost one look-up each instead of a regex match; the answers are the
same, for safe and unsafe names, before and after they are remembered and once forgotten."""

import re

from schemas import authority
from schemas import events as ev
from schemas import subjects


class CountingPattern:
    def __init__(self):
        self.pattern, self.calls = re.compile(subjects._SAFE_TOKEN.pattern), 0

    def fullmatch(self, value):
        self.calls += 1
        return self.pattern.fullmatch(value)


def node_checker(monkeypatch):
    counting = CountingPattern()
    monkeypatch.setattr(subjects, "_SAFE_TOKEN", counting)
    return authority._checker(authority._pattern("gpu.evt.node.{node}")), counting


def test_a_node_name_is_matched_once_then_remembered(monkeypatch):
    check, counting = node_checker(monkeypatch)
    beat = ev.NodeHeartbeat(node="node-00001")
    assert [check("gpu.evt.node.node-00001", beat) for _ in range(5)] == [True] * 5
    assert counting.calls == 1
    assert not check("gpu.evt.node.node-00002", beat)  # another node's subject


def test_unsafe_names_answer_as_before_and_only_admitted_ones_are_remembered(monkeypatch):
    """Session 29: each subject is remembered with the node admitted on it (the check is a pure
    function of the two), so a name admitted on its subject (one whose writer's rewrite leaves it
    as it is, unicode letters too) is checked once; a refused one is checked afresh each time."""
    check, counting = node_checker(monkeypatch)
    for name in ("a.b", "a b", "a*", "ünïcode-node"):
        event = ev.NodeHeartbeat(node=name)
        plain = authority._token(name) == name
        per_round = []
        for _ in range(3):
            before = counting.calls
            assert check("gpu.evt.node." + name, event) == plain
            per_round.append(counting.calls - before)
        assert per_round[0] > 0
        assert per_round[1:] == ([0, 0] if plain else per_round[:1] * 2), name
    assert check("gpu.evt.node.a_b", ev.NodeHeartbeat(node="a.b"))  # its rewritten token
    assert check("gpu.evt.node.a_b", ev.NodeHeartbeat(node="a_b"))  # and the name that is that token
    assert not check("gpu.evt.node.a_b", ev.NodeHeartbeat(node="a.c"))  # another token


def test_the_remembered_names_are_bounded(monkeypatch):
    check, counting = node_checker(monkeypatch)
    monkeypatch.setattr(authority, "KNOWN_NODES", 4)
    for round_ in range(2):
        for i in range(10):
            name = f"n{i}"
            assert check("gpu.evt.node." + name, ev.NodeHeartbeat(node=name))
    assert counting.calls == 20  # forgotten all at once when full: each matched again


def test_claim_ids_are_not_remembered(monkeypatch):
    counting = CountingPattern()
    monkeypatch.setattr(subjects, "_SAFE_TOKEN", counting)
    check = authority._checker(authority._pattern("gpu.evt.claim.{claim_id}"))
    release = ev.ClaimReleased(claim_id="c1")
    assert check("gpu.evt.claim.c1", release) and check("gpu.evt.claim.c1", release)
    assert counting.calls == 2  # unique per claim: remembering them would only grow the table
