"""The pool-controller service against a real nats-server: commands, fencing, webhook, CLI."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.commands import CreatePool, DeletePool, GetPool, ListPools, UpdatePool
from schemas.types import PoolSpec
from services.pool_controller.admission import AdmissionConfig
from services.pool_controller.app import PoolController, build
from services.pool_controller.validation import ClusterFacts
from services.pool_controller.webhook import start_webhook, tls_context
from shared import rpc
from shared.jetstream import JetStreamEventLog, connect
from shared.service import start_service, stop_service
from shared.settings import Settings

from tests.pool_controller.fixtures import allocation, node_registered
from tests.pool_controller.test_admission import admission_review, pod
from tests.cli import run_cli


@pytest.fixture
async def service(fresh_nats):
    built = {}

    async def builder(ctx):
        built["controller"] = await build(ctx)

    ctx = await start_service("pool-controller", Settings(nats_url=fresh_nats.url), builder)
    ctx.controller = built["controller"]
    yield ctx
    await stop_service(ctx)


async def call(ctx, subject, command):
    return await rpc.call(ctx.nc, subject, command)


async def test_a_pool_is_created_listed_updated_and_deleted(service):
    await service.log.append(subjects.node("n1"), node_registered("n1", cards=2))
    created = await call(service, subjects.command("pool.create"), CreatePool(pool=PoolSpec(name="a100")))
    assert created.ok and created.data == {"pool": "a100", "created": True}

    got = await call(service, subjects.query("pool.get"), GetPool(name="a100"))
    assert got.ok and got.data["nodes"] == ["n1"] and len(got.data["devices"]) == 2
    listed = await call(service, subjects.query("pool.list"), ListPools())
    assert [p["name"] for p in listed.data] == ["a100"]

    wanted = PoolSpec(name="a100", access_namespaces=["team-a"], access_groups=["ml"])
    updated = await call(service, subjects.command("pool.update"), UpdatePool(pool=wanted))
    assert updated.ok and updated.data["changed"] is True
    assert service.controller.state.pools["a100"] == wanted

    deleted = await call(service, subjects.command("pool.delete"), DeletePool(name="a100"))
    assert deleted.ok
    gone = await call(service, subjects.query("pool.get"), GetPool(name="a100"))
    assert gone.error.code == "not-found"
    stored = [s.event async for s in service.log.read(subject=subjects.pool("a100"))]
    assert [type(e).__name__ for e in stored] == ["PoolCreated", "PoolAccessChanged", "PoolDeleted"]


async def test_bad_input_gets_an_error_naming_the_field(service):
    bad = await call(service, subjects.command("pool.create"),
                     CreatePool(pool=PoolSpec(name="x", backend="dra", slices_per_unit=4)))
    assert bad.error.code == "invalid" and bad.error.field == "pool.backend"
    assert "slices_per_unit" in bad.error.message
    raw = await service.nc.request(subjects.command("pool.create"),
                                   b'{"pool": {"name": "x", "slices_per_unit": 0}}', timeout=5)
    reply = json.loads(raw.data)
    assert reply["ok"] is False and reply["error"]["field"] == "pool.slices_per_unit"
    junk = json.loads((await service.nc.request(subjects.command("pool.delete"), b"{", timeout=5)).data)
    assert junk["error"]["code"] == "invalid"
    immutable = await call(service, subjects.command("pool.create"), CreatePool(pool=PoolSpec(name="y")))
    assert immutable.ok
    refused = await call(service, subjects.command("pool.update"),
                         UpdatePool(pool=PoolSpec(name="y", unit="MIG")))
    assert refused.error.field == "pool.unit" and "immutable" in refused.error.message


async def test_a_pool_with_allocations_is_not_deleted(service):
    log = service.log
    await log.append(subjects.node("n1"), node_registered("n1"))
    await call(service, subjects.command("pool.create"), CreatePool(pool=PoolSpec(name="busy")))
    submitted, decided = allocation("job-1", "n1", 0)
    await log.append(subjects.claim("job-1"), submitted)
    await log.append(subjects.DECISIONS, decided)
    refused = await call(service, subjects.command("pool.delete"), DeletePool(name="busy"))
    assert refused.error.code == "conflict" and "job-1" in refused.error.message
    await log.append(subjects.claim("job-1"), ev.ClaimReleased(claim_id="job-1"))
    assert (await call(service, subjects.command("pool.delete"), DeletePool(name="busy"))).ok


async def test_two_controllers_racing_to_create_one_pool_cannot_both_win(fresh_nats):
    nc = await connect(fresh_nats.url)
    from shared.jetstream import ensure_streams
    await ensure_streams(nc.jetstream())
    controllers = [PoolController(JetStreamEventLog(nc), ClusterFacts(), AdmissionConfig())
                   for _ in range(2)]
    folds = [asyncio.create_task(c.run_fold()) for c in controllers]
    try:
        specs = [PoolSpec(name="contested", slices_per_unit=n) for n in (1, 2)]
        replies = await asyncio.gather(*(c.create(CreatePool(pool=s)) for c, s in zip(controllers, specs)))
        assert sorted(r.ok for r in replies) == [False, True]
        loser = next(r for r in replies if not r.ok)
        assert loser.error.code == "conflict"
        stored = [s.event async for s in controllers[0].log.read(subject=subjects.pool("contested"))]
        assert len(stored) == 1 and isinstance(stored[0], ev.PoolCreated)
        winner = specs[[r.ok for r in replies].index(True)]
        await controllers[1].catch_up()
        assert all(c.state.pools["contested"] == winner for c in controllers)
    finally:
        for task in folds:
            task.cancel()
        await nc.close()


async def _post(port: int, path: str, body: dict, tls: ssl.SSLContext | None = None) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    data = json.dumps(body).encode()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(payload)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "tls.crt", folder / "tls.key"
    done = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                           "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"openssl could not make a test certificate: {done.stderr[-200:]!r}")
    return str(cert), str(key)


async def test_the_webhook_mutates_and_validates_over_https(service, certificate):
    await service.log.append(subjects.node("n1"), node_registered("n1"))
    await call(service, subjects.command("pool.create"), CreatePool(pool=PoolSpec(name="a100")))
    server = await start_webhook(service.controller.admit, "127.0.0.1", 0, tls_context(*certificate))
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cafile=certificate[0])
    client.check_hostname = False
    try:
        status, body = await _post(port, "/mutate", admission_review(pod("gpu.gpuledger.io/a100")), client)
        assert status == 200 and body["response"]["allowed"] is True and body["response"]["patch"]
        status, body = await _post(port, "/validate", admission_review(pod("gpu.gpuledger.io/zz")), client)
        assert body["response"]["allowed"] is False and "zz does not exist" in body["response"]["status"]["message"]
        status, _ = await _post(port, "/elsewhere", {}, client)
        assert status == 404
    finally:
        server.close()
        await server.wait_closed()


async def _cli(url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return await run_cli(*args, "--nats-url", url, stdin=stdin)


async def test_the_cli_creates_a_pool_from_a_manifest_and_reports_errors(service, fresh_nats, tmp_path):
    manifest = {"apiVersion": "gpu.gpuledger.io/v1alpha1", "kind": "GPUPool",
                "metadata": {"name": "l4"},
                "spec": {"backend": "device-plugin", "allocation": {"mode": "Card", "slicesPerUnit": 4},
                         "scheduling": {"strategy": "Spread"},
                         "deviceSelector": {"include": {"products": ["L4"]}},
                         "access": {"namespaces": ["team-a"]}}}
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(manifest))
    created = await _cli(fresh_nats.url, "pool", "create", "-f", str(path))
    assert created.returncode == 0, created.stderr
    assert "pool l4 created" in created.stdout
    got = await _cli(fresh_nats.url, "pool", "get", "l4", "--json")
    assert json.loads(got.stdout)["spec"]["slices_per_unit"] == 4
    listed = await _cli(fresh_nats.url, "pool", "list")
    assert "l4" in listed.stdout and "Spread" in listed.stdout
    manifest["spec"]["allocation"]["slicesPerUnit"] = 2
    path.write_text(json.dumps(manifest))
    refused = await _cli(fresh_nats.url, "pool", "update", "-f", str(path))
    assert refused.returncode == 1 and "immutable" in refused.stderr and "slices_per_unit" in refused.stderr
    typo = await _cli(fresh_nats.url, "pool", "create", "-f", "-",
                      stdin=json.dumps({"kind": "GPUPool", "metadata": {"name": "x"},
                                        "spec": {"alocation": {}}}))
    assert typo.returncode == 1 and "spec.alocation" in typo.stderr
    missing = await _cli(fresh_nats.url, "pool", "delete", "nope")
    assert missing.returncode == 1 and "not-found" in missing.stderr


class RacedLog:
    """The real log, but a competitor's append lands just before our first append."""

    def __init__(self, log, subject, competitor):
        self._log, self._subject, self._competitor = log, subject, competitor

    def __getattr__(self, name):
        return getattr(self._log, name)

    async def append(self, subject, event, **kwargs):
        if self._competitor is not None:
            competitor, self._competitor = self._competitor, None
            await self._log.append(self._subject, competitor)
        return await self._log.append(subject, event, **kwargs)


async def test_an_append_on_a_stale_view_is_fenced_off_and_decided_again(fresh_nats):
    nc = await connect(fresh_nats.url)
    from shared.jetstream import ensure_streams
    await ensure_streams(nc.jetstream())
    theirs = PoolSpec(name="raced", slices_per_unit=3)
    log = RacedLog(JetStreamEventLog(nc), subjects.pool("raced"), ev.PoolCreated(pool=theirs))
    controller = PoolController(log, ClusterFacts(), AdmissionConfig())
    fold = asyncio.create_task(controller.run_fold())
    try:
        reply = await controller.create(CreatePool(pool=PoolSpec(name="raced")))
        assert reply.error.code == "conflict" and "already exists" in reply.error.message
        stored = [s.event async for s in log.read(subject=subjects.pool("raced"))]
        assert stored == [ev.PoolCreated(pool=theirs)]
        assert controller.state.pools["raced"] == theirs
    finally:
        fold.cancel()
        await nc.close()
