"""`python -m bench.replay_offline`: bench replay's log written once to a file as stored batches,
then the allocator's catch-up run over it in process, each run's rebuilt state checked against the
live fold's digest (and a wrong digest reported as such, with a failing exit status)."""

import json
import pickle

import pytest

from bench import replay_offline

EVENTS = 3000


@pytest.fixture(scope="module")
def log_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("offline") / "log.pkl"
    assert replay_offline.main(["write", "--events", str(EVENTS), "--nodes", "50", "--out", str(path)]) == 0
    return path


def lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_write_keeps_the_stored_batches_and_the_live_folds_digest(log_file, capsys):
    log = pickle.loads(log_file.read_bytes())
    assert log["events"] >= EVENTS and log["nodes"] == 50
    rows = [row for batch in log["batches"] for row in batch]
    assert len(rows) == log["messages"] and all(len(batch) <= replay_offline.BATCH for batch in log["batches"])
    assert [row[0] for row in rows] == list(range(1, len(rows) + 1))  # sequences as stored
    seq, subject, payload, headers = rows[0]
    assert subject.startswith("gpu.evt.") and payload.startswith(b"{") and headers == {}


def test_each_catch_up_rebuilds_the_live_folds_state(log_file, capsys):
    assert replay_offline.main(["catch-up", str(log_file), "--runs", "2"]) == 0
    runs = lines(capsys)
    assert len(runs) == 2
    assert all(run["digest_checked"] and run["events"] >= EVENTS and run["cpu_s"] > 0 for run in runs)


def test_a_state_that_differs_from_the_live_fold_is_reported(log_file, tmp_path, capsys):
    log = pickle.loads(log_file.read_bytes())
    log["batches"][-1] = log["batches"][-1][:-1]  # the last message lost: another state
    broken = tmp_path / "broken.pkl"
    broken.write_bytes(pickle.dumps(log))
    assert replay_offline.main(["catch-up", str(broken)]) == 1
    (run,) = lines(capsys)
    assert run["digest_checked"] is False


def test_bad_arguments_are_refused_with_the_option_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        replay_offline.main(["write", "--events", "0", "--out", str(tmp_path / "x.pkl")])
    assert "--events" in capsys.readouterr().err


def test_a_log_without_its_counts_is_caught_up_and_counted(log_file, tmp_path, capsys):
    log = pickle.loads(log_file.read_bytes())
    older = tmp_path / "older.pkl"  # as the first pickles of session 27: batches and digest only
    older.write_bytes(pickle.dumps({"batches": log["batches"], "digest": log["digest"]}))
    assert replay_offline.main(["catch-up", str(older)]) == 0
    (run,) = lines(capsys)
    assert run["digest_checked"] and run["messages"] == log["messages"]


def test_a_file_that_is_no_written_log_is_refused(tmp_path, capsys):
    other = tmp_path / "other.pkl"
    other.write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(SystemExit):
        replay_offline.main(["catch-up", str(other)])
    assert "not a log written by `write`" in capsys.readouterr().err


@pytest.mark.parametrize("frames", ["rows", "decoded", "decoded-all"])
def test_a_catch_up_over_the_read_ahead_helpers_frames_rebuilds_the_same_state(log_file, capsys, frames):
    assert replay_offline.main(["catch-up", str(log_file), "--frames", frames]) == 0
    (run,) = lines(capsys)
    assert run["digest_checked"] and run["frames"] == frames


async def test_rebuild_stores_the_log_and_checks_each_trees_rebuild(log_file, tmp_path, capsys):
    """The full rebuild (`bench.replay_child`, read-ahead helper and all) from this tree, twice,
    over the log stored once in an embedded nats-server."""
    import asyncio

    done = await asyncio.get_running_loop().run_in_executor(
        None, replay_offline.main, ["rebuild", str(log_file), "--runs", "2"])
    assert done == 0
    stored, *runs = lines(capsys)
    log = pickle.loads(log_file.read_bytes())
    assert stored["stored_messages"] == stored["last_seq"] == log["messages"]
    assert len(runs) == 2 and all(run["digest_checked"] and run["seconds"] > 0 for run in runs)
    assert all(run["nats_server_cpu_s"] >= 0 for run in runs)  # what it spent serving each read
