"""Session 29's outsider: hostile input at two doors the earlier sessions left.

- A manifest file (`quota apply -f`, `pool create|apply|update -f`, `endpoint create|update -f`)
  holding a YAML "billion laughs": nine aliases of nine aliases ... of a list, a few hundred bytes
  that stand for 9**8 values. PyYAML shares what an alias names, so loading took no time, but the
  CLI then walked it (the seed endpoint's document is sent as written: encoding it to JSON copied
  out every value) and ran until it had taken every byte of memory. Now: one line naming the file.
- The dashboard's `/live?after=` with anything but a sequence number answered 500 and a Python
  `ValueError`; now 400 naming the parameter.
"""

from __future__ import annotations

import asyncio
import resource
import subprocess
import sys

import pytest

from services.dashboard.app import Dashboard
from shared.httpserve import Request, Response, Stream
from tests.ops_ux.test_dashboard_render import _NoLog, _NoNats

NOWHERE = "nats://127.0.0.1:9"  # none of these files gets as far as connecting


def bomb(top: str, where: str) -> str:
    """A manifest whose `where` holds 9**8 values in 9 lines of aliases."""
    lines = ["  l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return top.replace(f"{where}: BOMB", f"{where}:\n" + "\n".join(lines))


ENDPOINT = 'name: ep-1\ngpus: "HOPPER_141"\nworkersMax: 1\nextra: BOMB\n'
QUOTA = ("apiVersion: tensor-fusion.ai/v1\nkind: GPUResourceQuota\nmetadata: {name: q, namespace: team-a}\n"
         "spec:\n  total: {requests: {vram: 1Gi}}\nstatus: BOMB\n")
POOL = ("apiVersion: gpu.gpuledger.io/v1alpha1\nkind: GPUPool\nmetadata:\n  name: p1\n  labels: BOMB\n"
        "spec: {provider: nvidia, allocation: {mode: Card}}\n")
CASES = [(("endpoint", "create"), ENDPOINT, "extra"), (("endpoint", "update"), ENDPOINT, "extra"),
         (("quota", "apply"), QUOTA, "status"), (("pool", "create"), POOL, "  labels"),
         (("pool", "apply"), POOL, "  labels")]


def _one_gib() -> None:  # a regression runs out of memory in its own process, not the machine
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize("command, text, where", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_yaml_bomb_is_refused_naming_the_file(tmp_path, command, text, where):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(text, where))
    result = subprocess.run([sys.executable, "-c", "from gpuledger_cli.main import app; app()", *command,
                             "-f", str(path), "--nats-url", NOWHERE], capture_output=True, text=True,
                            timeout=60, preexec_fn=_one_gib)
    assert result.returncode == 1, result
    assert result.stderr.startswith(f"error: {path}: holds more than 100,000 values"), result.stderr


def test_anchors_and_merge_keys_of_a_real_manifest_still_read(tmp_path):
    from gpuledger_cli.documents import load_documents

    path = tmp_path / "quotas.yaml"
    path.write_text("base: &base {requests: {vram: 1Gi}, maxWorkers: 4}\n"
                    "a: {<<: *base, maxWorkers: 8}\nb: *base\n")
    [doc] = load_documents(path)
    assert doc["a"] == {"requests": {"vram": "1Gi"}, "maxWorkers": 8} and doc["b"]["maxWorkers"] == 4


def live(after: str | None) -> Response | Stream:
    query = {} if after is None else {"after": after}
    return asyncio.run(Dashboard(_NoNats(), _NoLog(), {}).live(Request("GET", "/live", query)))


@pytest.mark.parametrize("after", ["abc", "-1", "1e3", "1.5", "٣", "9" * 40, "0x10"])
def test_live_with_a_bad_after_is_a_400_naming_it(after):
    answer = live(after)
    assert isinstance(answer, Response) and answer.status == 400, answer
    assert answer.body.startswith("after: a log sequence number"), answer.body


@pytest.mark.parametrize("after", [None, "", "0", "17", " 5 "])
def test_live_with_a_sequence_number_streams(after):
    assert isinstance(live(after), Stream)
