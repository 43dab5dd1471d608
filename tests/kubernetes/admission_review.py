"""AdmissionReview v1 as the Kubernetes API documents it (admission.k8s.io/v1), and a checker of
the answer: the shape the API server accepts, with the JSONPatch applied as it would apply it."""

from __future__ import annotations

import base64
import json

import jsonpatch

RESPONSE_KEYS = {"uid", "allowed", "status", "patch", "patchType", "auditAnnotations", "warnings"}


def request_for(pod: dict, namespace: str = "team-a", operation: str = "CREATE",
                groups=("system:authenticated",)) -> dict:
    """Every field the API server sends for a pod CREATE (reference: 'Dynamic Admission Control',
    request example), so the handler sees exactly what a cluster gives it."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "alice", "uid": "u-alice", "groups": list(groups)},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def checked_response(review: dict, answer: dict) -> dict:
    """The `response`, after checking the envelope as the API server does."""
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert set(response) <= RESPONSE_KEYS, set(response) - RESPONSE_KEYS
    assert response["uid"] == review["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
    if not response["allowed"]:
        assert isinstance(response["status"]["code"], int) and response["status"]["message"]
    json.dumps(answer)  # what goes on the wire
    return response


def patched(review: dict, answer: dict) -> dict:
    """The object after the API server applies the answer's patch (RFC 6902, like the server)."""
    response = checked_response(review, answer)
    assert response["allowed"], response.get("status")
    if "patch" not in response:
        return review["request"]["object"]
    ops = json.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(review["request"]["object"], ops)
