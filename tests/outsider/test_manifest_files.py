"""Manifest files the CLI reads (`quota apply -f`, `pool create|apply|update -f`, `endpoint
create|update -f`): a broken or hostile file gets one line naming the file and the problem.
Found by the session-25 outsider: bytes that are not UTF-8 and nesting a few thousand levels deep
ended in a Python traceback (UnicodeDecodeError, RecursionError), and a key written twice in one
mapping was taken silently, the last one winning (`{mode: Card, mode: MIG}` created a MIG pool;
`vram: 1Gi, vram: 2Gi` a 2Gi quota), where the intake refuses `{"gpus": 1, "gpus": 64}`."""

from __future__ import annotations

import pytest

from tests.cli import invoke

NOWHERE = "nats://127.0.0.1:9"  # none of these files gets as far as connecting
QUOTA = ("apiVersion: tensor-fusion.ai/v1\nkind: GPUResourceQuota\nmetadata: {name: q, namespace: team-a}\n"
         "spec:\n  total: {requests: {vram: 1Gi}}\n")
POOL = '{"apiVersion": "gpu.gpuledger.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": "p1"}, ' \
       '"spec": {"provider": "nvidia", "allocation": {"mode": "Card"}}}'

COMMANDS = [("quota", "apply"), ("pool", "create"), ("pool", "apply"), ("pool", "update"),
            ("endpoint", "create")]
BROKEN = [
    (b"\xff\xfe not text", "not UTF-8 text: byte 0xff at offset 0"),
    (QUOTA.encode()[:20] + b"\xc3(" + QUOTA.encode()[20:], "not UTF-8 text: byte 0xc3 at offset 20"),
    (b"a: " + b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    (b'{"a":' * 5000 + b"1" + b"}" * 5000, "nested too deeply"),
    (QUOTA.replace("{vram: 1Gi}", "{vram: 1Gi, vram: 2Gi}").encode(), "duplicate key 'vram' (line 5"),
    (POOL.replace('"mode": "Card"', '"mode": "Card", "mode": "MIG"').encode(), "duplicate key 'mode'"),
    (b"spec:\n  provider: nvidia\n  provider: amd\n", "duplicate key 'provider' (line 3, column 3; first at line 2)"),
]


@pytest.mark.parametrize("group, verb", COMMANDS)
@pytest.mark.parametrize("data, words", BROKEN)
def test_a_broken_file_gets_one_line_naming_the_file(tmp_path, group, verb, data, words):
    path = tmp_path / "manifest.yaml"
    path.write_bytes(data)
    result = invoke(group, verb, "-f", str(path), "--nats-url", NOWHERE)
    assert result.returncode == 1, result
    assert result.stderr.startswith(f"error: {path}: "), result.stderr
    assert words in result.stderr
    assert "Traceback" not in result.stderr


def test_stdin_is_read_the_same_way():
    result = invoke("pool", "create", "-f", "-", "--nats-url", NOWHERE, stdin=POOL.replace('"p1"}', '"p1", "name": "p2"}'))
    assert result.returncode == 1 and "error: -: duplicate key 'name'" in result.stderr, result


def test_a_document_given_twice_names_both_documents(tmp_path):
    path = tmp_path / "quotas.yaml"
    path.write_text(QUOTA + "---\n" + QUOTA)
    result = invoke("quota", "apply", "-f", str(path), "--nats-url", NOWHERE)
    assert result.returncode == 1
    assert (f"error: {path}, document 2: metadata.namespace: team-a is given twice "
            f"(first in {path}, document 1)") in result.stderr


def test_a_good_file_still_reads(tmp_path):
    from gpuledger_cli.documents import load_documents
    path = tmp_path / "quotas.yaml"
    path.write_text(QUOTA + "---\n" + QUOTA.replace("team-a", "team-b") + "---\n")
    assert [d["metadata"]["namespace"] for d in load_documents(path) if d] == ["team-a", "team-b"]
    merged = tmp_path / "merge.yaml"
    merged.write_text("base: &b {a: 1, b: 2}\nuse:\n  <<: *b\n  b: 3\n")
    assert load_documents(merged) == [{"base": {"a": 1, "b": 2}, "use": {"a": 1, "b": 3}}]
