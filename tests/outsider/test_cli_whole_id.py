"""`gpuledger claim release job-1` released `job-10` (session 35, up --demo): claim ids may be
typed as any unique prefix, so an id that was never submitted (a typo, another namespace's job, a
submit that never reached the service) named the one claim whose id starts with it, and the
release ended that claim, exit 0. Claim ids are chosen by people (`train-4`, `train-42`), not only
UUIDs. Release and renew, which change a claim, now take the whole id and name the claim the
prefix would have meant; get and explain, which only show, keep taking prefixes."""

from __future__ import annotations

from tests.cli import run_cli
from tests.service.helpers import running


async def test_release_and_renew_need_the_whole_id_and_say_which_claim_was_meant(fresh_nats):
    url = fresh_nats.url
    async with running(url, "claim"):
        submitted = await run_cli("claim", "submit", "--id", "job-10", "--namespace", "team-a", "--gpus", "0",
                                  "--cpu-milli", "1", "--nats-url", url)
        assert submitted.returncode == 0, submitted.stderr
        for command in ("release", "renew"):
            refused = await run_cli("claim", command, "job-1", "--nats-url", url)
            assert refused.returncode == 1, refused.stdout
            assert f"no claim 'job-1'; 'job-10' starts with it" in refused.stderr, refused.stderr
            assert f"gpuledger claim {command} job-10" in refused.stderr, refused.stderr
        shown = await run_cli("claim", "get", "job-1", "--nats-url", url)  # showing is harmless
        assert shown.returncode == 0 and shown.stdout.startswith("job-10  pending"), shown.stdout
        released = await run_cli("claim", "release", "job-10", "--nats-url", url)
        assert released.returncode == 0 and released.stdout.startswith("job-10  released"), released.stdout
