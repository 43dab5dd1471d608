"""Seed 004's Ignored devices: an operator's mark in the fold, over the agent's health reports."""

from __future__ import annotations

import pytest

from schemas import events as ev
from ledger.evolve import evolve
from ledger.snapshot import from_snapshot, to_snapshot
from tests.pool_controller.fixtures import node_registered, state_of

UUID = "GPU-n1-0"


def ignore(ignored=True, uuid=UUID):
    return ev.DeviceIgnoreChanged(node="n1", uuid=uuid, ignored=ignored, reason="bad fan")


def health(value):
    return ev.DeviceHealthChanged(node="n1", uuid=UUID, health=value)


@pytest.mark.parametrize("events, expected", [
    ([ignore()], "Ignored"),
    ([ignore(), ignore(False)], "Healthy"),
    ([ignore(), health("Faulted")], "Ignored"),  # the agent's report does not clear the mark
    ([ignore(), health("Faulted"), ignore(False)], "Faulted"),  # ...but applies once un-ignored
    ([health("Faulted"), ignore(), ignore(False)], "Faulted"),
    ([health("Faulted"), ignore(), health("Healthy"), ignore(False)], "Healthy"),
    ([ignore(), node_registered("n1")], "Ignored"),  # a re-registration keeps the mark
    ([ignore(uuid="GPU-n1-1")], "Healthy"),  # another device
], ids=["ignored", "back", "fault-while-ignored", "fault-applies-after", "fault-before",
        "recovered-while-ignored", "re-registered", "other-device"])
def test_the_operators_mark_wins_over_the_agents_health(events, expected):
    state = state_of(node_registered("n1"), *events)
    assert state.units[UUID].health == expected


def test_a_device_ignored_before_it_registers_is_ignored_when_it_does():
    state = state_of(ignore(), node_registered("n1"))
    assert state.units[UUID].health == "Ignored"
    assert state.units["GPU-n1-1"].health == "Healthy"


def test_an_ignored_device_leaves_the_placement_view():
    state = state_of(node_registered("n1"), ignore())
    healthy = [u.healthy for u in state.nodes["n1"].view.units]
    assert healthy == [False, True]


def test_the_mark_survives_a_snapshot():
    state = state_of(node_registered("n1"), ignore())
    restored = from_snapshot(to_snapshot(state))
    evolve(restored, node_registered("n1"), 10)
    assert restored.units[UUID].health == "Ignored"
    assert restored.ignored == {UUID: "bad fan"}


# --- the command (pool controller) -------------------------------------------------------------

from schemas.commands import IgnoreDevice  # noqa: E402
from services.pool_controller.decisions import Append, decide_ignore  # noqa: E402


@pytest.mark.parametrize("cmd, outcome", [
    (IgnoreDevice(node="n1", device="1"), "append"),
    (IgnoreDevice(node="n1", device="GPU-n1-1", reason="fan"), "append"),
    (IgnoreDevice(node="n1", device="0"), "unchanged"),  # already ignored
    (IgnoreDevice(node="n1", device="0", ignored=False), "append"),
    (IgnoreDevice(node="n1", device="1", ignored=False), "unchanged"),
    (IgnoreDevice(node="n1", device="9"), "node n1 has no device '9'"),
    (IgnoreDevice(node="n2", device="0"), "node n2 is not registered"),
], ids=["by-index", "by-uuid", "already", "give-back", "not-ignored", "no-device", "no-node"])
def test_ignore_device_decisions(cmd, outcome):
    state = state_of(node_registered("n1"), ignore())
    result = decide_ignore(state, cmd, now=5.0, by="ops")
    if outcome == "append":
        assert isinstance(result, Append) and result.subject == "gpu.evt.marks.n1"
        assert (result.event.ignored, result.event.node, result.event.by) == (cmd.ignored, "n1", "ops")
        evolve(state, result.event, 3)
        assert (state.units[result.event.uuid].health == "Ignored") == cmd.ignored
    elif outcome == "unchanged":
        assert result.ok and result.data["changed"] is False
    else:
        assert not result.ok and outcome in result.error.message
