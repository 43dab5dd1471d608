"""The admission webhook answers reviews for its caller only: the API server's client certificate
(made by `gpuledger webhook certs`, verified against GPULEDGER_ADMISSION_CLIENT_CA and, when given,
naming one of GPULEDGER_ADMISSION_CLIENT_NAMES) or its bearer token. Before session 35 any pod that
reached the port could POST a review naming `gpu.scheduling/claim: <name>` and read the claim's
node and devices from the answer. The probes stay open (the kubelet presents no certificate), and
GPULEDGER_ADMISSION_UNAUTHENTICATED=1 answers anyone, said loudly at start."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from services.pool_controller.webhook import (
    AdmissionConfigError, caller_check, start_webhook, tls_context)
from shared.certs import CLIENT_NAME, generate
from shared.natsserver import free_port
from tests.cli import invoke

BIN = Path(sys.executable).parent / "gpuledger"
HOST = "pool-controller.gpuledger.svc"
SECRET_UUID = "GPU-0f00ba11-0000-4000-8000-000000000001"
TOKEN = "t0ken-of-the-api-server-0123456789"


def _leaky(path: str, review: dict) -> dict:
    """What a review of a bound seed-001 pod answers: its claim's node and devices."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch",
                         "patch": base64.b64encode(json.dumps(
                             [{"op": "add", "path": "/spec/nodeName", "value": "gpu-7"},
                              {"op": "add", "path": "/metadata/annotations/devices", "value": SECRET_UUID}]
                         ).encode()).decode()}}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """`gpuledger webhook certs --out-dir`: the webhook's files and the API server's."""
    folder = tmp_path_factory.mktemp("webhook-tls")
    done = invoke("webhook", "certs", "--out-dir", str(folder))
    assert done.returncode == 0, done.stderr
    return folder


def _client(files: Path, cert: str = "", key: str = "") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files / "ca.crt"))
    if cert:
        context.load_cert_chain(str(cert), str(key))
    return context


async def _post(port: int, context: ssl.SSLContext, path: str = "/mutate", token: str = "") -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=HOST)
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u-1", "kind": {"kind": "Pod"}, "operation": "CREATE",
                                   "namespace": "victims", "object": {"metadata": {
                                       "annotations": {"gpu.scheduling/claim": "their-claim"}}}}}).encode()
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    method = b"GET" if path in ("/healthz", "/readyz") else b"POST"
    writer.write(method + b" " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + auth + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    try:
        answer = (await asyncio.wait_for(reader.read(), 60)).decode()
    finally:
        writer.close()
    if not answer:  # TLS 1.3: a client certificate the server refuses shows after the handshake
        raise ConnectionError("closed without an answer")
    status = int(answer.split(" ", 2)[1])
    return status, answer.split("\r\n\r\n", 1)[1]


async def _serving(files: Path, check):
    tls = tls_context(str(files / "tls.crt"), str(files / "tls.key"), str(files / "ca.crt"))
    server = await start_webhook(_leaky, "127.0.0.1", 0, tls, caller=check)
    return server, server.sockets[0].getsockname()[1]


async def test_a_caller_without_the_api_servers_certificate_reads_nothing(files):
    check = caller_check(str(files / "ca.crt"), (CLIENT_NAME,), "", False, tls=True)
    server, port = await _serving(files, check)
    try:
        status, body = await _post(port, _client(files))
        assert status == 401 and SECRET_UUID not in body and "gpu-7" not in body
        assert "answers the Kubernetes API server only" in json.loads(body)["error"]
        assert "GPULEDGER_ADMISSION_CLIENT_CA" in json.loads(body)["error"]
        # the API server's certificate, as `webhook certs` made it, is answered
        status, body = await _post(port, _client(files, files / "client.crt", files / "client.key"))
        assert status == 200 and SECRET_UUID in base64.b64decode(json.loads(body)["response"]["patch"]).decode()
        # the webhook's own serving certificate is no client certificate (server use only)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await _post(port, _client(files, files / "tls.crt", files / "tls.key"))
        # probes stay open: the kubelet presents nothing
        for probe in ("/healthz", "/readyz"):
            assert (await _post(port, _client(files), probe))[0] == 200
    finally:
        server.close()
        await server.wait_closed()


async def test_a_certificate_of_another_ca_is_refused_in_the_handshake(files, tmp_path):
    other = generate("pool-controller", "gpuledger")
    (tmp_path / "c.crt").write_bytes(other.client_cert_pem)
    (tmp_path / "c.key").write_bytes(other.client_key_pem)
    server, port = await _serving(files, caller_check(str(files / "ca.crt"), (), "", False, tls=True))
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await _post(port, _client(files, tmp_path / "c.crt", tmp_path / "c.key"))
    finally:
        server.close()
        await server.wait_closed()


async def test_a_certificate_of_the_ca_naming_someone_else_is_refused(files):
    check = caller_check(str(files / "ca.crt"), ("kube-apiserver-other",), "", False, tls=True)
    server, port = await _serving(files, check)
    try:
        status, body = await _post(port, _client(files, files / "client.crt", files / "client.key"))
        assert status == 403 and CLIENT_NAME in json.loads(body)["error"] and SECRET_UUID not in body
    finally:
        server.close()
        await server.wait_closed()


async def test_a_bearer_token_is_checked(files, tmp_path):
    (tmp_path / "token").write_text(TOKEN + "\n")
    server, port = await _serving(files, caller_check("", (), str(tmp_path / "token"), False, tls=True))
    try:
        assert (await _post(port, _client(files), token=TOKEN))[0] == 200
        status, body = await _post(port, _client(files), token=TOKEN[:-1] + "X")
        assert status == 401 and "bearer token" in json.loads(body)["error"] and SECRET_UUID not in body
        assert (await _post(port, _client(files)))[0] == 401
    finally:
        server.close()
        await server.wait_closed()


def test_tls_without_a_way_to_know_the_caller_is_refused_unless_opted_out(tmp_path):
    with pytest.raises(AdmissionConfigError) as err:
        caller_check("", (), "", False, tls=True)
    for named in ("GPULEDGER_ADMISSION_CLIENT_CA", "GPULEDGER_ADMISSION_TOKEN_FILE",
                  "GPULEDGER_ADMISSION_UNAUTHENTICATED"):
        assert named in str(err.value)
    assert caller_check("", (), "", True, tls=True).anyone
    assert caller_check("", (), "", False, tls=False).anyone  # plain HTTP on loopback: development
    (tmp_path / "short").write_text("abc")
    with pytest.raises(AdmissionConfigError, match="at least 16 characters"):
        caller_check("", (), str(tmp_path / "short"), False, tls=True)
    with pytest.raises(AdmissionConfigError, match="GPULEDGER_ADMISSION_TOKEN_FILE=.*missing"):
        caller_check("", (), str(tmp_path / "missing"), False, tls=True)
    with pytest.raises(AdmissionConfigError, match="needs GPULEDGER_ADMISSION_CLIENT_CA"):
        caller_check("", ("x",), "", False, tls=True)


def test_the_api_servers_files_name_the_webhooks_service_and_hold_the_client_certificate(files):
    kubeconfig = yaml.safe_load((files / "admission-kubeconfig.yaml").read_text())
    assert (files / "admission-kubeconfig.yaml").stat().st_mode & 0o777 == 0o600
    assert (files / "client.key").stat().st_mode & 0o777 == 0o600
    [user] = kubeconfig["users"]
    assert user["name"] == HOST  # the API server picks credentials by the host it calls
    assert base64.b64decode(user["user"]["client-certificate-data"]) == (files / "client.crt").read_bytes()
    config = yaml.safe_load((files / "admission-config.yaml").read_text())
    assert config["kind"] == "AdmissionConfiguration"
    assert {p["name"] for p in config["plugins"]} == {"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook"}
    assert all(p["configuration"]["kubeConfigFile"] == str((files / "admission-kubeconfig.yaml").resolve())
               for p in config["plugins"])


def _pool_controller(nats_url: str, port: int, **env: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN), "service", "pool-controller"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, GPULEDGER_NATS_URL=nats_url, GPULEDGER_ADMISSION_PORT=str(port),
                                     **env))


def _tls_env(files: Path) -> dict[str, str]:
    return {"GPULEDGER_ADMISSION_TLS_CERT": str(files / "tls.crt"),
            "GPULEDGER_ADMISSION_TLS_KEY": str(files / "tls.key")}


def test_the_pool_controller_refuses_tls_without_caller_authentication(nats_url, files):
    refused = _pool_controller(nats_url, free_port(), **_tls_env(files))
    out, _ = refused.communicate(timeout=300)
    assert refused.returncode != 0 and "must know its caller" in out, out
    assert "GPULEDGER_ADMISSION_CLIENT_CA" in out and "GPULEDGER_ADMISSION_UNAUTHENTICATED=1" in out


async def _until_listening(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 300  # a guard against a hang, not a timing
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the webhook never listened"
            await asyncio.sleep(0.2)


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        return proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()[0]


async def test_the_real_pool_controller_answers_only_the_api_servers_certificate(nats_url, files):
    port = free_port()
    proc = _pool_controller(nats_url, port, **_tls_env(files), GPULEDGER_ADMISSION_CLIENT_CA=str(files / "ca.crt"),
                            GPULEDGER_ADMISSION_CLIENT_NAMES=CLIENT_NAME)
    try:
        await _until_listening(proc, port)
        status, body = await _post(port, _client(files))
        assert status == 401 and "their-claim" not in body, body
        status, body = await _post(port, _client(files, files / "client.crt", files / "client.key"))
        assert status == 200 and json.loads(body)["response"]["uid"] == "u-1", body
    finally:
        out = _stop(proc)
    assert f"callers: client certificate named {CLIENT_NAME}" in out, out


async def test_the_opt_out_answers_anyone_and_says_so_at_start(nats_url, files):
    port = free_port()
    proc = _pool_controller(nats_url, port, **_tls_env(files), GPULEDGER_ADMISSION_UNAUTHENTICATED="1")
    try:
        await _until_listening(proc, port)
        assert (await _post(port, _client(files)))[0] == 200
    finally:
        out = _stop(proc)
    assert "answers ANY caller (GPULEDGER_ADMISSION_UNAUTHENTICATED=1)" in out, out


async def test_either_the_certificate_or_the_token_is_enough_when_both_are_configured(files, tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    check = caller_check(str(files / "ca.crt"), (CLIENT_NAME,), str(tmp_path / "token"), False, tls=True)
    server, port = await _serving(files, check)
    try:
        assert (await _post(port, _client(files, files / "client.crt", files / "client.key")))[0] == 200
        assert (await _post(port, _client(files, files / "client.crt", files / "client.key"), token="wrong-one"))[0] == 200
        assert (await _post(port, _client(files), token=TOKEN))[0] == 200
        assert (await _post(port, _client(files), token="wrong-one"))[0] == 401
        assert (await _post(port, _client(files)))[0] == 401
    finally:
        server.close()
        await server.wait_closed()
