"""The projector and the time-travel commands against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from typer.testing import CliRunner

from gpuledger_cli.main import app
from ledger.evolve import fold
from services.projector import runner
from services.projector.db import make_engine, migrate
from services.projector.projector import Projector
from services.projector.summary import state_summary
from tests.readmodel.logs import append_all, open_log
from tests.readmodel.scenario import scenario
from tests.readmodel.tables import dump

EVENTS = scenario()


def projected(tmp_path, events, name: str):
    """The tables a projector writes for `events`, projected without any log."""
    engine = make_engine(f"sqlite:///{tmp_path / name}")
    migrate(engine)
    Projector(engine).project(list(enumerate(events, 1)), batch=100)
    return dump(engine)


async def wait_for_position(projector: Projector, seq: int, task: asyncio.Task, limit_s: float = 60):
    deadline = time.monotonic() + limit_s
    while projector.stored_position() < seq:
        if task.done():
            task.result()  # surfaces the projector's failure
        assert time.monotonic() < deadline, f"projector stuck at {projector.stored_position()} < {seq}"
        await asyncio.sleep(0.05)


async def test_the_projector_follows_appended_events(fresh_nats, engine, tmp_path):
    log = await open_log(fresh_nats.url)
    half = len(EVENTS) // 2
    await append_all(log, EVENTS[:half])
    projector = Projector(engine)
    task = asyncio.create_task(runner.run(projector, log, max_batch=40))
    try:
        await wait_for_position(projector, half, task)
        last = await append_all(log, EVENTS[half:])  # the live tail
        await wait_for_position(projector, last, task)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await log.nc.close()
    assert dump(engine) == projected(tmp_path, EVENTS, "direct.db")


async def test_a_restarted_projector_resumes_where_it_stopped(fresh_nats, engine, tmp_path):
    log = await open_log(fresh_nats.url)
    last = await append_all(log, EVENTS[:120])
    first = Projector(engine)
    task = asyncio.create_task(runner.run(first, log, max_batch=25))
    await wait_for_position(first, last, task)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    last = await append_all(log, EVENTS[120:])  # appended while no projector runs
    second = Projector(engine)
    task = asyncio.create_task(runner.run(second, log, max_batch=25))
    try:
        await wait_for_position(second, last, task)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await log.nc.close()
    assert dump(engine) == projected(tmp_path, EVENTS, "direct.db")


@pytest.fixture
def filled_log(fresh_nats):
    """A fresh stream holding the scenario; also the store time between its two halves."""
    async def fill():
        log = await open_log(fresh_nats.url)
        await append_all(log, EVENTS[:100])
        await asyncio.sleep(0.05)
        middle = time.time()
        await asyncio.sleep(0.05)
        await append_all(log, EVENTS[100:])
        await log.nc.close()
        return middle

    middle = asyncio.run(fill())
    return fresh_nats.url, middle


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("n", [1, 37, 100, len(EVENTS)])
def test_state_at_a_sequence_is_the_fold_of_the_first_n_events(filled_log, n):
    url, _ = filled_log
    shown = json.loads(cli("state", "at", "--seq", str(n), "--json", "--nats-url", url))
    expected = state_summary(fold(enumerate(EVENTS[:n], 1)))
    expected.update(seq=n, stream_last_seq=len(EVENTS))
    assert shown == json.loads(json.dumps(expected))


def test_state_at_a_time_is_what_the_log_held_then(filled_log):
    url, middle = filled_log
    shown = json.loads(cli("state", "at", "--time", str(middle), "--json", "--nats-url", url))
    assert shown["seq"] == 100
    assert shown["claims"] == state_summary(fold(enumerate(EVENTS[:100], 1)))["claims"]


def test_rebuild_until_a_sequence_equals_projecting_that_prefix(filled_log, tmp_path):
    url, _ = filled_log
    target = f"sqlite:///{tmp_path / 'at-80.db'}"
    report = json.loads(cli("projection", "rebuild", "--db", target, "--until-seq", "80",
                            "--batch", "7", "--json", "--nats-url", url))
    assert (report["events"], report["position"]) == (80, 80)
    assert dump(make_engine(target)) == projected(tmp_path, EVENTS[:80], "direct-80.db")


def test_rebuild_until_a_time_and_status(filled_log, tmp_path, monkeypatch):
    url, middle = filled_log
    target = f"sqlite:///{tmp_path / 'at-time.db'}"
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle)) + f".{int(middle % 1 * 1e6):06d}Z"
    report = json.loads(cli("projection", "rebuild", "--db", target, "--until-time", iso, "--json",
                            "--nats-url", url))
    assert report["position"] == 100
    monkeypatch.setenv("GPULEDGER_DB_URL", target)
    status = json.loads(cli("projection", "status", "--json", "--nats-url", url))
    assert (status["position"], status["stream_last_seq"], status["behind"]) == (100, len(EVENTS),
                                                                                len(EVENTS) - 100)


def test_bad_points_in_time_are_refused_with_the_option_named(filled_log):
    url, _ = filled_log
    result = CliRunner().invoke(app, ["state", "at", "--seq", "100000", "--nats-url", url])
    assert result.exit_code == 1 and "--seq 100000 is past the end of the log" in result.output
    result = CliRunner().invoke(app, ["projection", "rebuild", "--until-time", "noon", "--nats-url", url])
    assert result.exit_code == 1 and "--until-time" in result.output
