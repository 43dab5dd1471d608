"""What the README's quick start showed a new user (session 32): a second `claim release` printed
the claim exactly as the first had, exit 0, with nothing saying it had ended before and that this
call did nothing (the reply's `already`); a repeated `claim submit --id` likewise (`duplicate`).
`gpuledger gpus` said the demo fleet had no A100 ("none") while it holds four, in MIG mode: a card
in MIG mode is offered as its instances, which the table left out. And `claim submit --wait`
exited 0 with the claim rejected (`--pool nosuch`), so `claim submit ... && run-job` ran the job."""

from __future__ import annotations

import json

import msgspec
import nats

from shared.jetstream import JetStreamEventLog
from tests.cli import run_cli
from tests.fleet import a100_mig_node
from tests.service.helpers import register_nodes, running


async def test_a_second_release_and_a_repeated_submit_say_nothing_was_done(fresh_nats):
    url = fresh_nats.url
    async with running(url, "claim"):
        args = ("claim", "submit", "--id", "twice-1", "--namespace", "team-a", "--gpus", "0", "--cpu-milli", "1")
        first = await run_cli(*args, "--nats-url", url)
        assert first.returncode == 0 and "note:" not in first.stdout, first.stdout + first.stderr
        again = await run_cli(*args, "--nats-url", url)
        assert again.returncode == 0, again.stderr
        assert "note: a claim with this id and content was submitted before" in again.stdout, again.stdout
        released = await run_cli("claim", "release", "twice-1", "--nats-url", url)
        assert released.returncode == 0 and "note:" not in released.stdout, released.stdout
        second = await run_cli("claim", "release", "twice-1", "--nats-url", url)
        assert second.returncode == 0, second.stderr
        assert "note: it had already ended (released): nothing was done" in second.stdout, second.stdout


def _mig_only(node):
    """The fleet's A100 node with every card in MIG mode (as `up --demo` runs it)."""
    devices = [d for d in node.devices if d.mig_enabled or d.mig_index >= 0]
    return msgspec.structs.replace(node, devices=devices)


async def test_gpus_shows_mig_instances_of_cards_in_mig_mode(fresh_nats):
    url = fresh_nats.url
    async with running(url, "claim"):
        nc = await nats.connect(url)
        try:
            await register_nodes(JetStreamEventLog(nc), _mig_only(a100_mig_node("mig-a")))
        finally:
            await nc.close()
        for _ in range(50):
            out = await run_cli("gpus", "--json", "--nats-url", url)
            a100 = next(r for r in json.loads(out.stdout)["types"] if r["model"] == "A100")
            if a100["fleet"].get("mig_instances"):
                break
        assert a100["fleet"] == {"free": 0, "cards": 0, "max_per_node": 0, "mig_free": 11, "mig_instances": 11}, a100
        table = await run_cli("gpus", "--nats-url", url)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if " A100 " in line)
    assert "MIG 11 / 11" in row and "none" not in row, table.stdout



async def test_a_rejected_submit_exits_1(fresh_nats):
    url = fresh_nats.url
    async with running(url, "claim", "allocator"):
        done = await run_cli("claim", "submit", "-n", "team-a", "--pool", "nosuch", "--wait", "10", "--nats-url", url)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "rejected" in done.stdout and "pool nosuch does not exist" in done.stdout, done.stdout
        ok = await run_cli("claim", "submit", "-n", "team-a", "--gpus", "0", "--cpu-milli", "1", "--nats-url", url)
        assert ok.returncode == 0, ok.stdout + ok.stderr
