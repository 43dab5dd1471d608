"""The trace reader accepts the openb format exactly and names the problem otherwise."""

from __future__ import annotations

import pytest

from simulator.trace import TraceError, read_nodes, read_pods, read_trace
from tests.simulator.conftest import NODE_HEADER, POD_HEADER, pod_line


def test_reads_a_well_formed_trace(small_trace):
    trace = read_trace(*small_trace)
    assert len(trace.nodes) == 4 and len(trace.pods) == 20
    assert trace.capacity == 12_000
    t4_only = [p for p in trace.pods if p.models]
    assert t4_only and all(p.models == ("T4",) for p in t4_only)


@pytest.mark.parametrize("line, field, problem", [
    (pod_line("a", k=2, u=500), "gpu_milli", "several GPUs are always whole"),
    (pod_line("a", k=0, u=300), "gpu_milli", "CPU-only pod asks 0"),
    (pod_line("a", k=1, u=0), "gpu_milli", "expected 1..1000"),
    (pod_line("a", u=1200), "gpu_milli", "out of range"),
    (pod_line("a", cpu="-5"), "cpu_milli", "non-negative integer"),
    (pod_line("a", cpu="1.5"), "cpu_milli", "non-negative integer"),
    (pod_line("a", spec="T4||G2"), "gpu_spec", "empty or padded"),
    (pod_line("a", created=50, deleted=10), "deletion_time", "before creation_time"),
    ("a,1000,1024,1,1000,,XX,Running,0,1,0", "qos", "not one of"),
    (" a,1000,1024,1,1000,,LS,Running,0,1,0", "name", "whitespace"),
])
def test_rejects_bad_pod_fields_naming_the_field_and_line(write, line, field, problem):
    path = write("pods.csv", POD_HEADER, [pod_line("ok"), line])
    with pytest.raises(TraceError) as err:
        read_pods(path)
    message = str(err.value)
    assert "line 3" in message and repr(field) in message and problem in message


def test_rejects_a_wrong_header(write):
    path = write("pods.csv", POD_HEADER.replace("gpu_spec", "gpu_type"), [pod_line("a")])
    with pytest.raises(TraceError, match="line 1: header .*unknown column 'gpu_type'"):
        read_pods(path)


def test_rejects_a_row_with_missing_fields(write):
    path = write("nodes.csv", NODE_HEADER, ["n0,32000,131072,4"])
    with pytest.raises(TraceError, match="4 fields, expected 5"):
        read_nodes(path)


def test_rejects_duplicate_names(write):
    path = write("pods.csv", POD_HEADER, [pod_line("a"), pod_line("a")])
    with pytest.raises(TraceError, match="duplicate pod 'a'"):
        read_pods(path)


def test_rejects_a_model_no_node_has(write):
    nodes = write("nodes.csv", NODE_HEADER, ["n0,32000,131072,4,G2"])
    pods = write("pods.csv", POD_HEADER, [pod_line("a", spec="A100")])
    with pytest.raises(TraceError, match="A100, which no node has"):
        read_trace(nodes, pods)


def test_rejects_a_missing_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_nodes(tmp_path / "nope.csv")
