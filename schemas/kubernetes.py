"""The Kubernetes-facing names of the contract: custom resources, annotations, labels.

One place spells them, because three writers meet on them: the claim service turns GpuClaim
objects into claims, the pool controller turns GPUPool objects into pools and answers the
admission webhook, and deploy/k8s declares the CustomResourceDefinitions.
"""

from __future__ import annotations

import re

# Seed 004's GPUPool (Deckhouse GPU control plane): cluster-scoped, the seed's manifest as written.
POOL_GROUP, POOL_VERSION, POOL_KIND, POOL_PLURAL = "gpu.deckhouse.io", "v1alpha1", "GPUPool", "gpupools"
# gpuledger's own spelling of the same kind, accepted by `gpuledger pool apply`
POOL_API_VERSIONS = (f"{POOL_GROUP}/{POOL_VERSION}", "gpu.gpuledger.io/v1alpha1")
# Seed 001's GpuClaim: namespaced, `apiVersion: gpu.scheduling/v1` as the seed writes it.
CLAIM_GROUP, CLAIM_VERSION, CLAIM_KIND, CLAIM_PLURAL = "gpu.scheduling", "v1", "GpuClaim", "gpuclaims"

# Seed 001's pod annotations: the user names the claim, gpuledger writes where it was allocated.
CLAIM_ANNOTATION = f"{CLAIM_GROUP}/claim"
ALLOCATED_ANNOTATION = f"{CLAIM_GROUP}/allocated"
CLAIM_ID_ANNOTATION = f"{CLAIM_GROUP}/claim-id"
ISLANDS_ANNOTATION = f"{CLAIM_GROUP}/islands"

# Labels on the claim a GpuClaim becomes, so the webhook finds it from the pod's annotation.
CLAIM_NAMESPACE_LABEL = "gpuclaim.namespace"
CLAIM_NAME_LABEL = "gpuclaim.name"
CLAIM_UID_LABEL = "gpuclaim.uid"

# Seed 004's resource prefix (`gpu.deckhouse.io/<pool>`); gpuledger's own default differs.
SEED_POOL_PREFIX = "gpu.deckhouse.io"

_UNSAFE = re.compile(r"[^A-Za-z0-9._:-]")


def claim_id_for(uid: str) -> str:
    """The claim id of a GpuClaim: its UID, which a re-created object of the same name does not
    share (a claim id, once ended, is never reused by the ledger)."""
    return "gpuclaim-" + _UNSAFE.sub("-", uid)[:100]
