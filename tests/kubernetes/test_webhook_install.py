"""Installing the pod webhook: certificates from `gpuledger webhook certs`, a real TLS handshake
with them against the real webhook server, and the webhook configuration: valid for Kubernetes,
and its matchConditions (evaluated with a CEL implementation) passing only pods that ask for GPUs."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl

import cel
import pytest
import yaml
from cryptography import x509
from typer.testing import CliRunner

from gpuledger_cli.main import app
from services.pool_controller.webhook import start_webhook, tls_context
from services.pool_controller.webhook_config import asks_for_gpus
from tests.kubernetes.kube_schemas import VERSIONS, validate

PREFIXES = ("gpu.gpuledger.io", "gpu.deckhouse.io")


@pytest.fixture(scope="module")
def installed():
    result = CliRunner().invoke(app, ["webhook", "certs", "--namespace", "gpuledger"])
    assert result.exit_code == 0, result.output
    secret, config, client = list(yaml.safe_load_all(result.output))  # client: the API server's files
    return secret, config, client


@pytest.mark.parametrize("version", VERSIONS)
def test_the_printed_objects_are_valid_kubernetes_objects(installed, version):
    for obj in installed:
        validate(obj, version)


def test_the_cabundle_is_the_ca_that_signed_the_serving_certificate(installed):
    secret, config, _ = installed
    ca = x509.load_pem_x509_certificate(base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "pool-controller.gpuledger.svc" in names


async def test_the_api_servers_tls_check_passes_against_the_webhook_server(installed, tmp_path):
    """What the API server does: trust only the caBundle, check the Service name, POST a review."""
    secret, config, _ = installed
    for key in ("tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    server = await start_webhook(lambda path, review: {"apiVersion": "admission.k8s.io/v1",
                                                       "kind": "AdmissionReview",
                                                       "response": {"uid": "u", "allowed": True}},
                                 "127.0.0.1", 0, tls_context(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")))
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cadata=base64.b64decode(
        config["webhooks"][0]["clientConfig"]["caBundle"]).decode())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                       server_hostname="pool-controller.gpuledger.svc")
        body = json.dumps({"request": {"uid": "u"}}).encode()
        writer.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        answer = await reader.read()
        writer.close()
        assert b"200 OK" in answer and b'"allowed": true' in answer
        with pytest.raises(ssl.SSLCertVerificationError):  # another name is refused
            await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="evil.example")
    finally:
        server.close()
        await server.wait_closed()


def test_the_webhook_fails_closed_only_for_gpu_pods_and_never_sees_system_namespaces(installed):
    hook = installed[1]["webhooks"][0]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["namespaceSelector"]["matchExpressions"][0] == {
        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["kube-system", "kube-node-lease", "gpuledger"]}
    assert hook["matchConditions"][0]["expression"] == asks_for_gpus(PREFIXES)


def pod(annotations=None, limits=None, requests=None, init=False, claims=None):
    container = {"name": "c", "image": "x"}
    if limits or requests:
        container["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    spec = {"containers": [{"name": "main", "image": "x"}]}
    spec.setdefault("initContainers" if init else "containers", []).append(container)
    if claims:
        spec["resourceClaims"] = claims
    metadata = {"name": "p"}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@pytest.mark.parametrize("obj, intercepted", [
    (pod(), False),
    (pod(limits={"cpu": "1", "nvidia.com/gpu": "1"}), False),
    (pod(annotations={"team": "a"}), False),
    (pod(limits={"gpu.gpuledger.io/a100": "1"}), True),
    (pod(requests={"gpu.deckhouse.io/a100": "1"}), True),
    (pod(limits={"gpu.deckhouse.io/a100": "1"}, init=True), True),
    (pod(annotations={"gpu.scheduling/claim": "my-gpu-request"}), True),
    (pod(annotations={"gpu.gpuledger.io/pool": "dra"}), True),
    (pod(claims=[{"name": "g", "resourceClaimTemplateName": "gpu-pool-dra"}]), True),
    (pod(claims=[{"name": "g", "resourceClaimName": "someone-elses"}]), False),
], ids=["plain", "other-gpus", "other-annotation", "pool-resource", "seed-prefix-request",
        "init-container", "seed-001-claim", "dra-annotation", "dra-template", "other-claim"])
def test_match_conditions_pass_only_pods_that_ask_for_gpus(obj, intercepted):
    assert cel.evaluate(asks_for_gpus(PREFIXES), {"object": obj}) is intercepted


def test_readiness_waits_for_the_fold_and_liveness_does_not():
    from services.pool_controller.webhook import _route

    handler = lambda path, review: {}  # noqa: E731
    assert _route("GET", "/readyz", b"", handler, ready=lambda: False)[0] == 503
    assert _route("GET", "/healthz", b"", handler, ready=lambda: False)[0] == 200
    assert _route("GET", "/readyz", b"", handler, ready=lambda: True)[0] == 200
