"""The CLI run with the publisher's URL (`GPULEDGER_PUBLISHER_URL`, the second line `up` prints: a
new user's easy mistake) says the user is refused, not that the stack is down. Found by the
session-27 outsider: `gpuledger status` printed every running service as "DOWN no answer
(Permissions Violation ...)" and ended "error: not answering: claim, allocator, quota,
pool-controller"; `events replay|tail` and `state at` waited out nats-py's timeout and said
"cannot read the log ... (TimeoutError: nats: timeout)" (nats-py hands the server's refusal to the
error callback only)."""

from __future__ import annotations

from shared import nats_auth
from tests.cli import run_cli
from tests.outsider.test_cli_inbox import users_server  # noqa: F401 (the fixture)


async def test_status_as_the_publisher_says_the_user_is_refused(users_server):  # noqa: F811
    done = await run_cli("status", "--nats-url", users_server(nats_auth.PUBLISHER))
    assert done.returncode == 1, done
    assert "DOWN" not in done.stdout and "not answering" not in done.stderr, (done.stdout, done.stderr)
    assert "refused" in done.stdout and "Permissions Violation" in done.stdout, done.stdout
    last = done.stderr.strip().splitlines()[-1]
    assert "refused this user" in last and "ops user" in last, done.stderr


async def test_reading_the_log_as_the_publisher_says_the_user_is_refused(users_server):  # noqa: F811
    for args in (("events", "replay"), ("state", "at", "--seq", "1")):
        done = await run_cli(*args, "--nats-url", users_server(nats_auth.PUBLISHER))
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "refused this user" in lines[0], done.stderr
        assert "permissions violation" in lines[0].lower(), lines[0]
        assert "TimeoutError" not in lines[0]
