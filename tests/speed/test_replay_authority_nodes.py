"""A catch-up checks every stored event's subject against its writer's (schemas.authority): the
node names found to be safe subject tokens are remembered per pattern, so a fleet's bindings,
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


def test_unsafe_names_are_never_remembered_and_answer_as_before(monkeypatch):
    check, counting = node_checker(monkeypatch)
    for name in ("a.b", "a b", "a*", "ünïcode-node"):
        event = ev.NodeHeartbeat(node=name)
        plain = authority._token(name) == name
        per_round = []
        for _ in range(3):
            before = counting.calls
            assert check("gpu.evt.node." + name, event) == plain
            per_round.append(counting.calls - before)
        assert per_round[0] > 0 and per_round == per_round[:1] * 3, "checked afresh each time"
    assert check("gpu.evt.node.a_b", ev.NodeHeartbeat(node="a.b"))  # its rewritten token


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
