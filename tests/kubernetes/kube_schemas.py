"""Offline validation against the Kubernetes schemas (kubernetes-validate --strict) and against
gpuledger's own CustomResourceDefinitions (their openAPIV3Schema, with jsonschema)."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# the oldest version deploy/k8s supports (DRA needs 1.32) and the newest the schemas know
VERSIONS = ("1.32", kubernetes_validate.utils.latest_version())


def documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> the CRD's openAPIV3Schema."""
    schemas = {}
    for crd in documents(K8S / "crds.yaml"):
        spec = crd["spec"]
        for version in spec["versions"]:
            schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = \
                version["schema"]["openAPIV3Schema"]
    return schemas


def validate(obj: dict, version: str) -> None:
    """Raise with the path and the problem when `obj` is not a valid object of its kind."""
    custom = crd_schemas().get((obj["apiVersion"], obj["kind"]))
    if custom is not None:
        jsonschema.validate(obj, custom, cls=jsonschema.Draft4Validator)
        return
    kubernetes_validate.validate(obj, version, strict=True)
