"""deploy/k8s connects to NATS as users (issue 16): every gpuledger workload reads its own nkey
seed (GPULEDGER_NATS_NKEY_SEED_FILE) from a Secret of its own (a node agent from its host), and
no credential is in the ConfigMap. The manifests' validity is tests/kubernetes/test_manifests.py."""

from __future__ import annotations

from pathlib import Path

import yaml

from shared import nats_auth

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "gpuledger.yaml"


def _workloads():
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    return docs, [d for d in docs if d["kind"] in ("Deployment", "DaemonSet")]


def test_every_workload_reads_its_own_seed_from_a_secret_or_its_host():
    _, workloads = _workloads()
    users = {r.user for r in nats_auth.service_roles()}
    seen = set()
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        seed = env.get(nats_auth.NKEY_SEED_ENV)
        assert seed, f"{workload['metadata']['name']} connects without a NATS user"
        mount = next(m for m in container["volumeMounts"] if seed.startswith(m["mountPath"] + "/"))
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        if workload["kind"] == "DaemonSet":  # one node, one user: provisioned on the host
            assert "hostPath" in volume
            continue
        user = container["args"][-1]
        assert user in users and volume["secret"]["secretName"] == f"gpuledger-nats-{user}"
        seen.add(user)
    assert seen == users - {"dashboard"}


def test_the_configmap_holds_no_credential():
    docs, _ = _workloads()
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    url = config["data"]["GPULEDGER_NATS_URL"]
    assert "@" not in url and "password" not in str(config["data"]).lower()
