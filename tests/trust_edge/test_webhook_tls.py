"""The admission webhook serves HTTPS, or plain HTTP on the loopback interface only when run
insecure on purpose; otherwise the pool controller refuses to start, saying what to set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.pool_controller.webhook import AdmissionConfigError, admission_listen
from shared.certs import generate
from shared.natsserver import free_port
from tests.cli import invoke

BIN = Path(sys.executable).parent / "gpuledger"


def test_no_certificate_and_not_insecure_is_refused():
    with pytest.raises(AdmissionConfigError) as err:
        admission_listen("", "", "", insecure=False)
    assert "GPULEDGER_ADMISSION_TLS_CERT" in str(err.value) and "GPULEDGER_ADMISSION_INSECURE" in str(err.value)


def test_insecure_is_loopback_only():
    assert admission_listen("", "", "", insecure=True) == ("127.0.0.1", None)
    assert admission_listen("::1", "", "", insecure=True) == ("::1", None)
    for host in ("0.0.0.0", "192.0.2.2", "::"):
        with pytest.raises(AdmissionConfigError) as err:
            admission_listen(host, "", "", insecure=True)
        assert f"GPULEDGER_ADMISSION_HOST={host}" in str(err.value)


def test_a_certificate_serves_tls_on_every_interface(tmp_path):
    made = generate("pool-controller", "gpuledger")
    (tmp_path / "tls.crt").write_bytes(made.cert_pem)
    (tmp_path / "tls.key").write_bytes(made.key_pem)
    host, tls = admission_listen("", str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), insecure=False)
    assert host == "0.0.0.0" and tls is not None
    with pytest.raises(AdmissionConfigError):
        admission_listen("", str(tmp_path / "tls.crt"), "", insecure=False)


def _pool_controller(nats_url: str, port: int, **env: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN), "service", "pool-controller"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, GPULEDGER_NATS_URL=nats_url, GPULEDGER_ADMISSION_PORT=str(port),
                                     **env))


def test_the_pool_controller_refuses_plain_http_unless_insecure(nats_url):
    port = free_port()
    refused = _pool_controller(nats_url, port)
    out, _ = refused.communicate(timeout=60)
    assert refused.returncode != 0 and "needs TLS" in out and "GPULEDGER_ADMISSION_INSECURE" in out


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_insecure_plain_http_listens_on_loopback_only(nats_url):
    port = free_port()
    proc = _pool_controller(nats_url, port, GPULEDGER_ADMISSION_INSECURE="1")
    try:
        deadline = time.monotonic() + 60
        while not _answers("127.0.0.1", port):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the webhook never listened on 127.0.0.1"
            time.sleep(0.2)
        others = [addr for addr in _own_addresses() if not addr.startswith("127.")]
        for addr in others:
            assert not _answers(addr, port), f"plain HTTP reachable on {addr}"
    finally:
        proc.terminate()
        proc.wait(30)


def _own_addresses() -> list[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return [a for a in out if ":" not in a]


def test_certs_out_dir_writes_files_the_webhook_serves_with(tmp_path):
    done = invoke("webhook", "certs", "--out-dir", str(tmp_path / "tls"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tls" / "tls.key").stat().st_mode & 0o777 == 0o600
    host, tls = admission_listen("", str(tmp_path / "tls" / "tls.crt"), str(tmp_path / "tls" / "tls.key"), False)
    assert tls is not None
