"""The CLI as a new user meets it (session 27): a NATS server that is not gpuledger's, a URL typed
wrong, a data folder named in GPULEDGER_DATA_DIR. Each gets one line naming the problem, never a
traceback.

- `events replay|tail`, `state at` and `whatif` against a NATS server where no gpuledger ever ran
  (a fresh `nats-server -js`, or another team's) ended in nats-py's `NotFoundError: stream not
  found` traceback; the request commands said "no responders" in one line already.
- A URL with a port past 65535 or a broken IPv6 host (`nats://[::1`) ended in urllib's
  `ValueError` traceback for every request command (`claim list`, `status`).
- `gpuledger up`, `nats config|creds|nkey` took their folder from `--data-dir` only, default
  `.gpuledger`, while the other commands and every service read GPULEDGER_DATA_DIR (README:
  "embedded NATS data, SQLite read models, logs"): with the variable set, `up` ran in
  ./.gpuledger and `claim submit` then looked for its URL in the variable's folder, found none,
  and said it could not reach NATS at 127.0.0.1:4222.
"""

from __future__ import annotations

import json

import pytest

from tests.cli import invoke


@pytest.mark.parametrize("args", [
    ("events", "replay"),
    ("events", "tail", "--last", "1"),
    ("state", "at", "--seq", "1"),
    ("whatif", "--policy", "binpack"),
], ids=" ".join)
def test_reading_the_log_of_a_server_gpuledger_never_ran_on_says_so_in_one_line(fresh_nats, args):
    done = invoke(*args, "--nats-url", fresh_nats.url)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "no GPULEDGER stream" in lines[0] and "gpuledger up" in lines[0], lines[0]


@pytest.mark.parametrize("url,problem", [
    ("nats://127.0.0.1:99999", "Port out of range"),
    ("nats://[::1", "Invalid IPv6 URL"),
])
@pytest.mark.parametrize("args", [
    ("claim", "list"), ("status",), ("claim", "get", "abc"), ("events", "replay"), ("gpus",),
], ids=" ".join)
def test_a_malformed_nats_url_is_named_in_one_line(url, problem, args):
    done = invoke(*args, "--nats-url", url)
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and problem in lines[0], done.stderr


def data_dir_options():
    from tests.ops_ux.test_cli_lazy import all_commands

    for path, command in all_commands():
        for param in command.params:
            if "--data-dir" in getattr(param, "opts", ()) and not path.startswith("bench"):
                # bench runs a stack of its own in a new folder unless told one: never the user's
                yield path, param


@pytest.mark.parametrize("path,param", list(data_dir_options()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_data_dir_option_reads_GPULEDGER_DATA_DIR(path, param):
    assert param.envvar == "GPULEDGER_DATA_DIR", f"gpuledger {path} --data-dir: envvar='GPULEDGER_DATA_DIR'"


def test_nats_creds_finds_the_users_in_GPULEDGER_DATA_DIR(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "stack"
    folder.mkdir()
    (folder / "nats-users.json").write_text(json.dumps({"ops": "s3cret"}))
    (folder / "ports.json").write_text(json.dumps({"nats": 24999}))
    done = invoke("nats", "creds", "ops", env={"GPULEDGER_DATA_DIR": str(folder)})
    assert done.returncode == 0, done
    assert done.stdout.strip() == "nats://ops:s3cret@127.0.0.1:24999"
    assert not (tmp_path / ".gpuledger").exists()


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_up_in_a_data_folder_it_cannot_make_says_so_in_one_line(tmp_path, kind):
    afile = tmp_path / "afile"
    afile.write_text("")
    folder = afile if kind == "a file" else afile / "data"
    done = invoke("up", "--data-dir", str(folder), "--no-auth")
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(folder) in lines[0] and "--data-dir" in lines[0], done.stderr


def test_up_on_a_nats_url_nobody_answers_says_so_in_one_line(tmp_path):
    # nats-py retried for about two minutes, printing a traceback for each attempt, whatever
    # --ready-timeout said
    done = invoke("up", "--nats-url", "nats://127.0.0.1:1", "--data-dir", str(tmp_path / "data"),
                  "--no-dashboard", "--ready-timeout", "5")
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr and "encountered error" not in done.stderr, done.stderr
    assert [line for line in done.stderr.splitlines() if "cannot reach NATS at nats://127.0.0.1:1" in line], done.stderr


def test_no_command_prints_the_password_in_its_url(fresh_nats):
    # `simulate --live` and `node fault|process` printed the URL as given, the ops password in it
    # (every other command writes nats://ops:***@...)
    port = fresh_nats.url.rsplit(":", 1)[1]
    for args in (("simulate", "--live", "--limit", "1", "--nats-url", "nats://ops:s3cret@127.0.0.1:1"),
                 ("simulate", "--live", "--limit", "1", "--nats-url", f"nats://ops:s3cret@127.0.0.1:{port}"),
                 ("node", "fault", "gpu-1", "0", "--nats-url", f"nats://ops:s3cret@127.0.0.1:{port}")):
        done = invoke(*args)
        assert done.returncode != 0, done
        assert "s3cret" not in done.stdout + done.stderr, (args, done.stderr)
        assert "ops:***@" in done.stderr, (args, done.stderr)
