"""The MutatingWebhookConfiguration of the pod webhook, pure (the CA comes in as bytes).

Which pods it sees, and why:
- `matchConditions` (CEL, GA since Kubernetes 1.30) pass only pods that ask for GPUs: a pool
  resource under one of the prefixes (or a pool's own resource name), the pool annotation, a DRA
  claim from a pool template, or seed 001's claim annotation. Every other pod is never sent, so
  the webhook cannot slow down or block the rest of the cluster;
- `namespaceSelector` leaves out kube-system, kube-node-lease and gpuledger's own namespace (the
  webhook must never stand between the cluster and its own recovery);
- `objectSelector`: a pod labelled `gpu.gpuledger.io/admission: skip` is not sent (break glass).

`failurePolicy: Fail`, because only GPU pods get here, and for them failing open would admit a
pod unpinned from its pool's nodes, past the pool's access rules, and without its devices' env;
failing closed refuses it with an error naming this webhook, and its controller retries.
"""

from __future__ import annotations

import base64

import yaml

from schemas.kubernetes import CLAIM_ANNOTATION

WEBHOOK_NAME = "pods.gpu.gpuledger.io"
CONFIG_NAME = "gpuledger-pods"
SKIP_LABEL = "gpu.gpuledger.io/admission"
SYSTEM_NAMESPACES = ("kube-system", "kube-node-lease")


def _asks_for_pool_resource(containers: str, prefixes: tuple[str, ...], resources: tuple[str, ...]) -> str:
    keys = " || ".join([f"k.startsWith('{p}/')" for p in prefixes] + [f"k == '{r}'" for r in resources])
    part = lambda side: f"(has(c.resources.{side}) && c.resources.{side}.exists(k, {keys}))"  # noqa: E731
    return (f"{containers}.exists(c, has(c.resources) && ({part('limits')} || {part('requests')}))")


def asks_for_gpus(prefixes: tuple[str, ...], resources: tuple[str, ...] = ()) -> str:
    """CEL: true for a pod that asks for GPUs in any way gpuledger serves."""
    pool_key = f"{prefixes[0]}/pool"
    return " || ".join([
        f"(has(object.metadata.annotations) && ('{CLAIM_ANNOTATION}' in object.metadata.annotations"
        f" || '{pool_key}' in object.metadata.annotations))",
        "(has(object.spec.resourceClaims) && object.spec.resourceClaims.exists(r, "
        "has(r.resourceClaimTemplateName) && r.resourceClaimTemplateName.startsWith('gpu-pool-')))",
        _asks_for_pool_resource("object.spec.containers", prefixes, resources),
        "(has(object.spec.initContainers) && "
        + _asks_for_pool_resource("object.spec.initContainers", prefixes, resources) + ")",
    ])


def mutating_webhook(ca_pem: bytes, namespace: str, service: str, prefixes: tuple[str, ...],
                     resources: tuple[str, ...] = ()) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIG_NAME, "labels": {"app.kubernetes.io/managed-by": "gpuledger"}},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "Never",
            "clientConfig": {"service": {"name": service, "namespace": namespace, "path": "/mutate",
                                         "port": 443},
                             "caBundle": base64.b64encode(ca_pem).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": [*SYSTEM_NAMESPACES, namespace]}]},
            "objectSelector": {"matchExpressions": [{"key": SKIP_LABEL, "operator": "NotIn",
                                                     "values": ["skip"]}]},
            "matchConditions": [{"name": "asks-for-gpus", "expression": asks_for_gpus(prefixes, resources)}],
        }],
    }


# Where the API server's files go on a control-plane node (kube-apiserver's
# --admission-control-config-file names the first; a kubeadm static pod mounts the folder)
APISERVER_DIR = "/etc/kubernetes/gpuledger"
KUBECONFIG_FILE = "admission-kubeconfig.yaml"
ADMISSION_CONFIG_FILE = "admission-config.yaml"


def service_host(service: str, namespace: str) -> str:
    """How the API server names the webhook in its kubeconfig: the Service's DNS name (port 443)."""
    return f"{service}.{namespace}.svc"


def admission_kubeconfig(service: str, namespace: str, client_cert_pem: bytes = b"", client_key_pem: bytes = b"",
                         token: str = "") -> dict:
    """The kubeconfig the API server reads its credentials for our webhook from: a user named for
    the webhook's Service (the API server matches users by the host it calls, `*.svc` wildcards
    allowed) with the client certificate `gpuledger webhook certs` made, and/or a bearer token."""
    encode = lambda b: base64.b64encode(b).decode()  # noqa: E731
    user: dict = {}
    if client_cert_pem:
        user.update({"client-certificate-data": encode(client_cert_pem), "client-key-data": encode(client_key_pem)})
    if token:
        user["token"] = token
    return {"apiVersion": "v1", "kind": "Config",
            "users": [{"name": service_host(service, namespace), "user": user}]}


def admission_configuration(kubeconfig_path: str = f"{APISERVER_DIR}/{KUBECONFIG_FILE}") -> dict:
    """kube-apiserver's AdmissionConfiguration (--admission-control-config-file): both webhook
    plugins read their callers' credentials from `kubeconfig_path`."""
    plugin = lambda name: {"name": name, "configuration": {  # noqa: E731
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": kubeconfig_path}}
    return {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [plugin("ValidatingAdmissionWebhook"), plugin("MutatingAdmissionWebhook")]}


def client_secret(name: str, namespace: str, kubeconfig: dict) -> dict:
    """The API server's files, kept for the operator to copy to the control plane (then delete)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpuledger"}},
            "stringData": {KUBECONFIG_FILE: yaml.safe_dump(kubeconfig, sort_keys=False),
                           ADMISSION_CONFIG_FILE: yaml.safe_dump(admission_configuration(), sort_keys=False)}}


def tls_secret(name: str, namespace: str, cert_pem: bytes, key_pem: bytes, ca_pem: bytes) -> dict:
    encode = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpuledger"}},
            "data": {"tls.crt": encode(cert_pem), "tls.key": encode(key_pem), "ca.crt": encode(ca_pem)}}
