"""Every shape of the published openb pod lists: five columns, columns in any order, optional
columns present or not, a model named twice in gpu_spec; and the errors for what is malformed."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuledger_cli.main import app
from simulator.trace import TraceError, read_nodes, read_pods, read_trace
from simulator.variants import write_pods
from tests.simulator.conftest import NODE_HEADER, POD_HEADER, pod_line

FIVE = "name,cpu_milli,memory_mib,num_gpu,gpu_milli"
NODES = ["n0,32000,131072,4,V100M16", "n1,32000,131072,4,V100M32", "n2,16000,65536,2,T4",
         "cpu0,64000,262144,0,"]  # a node without GPUs, as in the published all-node list


def test_a_five_column_pod_list_reads_as_unconstrained_pods_without_times(write):
    path = write("pods.csv", FIVE, ["a,4000,8192,1,500", "b,8000,16384,2,1000", "c,2000,1024,0,0"])
    pods = read_pods(path)
    assert [(p.name, p.num_gpu, p.gpu_milli, p.models) for p in pods] == [
        ("a", 1, 500, ()), ("b", 2, 1000, ()), ("c", 0, 0, ())]
    assert all(p.creation_time is None and p.deletion_time is None for p in pods)
    assert not read_trace(write("nodes.csv", NODE_HEADER, NODES), path).timed


def test_a_model_named_twice_in_gpu_spec_is_one_model_in_its_order(write):
    path = write("pods.csv", POD_HEADER, [pod_line("a", spec="V100M16|V100M32|V100M32"),
                                          pod_line("b", spec="T4|V100M32|T4")])
    assert [p.models for p in read_pods(path)] == [("V100M16", "V100M32"), ("T4", "V100M32")]


def test_columns_are_found_by_the_header_in_any_order(write):
    canonical = read_pods(write("a.csv", POD_HEADER, [pod_line("a", cpu=3000, u=250, spec="T4", created=5)]))
    header = POD_HEADER.split(",")
    values = pod_line("a", cpu=3000, u=250, spec="T4", created=5).split(",")
    order = [10, 3, 0, 5, 8, 1, 9, 4, 2, 7, 6]
    shuffled = write("b.csv", ",".join(header[i] for i in order), [",".join(values[i] for i in order)])
    assert read_pods(shuffled) == canonical
    nodes = read_nodes(write("n.csv", "model,gpu,sn,memory_mib,cpu_milli", ["T4,2,n0,65536,16000"]))
    assert (nodes[0].name, nodes[0].model, nodes[0].gpus, nodes[0].cpu_milli) == ("n0", "T4", 2, 16000)


@pytest.mark.parametrize("header, line, expect", [
    (FIVE + ",gpu_spec", "a,1000,1024,1,1000,T4", (("T4",), None, None)),
    (FIVE + ",qos,pod_phase", "a,1000,1024,1,1000,BE,Succeeded", ((), None, None)),
    (FIVE + ",creation_time", "a,1000,1024,1,1000,7", ((), 7, None)),
    (FIVE + ",creation_time,deletion_time", "a,1000,1024,1,1000,7,9", ((), 7, 9)),
])
def test_optional_columns_may_each_be_present_or_absent(write, header, line, expect):
    pod = read_pods(write("pods.csv", header, [line]))[0]
    assert (pod.models, pod.creation_time, pod.deletion_time) == expect


def test_a_byte_order_mark_before_the_header_is_not_part_of_the_first_column(tmp_path):
    path = tmp_path / "pods.csv"
    path.write_text("\ufeff" + FIVE + "\na,1000,1024,1,1000\n", encoding="utf-8")
    assert read_pods(path)[0].name == "a"


@pytest.mark.parametrize("header, lines, match", [
    ("name,cpu_milli,num_gpu,gpu_milli", ["a,1,1,1000"], r"line 1: header .*missing column 'memory_mib'"),
    (FIVE + ",gpu_type", ["a,1,1,1,1000,T4"], r"line 1: header .*: unknown column 'gpu_type' \(known: name,"),
    (FIVE + ",num_gpu", ["a,1,1,1,1000,1"], r"line 1: header .*: column 'num_gpu' appears twice"),
    (FIVE + ",deletion_time", ["a,1,1,1,1000,5"], r"line 2: field 'deletion_time': given without a 'creation_time'"),
    (FIVE, ["a,1,1,1,1000", "b,1,1,1"], r"line 3: 4 fields, expected 5"),
    (FIVE, ["a,1,1,2,500"], r"line 2: field 'gpu_milli': 500 with num_gpu=2"),
    (FIVE + ",gpu_spec", ["a,1,1,1,1000,T4||T4"], r"line 2: field 'gpu_spec': empty or padded"),
    (FIVE + ",qos", ["a,1,1,1,1000,"], r"line 2: field 'qos': must not be empty"),
    (FIVE + ",creation_time", ["a,1,1,1,1000,"], r"line 2: field 'creation_time': must not be empty"),
    ("", ["a,1,1,1,1000"], r"line 1: header .*missing column"),
])
def test_malformed_pod_lists_get_an_error_naming_file_line_and_field(write, header, lines, match):
    with pytest.raises(TraceError, match=r"pods\.csv " + match):
        read_pods(write("pods.csv", header, lines))


def test_a_node_list_still_needs_every_column(write):
    with pytest.raises(TraceError, match="missing column 'model'"):
        read_nodes(write("nodes.csv", "sn,cpu_milli,memory_mib,gpu", ["n0,1,1,1"]))


def test_a_replay_by_time_refuses_a_pod_list_without_times(write):
    nodes = write("nodes.csv", NODE_HEADER, NODES)
    pods = write("pods.csv", FIVE, ["a,1000,1024,1,500"])
    for flag in ("--dynamic", "--live"):
        out = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), flag])
        assert out.exit_code == 2
        assert f"{flag} replays pods by 'creation_time'" in out.output


def test_simulate_runs_end_to_end_on_a_five_column_list_with_repeated_models(write):
    nodes = write("nodes.csv", NODE_HEADER, NODES)
    lines = [f"p{i},2000,4096,1,{250 * (1 + i % 4)}" for i in range(12)]
    lines += [f"q{i},4000,4096,2,1000" for i in range(3)]
    pods = write("pods.csv", FIVE + ",gpu_spec", [f"{line}," for line in lines[:-3]] +
                 [f"{line},V100M16|V100M32|V100M32" for line in lines[-3:]])
    out = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--seeds", "1-2",
                                   "--policy", "fgd", "--policy", "gpuledger", "--workers", "1", "--json"])
    assert out.exit_code == 0, out.output
    result = json.loads(out.output)
    assert set(result) == {"fgd", "gpuledger"}
    assert all(r["unalloc_100"]["n"] == 2 for r in result.values())


def test_variants_write_a_list_without_times_that_reads_back_the_same(write, tmp_path):
    pods = read_pods(write("pods.csv", FIVE + ",gpu_spec", ["a,1000,1024,1,500,T4|V100M16", "b,0,0,0,0,"]))
    write_pods(tmp_path / "out.csv", list(pods))
    assert read_pods(tmp_path / "out.csv") == pods
