"""Configuration from the environment (12-factor): one place lists every variable."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from schemas.systems import System, SystemsError, parse_systems


def _float(name: str, default: float, low: float = 0.0, above: bool = False) -> float:
    """A number of the environment, at least `low` (above it when `above`). NaN, infinities and
    negative times are refused at start: `nan` and `-1` parse as floats, and a heartbeat or tick
    of 0 or less made a process spin, appending to the log as fast as it could (session 29)."""
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{name} must be a number, got {raw!r}")
    if not math.isfinite(value) or value < low or (above and value == low):
        raise SystemExit(f"{name} must be a number {'>' if above else '>='} {low:g}, got {raw!r}")
    return value


def _int(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    value = _float(name, default, low)
    if value != int(value) or value > high:
        raise SystemExit(f"{name} must be a whole number from {low} to {high}, got {raw!r}")
    return int(value)


def env_port(name: str, default: int) -> int:
    """A TCP port of the environment (0-65535), or the process stops naming the variable."""
    return _int(name, default, 0, 65535)


def _seconds(name: str, default: float) -> float:
    """An interval a loop sleeps: more than 0."""
    return _float(name, default, 0.0, above=True)


def _names(name: str, default: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in os.environ.get(name, default).split(",") if v.strip())


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise SystemExit(f"{name} must be true or false, got {raw!r}")


def _systems(name: str) -> tuple[System, ...]:
    try:
        return parse_systems(os.environ.get(name, ""))
    except SystemsError as err:
        raise SystemExit(f"{name}: {err}")


@dataclass(frozen=True)
class Settings:
    nats_url: str = field(default_factory=lambda: os.environ.get("GPULEDGER_NATS_URL", "nats://127.0.0.1:4222"))
    # A service asks nats-server who it connected as and refuses to start with another's credentials
    # (shared.service.check_own_user); `up`, docker-compose and deploy/k8s turn it on
    nats_require_own_user: bool = field(default_factory=lambda: _bool("GPULEDGER_NATS_REQUIRE_OWN_USER", False))
    data_dir: Path = field(default_factory=lambda: Path(os.environ.get("GPULEDGER_DATA_DIR", ".gpuledger")))
    db_url: str = field(default_factory=lambda: os.environ.get("GPULEDGER_DB_URL", ""))
    stream_replicas: int = field(default_factory=lambda: _int("GPULEDGER_STREAM_REPLICAS", 1, 1, 5))
    # What the intake work queue holds at most before nats-server refuses new claims (shared.jetstream)
    intake_max_msgs: int = field(default_factory=lambda: _int("GPULEDGER_INTAKE_MAX_MSGS", 1_000_000, 1, 1 << 40))
    intake_max_bytes: int = field(default_factory=lambda: _int("GPULEDGER_INTAKE_MAX_BYTES", 1 << 30, 1, 1 << 50))
    policy: str = field(default_factory=lambda: os.environ.get("GPULEDGER_POLICY", ""))
    node_timeout_s: float = field(default_factory=lambda: _seconds("GPULEDGER_NODE_TIMEOUT_S", 30.0))
    heartbeat_s: float = field(default_factory=lambda: _seconds("GPULEDGER_HEARTBEAT_S", 5.0))
    stale_after_s: float = field(default_factory=lambda: _float("GPULEDGER_STALE_AFTER_S", 600.0))
    # An allocation its node agent reports with no process for this long is released (0: never).
    release_unused_after_s: float = field(
        default_factory=lambda: _float("GPULEDGER_RELEASE_UNUSED_AFTER_S", 1800.0))
    # A process on a GPU that no allocation holds is killed by the node agent after this long
    # (0: reported only, never killed).
    kill_unallocated_after_s: float = field(
        default_factory=lambda: _float("GPULEDGER_KILL_UNALLOCATED_AFTER_S", 0.0))
    starvation_after_s: float = field(default_factory=lambda: _float("GPULEDGER_STARVATION_AFTER_S", 300.0))
    # a claim pending this long is rejected (code pending-expired): the queue is bounded; 0: never
    pending_expire_after_s: float = field(default_factory=lambda: _float("GPULEDGER_PENDING_EXPIRE_S", 86400.0))
    snapshot_every: int = field(default_factory=lambda: _int("GPULEDGER_SNAPSHOT_EVERY", 50_000, 1, 1 << 40))
    tick_s: float = field(default_factory=lambda: _seconds("GPULEDGER_TICK_S", 1.0))
    # Cluster facts the pool controller validates `backend: dra` against (seed 004).
    k8s_version: str = field(default_factory=lambda: os.environ.get("GPULEDGER_K8S_VERSION", ""))
    dra_enabled: bool = field(default_factory=lambda: _bool("GPULEDGER_DRA_ENABLED", False))
    # Pod admission webhook of the pool controller: 0 = not served.
    admission_port: int = field(default_factory=lambda: env_port("GPULEDGER_ADMISSION_PORT", 0))
    # "" = every interface with TLS; plain HTTP (GPULEDGER_ADMISSION_INSECURE=1, development only)
    # is served on 127.0.0.1 only (services/pool_controller/webhook.py: admission_listen)
    admission_host: str = field(default_factory=lambda: os.environ.get("GPULEDGER_ADMISSION_HOST", ""))
    admission_insecure: bool = field(default_factory=lambda: _bool("GPULEDGER_ADMISSION_INSECURE", False))
    admission_tls_cert: str = field(default_factory=lambda: os.environ.get("GPULEDGER_ADMISSION_TLS_CERT", ""))
    admission_tls_key: str = field(default_factory=lambda: os.environ.get("GPULEDGER_ADMISSION_TLS_KEY", ""))
    # Who may ask for a review (services/pool_controller/webhook.py: caller_check): the API server's
    # client certificate, verified against this CA (and naming one of _CLIENT_NAMES, if given), and/or
    # the bearer token in _TOKEN_FILE; _UNAUTHENTICATED=1 answers anyone (said at start)
    admission_client_ca: str = field(default_factory=lambda: os.environ.get("GPULEDGER_ADMISSION_CLIENT_CA", ""))
    admission_client_names: tuple[str, ...] = field(default_factory=lambda: _names("GPULEDGER_ADMISSION_CLIENT_NAMES", ""))
    admission_token_file: str = field(default_factory=lambda: os.environ.get("GPULEDGER_ADMISSION_TOKEN_FILE", ""))
    admission_unauthenticated: bool = field(default_factory=lambda: _bool("GPULEDGER_ADMISSION_UNAUTHENTICATED", False))
    pool_resource_prefix: str = field(
        default_factory=lambda: os.environ.get("GPULEDGER_POOL_RESOURCE_PREFIX", "gpu.gpuledger.io"))
    # other prefixes a pod may name a pool with (renamed to the pool's resource by the webhook)
    pool_resource_aliases: tuple[str, ...] = field(
        default_factory=lambda: _names("GPULEDGER_POOL_RESOURCE_ALIASES", "gpu.deckhouse.io"))
    # seed 001's scheduler name: pods naming it get the default scheduler (gpuledger decided)
    replaced_schedulers: tuple[str, ...] = field(
        default_factory=lambda: _names("GPULEDGER_REPLACED_SCHEDULERS", "gpu-scheduler"))
    # Kubernetes controller mode (GPUPool / GpuClaim objects, node conditions): needs a cluster
    kube_controller: bool = field(default_factory=lambda: _bool("GPULEDGER_KUBE_CONTROLLER", False))
    kube_namespace: str = field(default_factory=lambda: os.environ.get("GPULEDGER_KUBE_NAMESPACE", "gpuledger"))
    endpoint_tick_s: float = field(default_factory=lambda: _seconds("GPULEDGER_ENDPOINT_TICK_S", 1.0))
    # the image every live endpoint's workers run (the seed's TETRA_GPU_IMAGE); no client can change it
    live_image: str = field(default_factory=lambda: os.environ.get("GPULEDGER_LIVE_IMAGE",
                                                                   "runpod/tetra-rp:latest"))
    # Helix model slots: the operator's models (YAML), the clean-up timer, when an idle slot is stale
    models_file: str = field(default_factory=lambda: os.environ.get("GPULEDGER_MODELS", ""))
    slot_tick_s: float = field(default_factory=lambda: _seconds("GPULEDGER_SLOT_TICK_S", 30.0))
    slot_stale_s: float = field(default_factory=lambda: _float("GPULEDGER_SLOT_STALE_S", 300.0))
    # a request on a slot not finished within this long gives its concurrency back (a client died)
    slot_request_timeout_s: float = field(default_factory=lambda: _float("GPULEDGER_SLOT_REQUEST_TIMEOUT_S", 900.0))
    # Prometheus /metrics of this process: 0 = not served (`gpuledger up` assigns one per child).
    metrics_port: int = field(default_factory=lambda: env_port("GPULEDGER_METRICS_PORT", 0))
    metrics_host: str = field(default_factory=lambda: os.environ.get("GPULEDGER_METRICS_HOST", "127.0.0.1"))
    # Publishing systems (schemas/systems.py): `NAME:NS[,NS...]`, several separated by `;`. Each
    # publishes on subjects carrying its name, as NATS user `system-NAME`, and may release and renew
    # only its own claims, in its own namespaces (the claim service checks; nats-server keeps it off
    # other systems' subjects: `gpuledger up --system`, `gpuledger nats config --system`).
    systems: tuple[System, ...] = field(default_factory=lambda: _systems("GPULEDGER_SYSTEMS"))

    @property
    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{(self.data_dir / 'readmodel.db').resolve()}"
