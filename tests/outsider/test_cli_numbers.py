"""Every number the CLI takes is checked where it is typed: `events replay --from-seq -5` used
to start silently at 1, `events tail --last -3` to wait past the log's end, `claim submit --wait
-1` to ask the service for a negative wait. Each numeric option and argument has a lower bound
(and an upper one where the contract has it), so a wrong value gets click's usage error naming the
option and the range, before anything is sent."""

from __future__ import annotations

import click
import pytest

from tests.cli import invoke
from tests.ops_ux.test_cli_lazy import all_commands

ANY_VALUE = {("bench decide", "seed"), ("simulate", "variant_seed")}  # a seed: every integer is one


def numeric_params():
    for path, command in all_commands():
        for param in command.params:
            if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)):
                yield path, param


@pytest.mark.parametrize("path,param", list(numeric_params()), ids=lambda v: v if isinstance(v, str) else v.name)
def test_every_numeric_option_has_a_lower_bound(path, param):
    if (path, param.name) in ANY_VALUE:
        return
    assert isinstance(param.type, (click.IntRange, click.FloatRange)) and param.type.min is not None, (
        f"gpuledger {path} {param.opts[0]}: give it min= (and max= where the contract has one)")


@pytest.mark.parametrize("args,option,shown", [
    (["events", "replay", "--from-seq", "-5"], "--from-seq", "-5 is not in the range x>=1"),
    (["events", "replay", "--from-seq", "0"], "--from-seq", "0 is not in the range x>=1"),
    (["events", "replay", "--until-seq", "-1"], "--until-seq", "x>=1"),
    (["events", "tail", "--last", "-3"], "--last", "-3 is not in the range x>=0"),
    (["state", "at", "--seq", "-2"], "--seq", "x>=1"),
    (["claim", "submit", "-n", "team-a", "--wait", "-1"], "--wait", "x>=0"),
    (["claim", "submit", "-n", "team-a", "--gpu-milli", "1001"], "--gpu-milli", "1<=x<=1000"),
    (["claim", "submit", "-n", "team-a", "--priority", "5000"], "--priority", "-1000<=x<=1000"),
    (["nats", "config", "--port", "70000"], "--port", "1<=x<=65535"),
])
def test_a_wrong_number_is_refused_naming_the_option_and_the_range(args, option, shown):
    done = invoke(*args, "--nats-url", "nats://127.0.0.1:9") if args[0] in ("events", "claim", "state") \
        else invoke(*args)
    assert done.returncode == 2, done
    assert f"Invalid value for '{option}'" in done.stderr and shown in done.stderr, done.stderr
    assert "env var: 'None'" not in done.stderr  # typer + click 8.2 said so for every option


def test_a_range_that_was_there_before_no_longer_ends_in_a_missing_env_var():
    done = invoke("claim", "list", "--limit", "0")
    assert done.returncode == 2 and "Invalid value for '--limit': 0 is not in the range x>=1" in done.stderr


@pytest.mark.parametrize("command", ["replay", "tail"])
@pytest.mark.parametrize("subject,problem", [
    ("gpu..x", "an empty token"), ("gpu.evt.>.x", "'>' before the last token"),
    ("gpu.evt.cl*", "'cl*': * and > stand for whole tokens"), ("gpu evt", "a blank inside"), ("gpu.", "an empty token")])
def test_a_malformed_subject_filter_is_refused_before_the_server_sees_it(command, subject, problem):
    """nats-server answered these with `invalid subject`, which the CLI printed as a traceback."""
    done = invoke("events", command, "--subject", subject, "--nats-url", "nats://127.0.0.1:9")
    assert done.returncode == 2 and "Invalid value for '--subject'" in done.stderr and problem in done.stderr, done


def test_an_end_before_the_start_is_refused():
    """It printed nothing, as if the range were empty."""
    done = invoke("events", "replay", "--from-seq", "5", "--until-seq", "2", "--nats-url", "nats://127.0.0.1:9")
    assert done.returncode == 2 and "Invalid value for '--until-seq': 2 is before --from-seq 5" in done.stderr


@pytest.mark.parametrize("value", ["1e400", "nan", "-inf"])
def test_a_time_that_is_no_moment_is_refused(value):
    """`state at --time 1e400` showed the state at the log's end as if it were a time."""
    from services.projector.replay import parse_time

    with pytest.raises(ValueError, match="not a finite number of unix seconds"):
        parse_time(value)
    assert parse_time("1795886825.5") == 1795886825.5
