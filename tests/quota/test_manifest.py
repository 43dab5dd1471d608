"""`gpuledger quota apply -f`: the seed's GPUResourceQuota as written, cohort trees in any document
order, errors naming the file, the document and the manifest field; all or nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from schemas import events as ev
from services.quota.manifest import ManifestError, parents_first, quota_from_document
from shared.jetstream import JetStreamEventLog
from tests.quota.test_cli import gl, url  # noqa: F401  (the quota service on a real nats-server)

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
SEED = EXAMPLES / "quota-seed.yaml"
TREE = EXAMPLES / "quota-tree.yaml"


def test_the_seed_manifest_maps_onto_the_quota_fields():
    quota, kind = quota_from_document(yaml.safe_load(SEED.read_text()))
    assert kind == "GPUResourceQuota" and quota.namespace == "team-a"
    assert (quota.requests_tflops, quota.requests_vram, quota.limits_tflops, quota.limits_vram) == \
        ("1000", "100Gi", "2000", "200Gi")
    assert (quota.max_workers, quota.alert_threshold_percent, quota.single_max_gpu_count) == (50, 95, 8)
    assert (quota.single_max_requests_vram, quota.single_max_limits_tflops) == ("16Gi", "200")


def test_a_tree_is_stored_parents_first_whatever_the_document_order():
    quotas = [quota_from_document(d)[0] for d in yaml.safe_load_all(TREE.read_text())]
    order = [quotas[i].namespace for i in parents_first(quotas)]
    assert order.index("org") < order.index("research") < order.index("team-a")
    assert quotas[0].parent == "research" and quotas[2].parent == "org"


@pytest.mark.parametrize("doc, field, words", [
    ({"kind": "GPUResourceQuota"}, "apiVersion", "missing is not one of tensor-fusion.ai/v1"),
    ({"apiVersion": "tensor-fusion.ai/v1", "kind": "ResourceQuota"}, "kind", "'ResourceQuota' is not one of"),
    ({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota", "metadata": {"name": "q"}},
     "metadata.namespace", "missing"),
    ({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota", "metadata": {"namespace": "a"},
      "spec": {"total": {"requets": {}}}}, "spec.total.requets", "unknown field"),
    ({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota", "metadata": {"namespace": "a"},
      "spec": {"total": {"requests": {"memory": "1Gi"}}}}, "spec.total.requests.memory", "allowed here: tflops, vram"),
    ({"apiVersion": "tensor-fusion.ai/v1", "kind": "GPUResourceQuota", "metadata": {"namespace": "a"},
      "spec": {"single": "8"}}, "spec.single", "must be a mapping, got a string"),
    ({"apiVersion": "gpuledger.io/v1", "kind": "GPUResourceCohort", "metadata": {"name": "org"},
      "spec": {"cohort": "x"}}, "spec.cohort", "allowed here:"),
    (["a", "list"], "$", "a manifest is a mapping"),
])
def test_bad_manifests_are_refused_naming_the_field(doc, field, words):
    with pytest.raises(ManifestError) as err:
        quota_from_document(doc)
    assert err.value.field == field and words in err.value.message, err.value


# --- through the CLI, against the quota service ---------------------------------------------------------


async def test_the_seed_manifest_is_applied_as_written(url, tmp_path):  # noqa: F811
    code, out = await gl(url, "apply", "-f", str(SEED))
    assert code == 0, out
    assert out.splitlines() == ["quota team-a created"]
    code, out = await gl(url, "get", "team-a", "--json")
    spec = json.loads(out)["spec"]
    assert spec["total"]["requests"] == {"tflops": 1000.0, "vram_mib": 100 * 1024}
    assert spec["single"]["max_limits"] == {"tflops": 200.0, "vram_mib": 32 * 1024}
    code, out = await gl(url, "apply", "-f", str(SEED))
    assert out.splitlines() == ["quota team-a unchanged"]  # applying again stores nothing


async def test_a_tree_in_one_file_is_applied_and_listed_as_a_tree(url):  # noqa: F811
    code, out = await gl(url, "apply", "-f", str(TREE))
    assert code == 0, out
    code, out = await gl(url, "list", "--json")
    rows = {q["namespace"]: q for q in json.loads(out)}
    assert rows["team-a"]["parent"] == "research" and rows["research"]["parent"] == "org"
    assert rows["research"]["children"] == ["team-a", "team-b"]
    assert rows["team-b"]["spec"]["lending_limit"] == {"vram_mib": 80 * 1024}
    code, out = await gl(url, "list")
    assert "    team-a" in out  # indented two levels under org and research
    code, out = await gl(url, "get", "team-b")
    assert "limits in research: borrow TFLOPS 0, VRAM unlimited, lend TFLOPS all unused, VRAM 80Gi" in out
    code, out = await gl(url, "get", "team-a")
    assert "limits in research: borrow TFLOPS unlimited, VRAM 160Gi, lend all unused, fair sharing weight 2" in out


async def test_an_invalid_document_stores_nothing_and_names_where_it_is(url, tmp_path):  # noqa: F811
    bad = tmp_path / "quotas.yaml"
    good, second = SEED.read_text(), SEED.read_text().replace("team-a", "team-b").replace('"16Gi"', '"16"')
    bad.write_text(good + "---\n" + second)
    code, out = await gl(url, "apply", "-f", str(bad))
    assert code == 1
    assert f"{bad}, document 2: spec.single.maxRequests.vram: '16' has no unit" in out
    loop = tmp_path / "loop.yaml"
    loop.write_text(TREE.read_text().replace("spec:\n  total: {requests: {vram: 800Gi}, maxWorkers: 100}",
                                             "spec:\n  parentName: team-a"))
    code, out = await gl(url, "apply", "-f", str(loop))
    assert code == 1
    assert (f"{loop}, document 1: spec.cohort: team-a: research is below team-a in the quota tree "
            "(team-a -> research -> org -> team-a): a quota cannot be its own ancestor") in out
    code, out = await gl(url, "list", "--json")
    assert json.loads(out) == []  # neither file stored anything


async def test_dry_run_validates_against_the_log_and_stores_nothing(url, fresh_nats):  # noqa: F811
    import nats

    code, out = await gl(url, "apply", "-f", str(TREE), "--dry-run")
    assert code == 0 and "quota org created (dry run: nothing stored)" in out
    nc = await nats.connect(url)
    stored = [s.event async for s in JetStreamEventLog(nc).read() if isinstance(s.event, ev.QuotaSet)]
    await nc.close()
    assert stored == []


def test_a_manifest_may_let_a_namespace_preempt_across_namespaces():
    doc = {"apiVersion": "gpuledger.io/v1", "kind": "GPUResourceQuota",
           "metadata": {"namespace": "team-a"}, "spec": {"preemptOtherNamespaces": True}}
    quota, _ = quota_from_document(doc)
    assert quota.preempt_other_namespaces is True
    assert quota_from_document({**doc, "spec": {}})[0].preempt_other_namespaces is False
