"""Every float option of the CLI takes a finite number (session 29's outsider). click's FLOAT takes
`nan` and `inf`, as Python's float() does, and a range's lower bound lets NaN through (every
comparison with NaN is false): `claim submit --wait nan` sent its request and gave up on it at once
("no answer on gpu.cmd.claim.submit within nans. Is the claim service running?"), `--lease inf`
and `quota set --fair-sharing-weight nan` reached the service as JSON null. Now click's usage error
names the option, before anything is sent."""

from __future__ import annotations

import pytest

from tests.cli import invoke

NOWHERE = ("--nats-url", "nats://127.0.0.1:9")


@pytest.mark.parametrize("args, option, value", [
    (["claim", "submit", "-n", "team-a", "--wait"], "--wait", "nan"),
    (["claim", "submit", "-n", "team-a", "--lease"], "--lease", "inf"),
    (["claim", "submit", "-n", "team-a", "--gpu-memory"], "--gpu-memory", "NaN"),
    (["claim", "submit", "-n", "team-a", "--model-memory"], "--model-memory", "1e400"),
    (["quota", "set", "team-a", "--fair-sharing-weight"], "--fair-sharing-weight", "nan"),
    (["status", "--timeout"], "--timeout", "infinity"),
    (["gpus", "--count", "2", "--budget"], "--budget", "nan"),
])
def test_nan_and_infinity_are_refused_naming_the_option(args, option, value):
    done = invoke(*args, value, *NOWHERE)
    assert done.returncode == 2, done
    assert f"Invalid value for '{option}': {value!r} is not a finite number." in done.stderr, done.stderr


def test_finite_numbers_still_pass_to_the_range_check():
    done = invoke("claim", "submit", "-n", "team-a", "--wait", "-1", *NOWHERE)
    assert done.returncode == 2 and "x>=0" in done.stderr, done.stderr
    done = invoke("claim", "submit", "-n", "team-a", "--wait", "2.5", *NOWHERE)
    assert done.returncode == 1 and "cannot reach NATS" in done.stderr, done.stderr
