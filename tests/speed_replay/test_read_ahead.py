"""A long stored range is read by a helper process while the caller folds (shared.readahead): the
rows are exactly what the caller's own range read gives, the state a follower folds from them is
the same, a helper that fails leaves the rest to nats-py from the last row it delivered, and a
read stopped early leaves no helper behind."""

from __future__ import annotations

import asyncio
import os

import pytest

import shared.readahead as readahead
from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from ledger.digest import compact_digest
from ledger.follower import Follower
from tests.service.helpers import h100_node

EVENTS = 900  # with READ_AHEAD_MIN and HEAD made small below: a head, then the helper's rows
HEAD = 128


@pytest.fixture
def small_read_ahead(monkeypatch):
    monkeypatch.setattr(readahead, "READ_AHEAD_MIN", 300)
    monkeypatch.setattr(readahead, "HEAD", HEAD)


async def _log_of(url: str, subject_nodes: int = 3):
    nc = await connect(url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    for n in range(subject_nodes):
        await log.append(subjects.node(f"n{n}"), h100_node(f"n{n}"), msg_id=f"register-n{n}")
    await asyncio.gather(*(log.append(subjects.node(f"n{i % subject_nodes}"),
                                      ev.NodeHeartbeat(node=f"n{i % subject_nodes}", at=float(i)))
                           for i in range(1, EVENTS + 1)))
    return nc, log


async def _rows(log, headers: bool, **kwargs) -> list:
    end = await log.last_seq()
    rows = []
    async for batch in log.follow_raw(1, stop_at=end, headers=headers, **kwargs):
        rows += batch
    return rows


def _helpers_started(monkeypatch) -> list:
    started, spawn = [], readahead.ReadAhead._start_helper

    async def counted(self, rest):
        pipe = await spawn(self, rest)
        started.append(self.helper)
        return pipe

    monkeypatch.setattr(readahead.ReadAhead, "_start_helper", counted)
    return started


async def test_the_helper_reads_the_same_rows_as_the_range_read(fresh_nats, small_read_ahead, monkeypatch):
    started = _helpers_started(monkeypatch)
    nc, log = await _log_of(fresh_nats.url)
    try:
        ahead = await _rows(log, headers=False)
        assert len(started) == 1 and started[0].returncode == 0  # read by a helper, which ended
        monkeypatch.setattr(readahead, "READ_AHEAD_MIN", 10 ** 9)
        own = await _rows(log, headers=False)
        assert len(started) == 1  # the second read was the caller's own
        assert [row[0] for row in ahead] == list(range(1, EVENTS + 4))
        assert ahead == own
        filtered = subjects.node("n1")
        monkeypatch.setattr(readahead, "READ_AHEAD_MIN", 100)
        by_subject = await _rows(log, headers=False, subject=filtered)
        assert len(started) == 2
        assert by_subject == [row for row in own if row[1] == filtered]
    finally:
        await nc.close()


async def test_a_follower_folds_the_same_state_through_the_helper(fresh_nats, small_read_ahead, monkeypatch):
    started = _helpers_started(monkeypatch)
    nc, log = await _log_of(fresh_nats.url)
    try:
        states = []
        for minimum in (300, 10 ** 9):
            monkeypatch.setattr(readahead, "READ_AHEAD_MIN", minimum)
            follower = Follower(log, keep_ended=False)
            task = asyncio.create_task(follower.run())
            await asyncio.wait_for(follower.caught_up.wait(), 30)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            states.append(follower.state)
        assert len(started) == 1
        assert states[0].last_seq == states[1].last_seq == EVENTS + 3
        assert compact_digest(states[0]) == compact_digest(states[1])
    finally:
        await nc.close()


async def test_a_failing_helper_leaves_the_rest_to_nats_py(fresh_nats, small_read_ahead, monkeypatch):
    """The helper is told a consumer that does not exist: it reports the failure, and the rows
    after the head come through nats-py's consumer instead, none lost or repeated."""
    nc, log = await _log_of(fresh_nats.url)
    spawn = readahead.ReadAhead._start_helper

    async def broken(self, rest):
        rest.consumer = "no-such-consumer"
        return await spawn(self, rest)

    monkeypatch.setattr(readahead.ReadAhead, "_start_helper", broken)
    try:
        rows = await asyncio.wait_for(_rows(log, headers=False), 60)
        assert [row[0] for row in rows] == list(range(1, EVENTS + 4))
    finally:
        await nc.close()


async def test_a_read_stopped_early_leaves_no_helper_running(fresh_nats, small_read_ahead, monkeypatch):
    started = _helpers_started(monkeypatch)
    nc, log = await _log_of(fresh_nats.url)
    try:
        end = await log.last_seq()
        reader = log.follow_raw(1, stop_at=end, headers=False)
        first = await reader.__anext__()
        assert first[0][0] == 1
        await reader.aclose()
        assert len(started) == 1 and started[0].returncode is not None
        with pytest.raises(ProcessLookupError):
            os.kill(started[0].pid, 0)
    finally:
        await nc.close()


async def test_the_caller_takes_at_most_ahead_bytes_out_of_the_pipe_ahead_of_its_fold(monkeypatch):
    """A helper faster than the fold: the caller's buffer stays near AHEAD_BYTES (it held the whole
    range once, 275 MB of a 1M-event log), and every frame still arrives whole and in order."""
    monkeypatch.setattr(readahead, "AHEAD_BYTES", 32 * 1024)
    monkeypatch.setattr(readahead, "_READ", 16 * 1024)
    frames, size = 200, 10 * 1024
    read_fd, write_fd = os.pipe()

    def write_all():
        for i in range(frames):
            readahead._write(write_fd, readahead.BATCH, bytes([i % 256]) * size)
        readahead._write(write_fd, readahead.END, b"")
        os.close(write_fd)

    os.set_blocking(read_fd, False)
    pipe, unread, got = readahead._Pipe(read_fd), [], []
    writer = asyncio.get_running_loop().run_in_executor(None, write_all)
    try:
        while True:
            kind, body = await pipe.frame()
            unread.append(len(pipe.buf) - pipe.pos)
            if kind == readahead.END:
                break
            got.append(bytes(body[:1]) * len(body))
            await asyncio.sleep(0.001)  # the fold of a batch: the writer fills the pipe meanwhile
    finally:
        pipe.close()
        await writer
    assert got == [bytes([i % 256]) * size for i in range(frames)]
    assert max(unread) <= 32 * 1024 + 16 * 1024 + size


async def test_rows_the_helper_admitted_skip_the_check_and_the_rest_are_checked_and_counted(monkeypatch):
    """A batch whose rows the helper marked admitted: the follower asks the authority table only
    about the unmarked ones, refuses and counts the forged one among them, and folds the same
    state as from the plain batch."""
    from bench.replay import StoredBatches
    from schemas import authority
    from schemas.events import encode_event

    rows = [(1, subjects.node("n0"), encode_event(h100_node("n0")), {})]
    rows += [(1 + i, subjects.node("n0"), encode_event(ev.NodeHeartbeat(node="n0", at=float(i))), {})
             for i in range(1, 6)]
    rows.append((7, subjects.node("n0"), encode_event(ev.NodeHeartbeat(node="n1", at=9.0)), {}))  # forged
    marks = bytes([1] * 6 + [0])
    asked = []
    counted = {kind: (lambda check: lambda subject, event: asked.append(subject) or check(subject, event))(check)
               for kind, check in authority.ADMIT.items()}
    states = []
    for batch in (readahead.AdmittedRows(rows, marks), list(rows)):
        monkeypatch.setattr(authority, "ADMIT", counted)
        asked.clear()
        follower = Follower(StoredBatches([batch]), keep_ended=False)
        task = asyncio.create_task(follower.run())
        await asyncio.wait_for(follower.caught_up.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        states.append((follower, len(asked)))
    (marked, asked_marked), (plain, asked_plain) = states
    assert asked_plain - asked_marked == 6 and asked_marked  # the six marked rows were not asked about
    assert marked.admission.refused == plain.admission.refused == 1
    assert marked.state.nodes["n0"].last_heartbeat == plain.state.nodes["n0"].last_heartbeat == 5.0
    assert compact_digest(marked.state) == compact_digest(plain.state)


async def test_the_helper_marks_what_it_admits_and_the_fold_counts_what_it_does_not(fresh_nats, small_read_ahead,
                                                                                   monkeypatch):
    nc, log = await _log_of(fresh_nats.url)
    try:
        forged = await log.append(subjects.node("n0"), ev.NodeHeartbeat(node="n1", at=1e6))
        end = await log.last_seq()
        batches = [batch async for batch in log.follow_raw(1, stop_at=end, headers=False)]
        marked = [batch for batch in batches if isinstance(batch, readahead.AdmittedRows)]
        assert marked and all(len(batch.admitted) == len(batch) for batch in marked)
        flags = {row[0]: flag for batch in marked for row, flag in zip(batch, batch.admitted)}
        assert flags[forged.seq] == 0 and sum(flags.values()) == len(flags) - 1
        counts = []
        for minimum in (300, 10 ** 9):
            monkeypatch.setattr(readahead, "READ_AHEAD_MIN", minimum)
            follower = Follower(log, keep_ended=False)
            task = asyncio.create_task(follower.run())
            await asyncio.wait_for(follower.caught_up.wait(), 30)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            counts.append((follower.admission.refused, compact_digest(follower.state)))
        assert counts[0] == counts[1] and counts[0][0] == 1
    finally:
        await nc.close()
