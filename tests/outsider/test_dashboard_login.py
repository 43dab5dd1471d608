"""The dashboard's login (session 34). It shows every claim of every namespace (labels, devices,
history) and had no login at all (left open in session 33):

- Bound to 127.0.0.1 (`gpuledger up`), any web page an operator opened could read it: a name of
  the attacker's that resolves to 127.0.0.1 (DNS rebinding) makes its page same-origin with the
  dashboard, and every page answered whatever the `Host` header said. Now, without a login, only
  loopback names are answered.
- `GPULEDGER_DASHBOARD_HOST=0.0.0.0` (docker-compose binds it so in its container, where every
  other container of the network reaches it) served everyone. Now such a start needs
  `GPULEDGER_DASHBOARD_TOKEN`, a secret from the env file, asked as HTTP Basic's password or a
  bearer token; without one the dashboard stops at once, naming the variable.

Each test starts the real process (`python -m services.dashboard`), as `up` and compose do.
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "0123456789abcdef0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(port: int, path: str, host: str, authorization: str | None = None) -> tuple[int, dict, str]:
    """A raw GET, so that the Host header is whatever a browser would send for another name."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        extra = f"Authorization: {authorization}\r\n" if authorization else ""
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode())
        if path.startswith("/live"):  # a stream: its head is enough
            raw = b""
            while b"\r\n\r\n" not in raw:
                raw += sock.recv(4096)
        else:
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body.decode("utf-8", "replace")


def start(nats_url: str, port: int, **settings: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_DASHBOARD")}
    env.update(GPULEDGER_NATS_URL=nats_url, GPULEDGER_DASHBOARD_PORT=str(port), PYTHONPATH=str(ROOT), **settings)
    return subprocess.Popen([sys.executable, "-m", "services.dashboard"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_ready(process: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + 120  # a guard against a hang, not a timing assertion
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the dashboard stopped: {process.stdout.read()}"
        try:
            if get(port, "/healthz", f"127.0.0.1:{port}")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("the dashboard never answered /healthz")


@pytest.fixture
def dashboard(fresh_nats, fresh_client):
    """Starts a dashboard process with the given settings; stops every one it started."""
    started = []

    def run(**settings: str) -> int:
        port = free_port()
        process = start(fresh_nats.url, port, **settings)
        started.append(process)
        wait_ready(process, port)
        return port

    yield run
    for process in started:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def test_without_a_login_only_loopback_names_are_answered(dashboard):
    port = dashboard()
    for host in ("evil.example", f"evil.example:{port}", f"192.168.1.10:{port}", "127.0.0.1.evil.example"):
        for path in ("/", "/fragment/overview", "/claim/x", "/live?after=0", "/metrics"):
            status, _, body = get(port, path, host)
            assert status == 403, f"{path} answered {status} to Host {host!r}: {body[:200]}"
        assert "DNS rebinding" in body and "GPULEDGER_DASHBOARD_TOKEN" in body
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", f"app.localhost:{port}"):
        status, _, body = get(port, "/", host)
        assert status == 200 and "<html" in body.lower(), (host, status, body[:200])
    assert get(port, "/healthz", "evil.example")[0] == 200  # health checks stay open


def test_binding_beyond_loopback_without_a_token_stops_at_once(fresh_nats, fresh_client):
    for settings in ({"GPULEDGER_DASHBOARD_HOST": "0.0.0.0"},
                     {"GPULEDGER_DASHBOARD_HOST": "0.0.0.0", "GPULEDGER_DASHBOARD_TOKEN": "short"}):
        port = free_port()
        process = start(fresh_nats.url, port, **settings)
        try:
            out, _ = process.communicate(timeout=60)  # a guard against a hang
        except subprocess.TimeoutExpired:
            process.kill()
            out = process.communicate()[0]
            pytest.fail(f"the dashboard served {settings} (no login) instead of stopping: {out[-500:]}")
        assert process.returncode == 1 and "GPULEDGER_DASHBOARD_TOKEN" in out, out
        assert "Traceback" not in out, out


def test_with_a_token_every_page_asks_for_it(dashboard):
    port = dashboard(GPULEDGER_DASHBOARD_HOST="0.0.0.0", GPULEDGER_DASHBOARD_TOKEN=TOKEN)
    host = f"gpuledger.example.com:{port}"
    basic = "Basic " + base64.b64encode(f"ops:{TOKEN}".encode()).decode()
    wrong = "Basic " + base64.b64encode(f"ops:{TOKEN[:-1]}x".encode()).decode()
    for path in ("/", "/fragment/overview", "/claim/x", "/live?after=0", "/metrics"):
        for authorization in (None, wrong, f"Bearer {TOKEN}x", "Basic !!!", f"Token {TOKEN}"):
            status, headers, body = get(port, path, host, authorization)
            assert status == 401, f"{path} with {authorization!r} answered {status}: {body[:200]}"
            assert headers["www-authenticate"].startswith("Basic realm=")
    assert get(port, "/", host, basic)[0] == 200  # a browser's login: any user, the token as password
    assert get(port, "/", host, "Basic " + base64.b64encode(f":{TOKEN}".encode()).decode())[0] == 200
    assert get(port, "/claim/x", host, f"Bearer {TOKEN}")[0] == 404  # past the login: no such claim
    assert get(port, "/live?after=0", host, basic)[0] == 200
    status, headers, _ = get(port, "/metrics", host, f"Bearer {TOKEN}")  # Prometheus, curl
    assert status == 200 and "dashboard" in headers["x-merged-from"]
    assert get(port, "/healthz", host)[0] == 200


def test_host_names_and_loopback():
    from shared.httpserve import host_name, is_loopback

    assert [host_name(h) for h in ("127.0.0.1:80", "[::1]:8080", "[::1]", "localhost", "a.b:1")] == \
        ["127.0.0.1", "[::1]", "[::1]", "localhost", "a.b"]
    assert all(map(is_loopback, ("127.0.0.1", "127.5.6.7", "[::1]", "::1", "localhost", "LOCALHOST.", "x.localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "::", "", "10.0.0.1", "localhost.evil.example", "127.0.0.1.nip.io")))


def test_up_checks_the_dashboards_login_before_it_starts_anything(tmp_path):
    """`up` starts the dashboard with its own environment: a bind beyond loopback without a token
    (or a short token) stopped that child at each of its restarts, and `up` with it."""
    from tests.cli import invoke

    for env, words in (({"GPULEDGER_DASHBOARD_HOST": "0.0.0.0"}, "set GPULEDGER_DASHBOARD_TOKEN"),
                       ({"GPULEDGER_DASHBOARD_TOKEN": "short"}, "at least 16 characters")):
        result = invoke("up", "--demo", "--data-dir", str(tmp_path / "data"), env=env)
        assert result.returncode == 1 and words in result.stderr + result.stdout, result
        assert "Traceback" not in result.stderr
        assert not (tmp_path / "data").exists()


def test_a_browser_logged_in_gets_the_pages_and_their_live_updates(dashboard):
    """Headless Chromium with the token as the URL's password: the page, its script's EventSource
    (/live) and fragment fetches go through on the browser's cached login (the badge stays "live";
    a refused stream reads "not live"); without it, nothing of the page. Skipped without chromium."""
    from tests.ops_ux.browser import _run, dom

    port = dashboard(GPULEDGER_DASHBOARD_TOKEN=TOKEN)
    # the DOM once the page's script ran a while: its stream opened, or was refused
    page = _run("--timeout=4000", "--dump-dom", f"http://ops:{TOKEN}@127.0.0.1:{port}/").stdout
    assert 'id="overview"' in page and 'class="live">live<' in page, page[-2000:]
    assert 'id="overview"' not in dom(f"http://127.0.0.1:{port}/")  # the browser's login prompt


async def test_a_services_metrics_on_loopback_answer_loopback_names_only():
    """Each service's own /metrics (127.0.0.1 under `up`, no login): per-namespace quota use and
    claim counts for any page that finds the port under a rebound name, as the dashboard was. In a
    container (bound 0.0.0.0, Prometheus scraping `claim:9464`) any name is answered."""
    import asyncio

    from shared.metrics import Metrics

    async def status_of(port: int, host: str) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 30)
        writer.close()
        return int(head.split(b" ")[1])

    loopback = await Metrics().serve(0, "127.0.0.1")
    anywhere = await Metrics().serve(0, "0.0.0.0")
    try:
        port = loopback.sockets[0].getsockname()[1]
        assert await status_of(port, f"evil.example:{port}") == 403
        assert await status_of(port, f"127.0.0.1:{port}") == 200 and await status_of(port, "localhost") == 200
        assert await status_of(anywhere.sockets[0].getsockname()[1], "claim:9464") == 200
    finally:
        loopback.close()
        anywhere.close()
