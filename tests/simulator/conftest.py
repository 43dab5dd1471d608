"""Small synthetic traces in the openb format."""

from __future__ import annotations

import pytest

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
              "deletion_time,scheduled_time")


def pod_line(name, cpu=1000, mem=1024, k=1, u=1000, spec="", created=0, deleted=100):
    return f"{name},{cpu},{mem},{k},{u},{spec},LS,Running,{created},{deleted},{created}"


@pytest.fixture
def write(tmp_path):
    def _write(name: str, header: str, lines: list[str]):
        path = tmp_path / name
        path.write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
        return path
    return _write


@pytest.fixture
def small_trace(write):
    """4 nodes (12 GPUs of two models) and 20 pods of every kind."""
    nodes = write("nodes.csv", NODE_HEADER, ["n0,32000,131072,4,G2", "n1,32000,131072,4,G2",
                                            "n2,16000,65536,2,T4", "n3,16000,65536,2,T4"])
    shapes = [dict(u=500), dict(u=250), dict(k=1), dict(k=2), dict(k=0, u=0, cpu=4000),
              dict(u=810, cpu=3000), dict(k=4), dict(u=470, spec="T4")]
    lines = [pod_line(f"p{i:02d}", created=10 * i, deleted=10 * i + 35, **shapes[i % len(shapes)])
             for i in range(20)]
    pods = write("pods.csv", POD_HEADER, lines)
    return nodes, pods
