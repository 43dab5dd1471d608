"""A claim's namespace, node and devices are marked once per batch, when its rows are read
(`dirty.claim_marks`), not at each of the four or five events that name it: they never change
once set (the grants and node at allocation, kept after the claim ends). The rows come out the
same (tests/readmodel and tests/speed/test_followers_projector_rows.py compare the tables in any
batch size)."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo, Grant
from services.projector.db import make_engine, migrate
from services.projector.models import DeviceRow, NodeRow, QuotaRow
from services.projector.projector import Projector


def test_a_claims_node_devices_and_namespace_are_marked_when_its_rows_are_read(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'rm.db'}")
    migrate(engine)
    projector = Projector(engine)
    devices = [DeviceInfo(uuid=f"GPU-n0-{i}", index=i, model="H100", memory_mib=81920) for i in range(2)]
    projector.stage(1, ev.NodeRegistered(node="n0", devices=devices, cpu_milli=64000, memory_mib=1 << 20, at=1.0))
    projector.flush()
    events = [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c1", namespace="team-a"), at=2.0),
              ev.DecisionBatch(decisions=[ev.ClaimAllocated(
                  claim_id="c1", namespace="team-a", node="n0", at=3.0, tflops=989.0,
                  grants=[Grant(node="n0", uuid="GPU-n0-1", index=1, memory_mib=81920)])], at=3.0),
              ev.ClaimBound(claim_id="c1", node="n0", env={"CUDA_VISIBLE_DEVICES": "1"}, at=4.0)]
    for seq, event in enumerate(events, 2):
        projector.stage(seq, event)
    dirty = projector._dirty
    assert dirty.claims == {"c1"} and dirty.namespaces == set()
    assert dirty.devices == {"GPU-n0-1"}  # the decision's own grants (a void one marks them too)
    changes = projector.take()
    assert [row["uuid"] for row in changes.replace[DeviceRow]] == ["GPU-n0-1"]
    assert [row["name"] for row in changes.replace[NodeRow]] == ["n0"]
    assert [(row["namespace"], row["gpus"]) for row in changes.replace[QuotaRow]] == [("team-a", 1)]
