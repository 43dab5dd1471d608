"""docker-compose.yml publishes only what must be reached from other hosts on every interface.

Compose's `ports: ["8080:8080"]` binds the host's every interface. The dashboard (no login: every
claim of every namespace, with its labels, devices and history), NATS's monitoring port (every
client's user, address and subscriptions: `/connz?subs=1`; streams and consumers: `/jsz`),
Prometheus, and Jaeger (its UI shows every trace; its OTLP ports take spans from anyone) have no
authentication, so they are published on the loopback interface only (reach them from elsewhere
through an SSH tunnel or a proxy that authenticates). NATS's client port (users and passwords) and
the admission webhook (TLS, called by the Kubernetes API server) are published as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# service -> container ports that authenticate their callers, so may be published on every interface
AUTHENTICATED = {"nats": {"4222"}, "pool-controller": {"8443"}}
LOOPBACK = ("127.0.0.1", "[::1]", "localhost")


def published(compose: dict) -> list[tuple[str, str, str]]:
    """(service, host address or "" for every interface, container port) for each published port."""
    out = []
    for name, service in compose["services"].items():
        for entry in service.get("ports", []):
            parts = str(entry).rsplit(":", 2)
            address = parts[0] if len(parts) == 3 else ""
            out.append((name, address, parts[-1].split("/")[0]))
    return out


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_without_a_login_are_published_on_loopback_only(compose):
    open_to_all = [f"{name}:{port}" for name, address, port in published(compose)
                   if port not in AUTHENTICATED.get(name, set()) and address not in LOOPBACK]
    assert not open_to_all, f"published on every interface without authentication: {open_to_all}"


def test_the_dashboard_and_nats_monitoring_are_still_published_for_this_host(compose):
    ports = {(name, port): address for name, address, port in published(compose)}
    assert ports[("dashboard", "8080")] == "127.0.0.1"
    assert ports[("nats", "8222")] == "127.0.0.1"
    assert ports[("nats", "4222")] == "" and ports[("pool-controller", "8443")] == ""


def test_the_dashboard_binding_every_interface_of_its_container_has_a_login(compose):
    """Published on 127.0.0.1 of the host, but bound to 0.0.0.0 in its container: every other
    container of the compose network reaches it (session 34). It takes its token from .env, as the
    NATS passwords, and stops without one (services/dashboard/login.py)."""
    env = compose["services"]["dashboard"]["environment"]
    assert env["GPULEDGER_DASHBOARD_HOST"] not in LOOPBACK
    assert env.get("GPULEDGER_DASHBOARD_TOKEN") == "${GPULEDGER_DASHBOARD_TOKEN:?set it in .env}"
    header = (ROOT / "docker-compose.yml").read_text().split("\nx-env:")[0]
    assert "GPULEDGER_DASHBOARD_TOKEN=$(openssl rand -hex 16)" in header, "the .env recipe makes the token too"
