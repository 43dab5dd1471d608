"""Claims as people type them: a unique prefix works for every command that shows a claim (release
and renew, which change one, take the whole id since session 35), an
ambiguous one lists the candidates, `claim list` never cuts an id, times are local ISO 8601, and
`explain` shows the allocator's score and NVLink island."""

from __future__ import annotations

import os
import re

import pytest

from services.claim.lookup import Unresolved, claim_with_prefix

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?[+-]\d\d:\d\d")


@pytest.mark.parametrize("given,known,expected", [
    ("9636967f-87", ["9636967f-8741-aaaa", "9636967f-9999-bbbb"], "9636967f-8741-aaaa"),
    ("a", ["a-1", "b-1"], "a-1"),
])
def test_a_prefix_only_one_claim_has_names_it(given, known, expected):
    assert claim_with_prefix(given, known) == expected


@pytest.mark.parametrize("given,known,code,says", [
    ("9636967f", ["9636967f-8741", "9636967f-9999"], "ambiguous", "9636967f-8741, 9636967f-9999"),
    ("zz", ["a-1"], "not-found", "no claim id starts with it"),
    ("", ["a-1"], "invalid", "is needed"),
    ("c", [f"c-{i:02}" for i in range(12)], "ambiguous", "and 2 more"),
])
def test_no_or_several_matches_are_refused_saying_why(given, known, code, says):
    with pytest.raises(Unresolved) as err:
        claim_with_prefix(given, known)
    assert err.value.code == code and says in err.value.message


@pytest.mark.e2e
def test_the_cli_takes_prefixes_and_shows_times_and_placement(demo):
    for suffix in ("8741-aaaa", "9999-bbbb"):
        demo.cli("claim", "submit", "-n", "team-p", "--gpus", "2", "--model", "H100",
                 "--id", f"pfx0c9e-{suffix}", "--wait", "30")
    ambiguous = demo.cli("claim", "get", "pfx0c9e", check=False)
    assert ambiguous.returncode == 1
    assert "pfx0c9e-8741-aaaa, pfx0c9e-9999-bbbb" in ambiguous.stderr

    explained = demo.cli("claim", "explain", "pfx0c9e-87").stdout
    assert explained.startswith("pfx0c9e-8741-aaaa ")
    assert "placed: node " in explained and "scored" in explained and "nvlink-group-" in explained
    assert len(ISO.findall(explained)) >= 4  # submitted, allocated, and the timeline's steps
    assert not re.search(r"\b1\d{9}\.\d{3}\b", explained)  # no epoch seconds left

    narrow = dict(os.environ, GPULEDGER_NATS_URL=demo.url, COLUMNS="60")
    listed = demo.cli("claim", "list", "-n", "team-p", env=narrow).stdout
    assert "pfx0c9e-8741-aaaa" in listed and "pfx0c9e-9999-bbbb" in listed

    # a command that changes a claim takes the whole id (session 35: `release job-1` ended job-10)
    by_prefix = demo.cli("claim", "release", "pfx0c9e-99", check=False)
    assert by_prefix.returncode == 1 and "give its whole id" in by_prefix.stderr
    released = demo.cli("claim", "release", "pfx0c9e-9999-bbbb").stdout
    assert released.startswith("pfx0c9e-9999-bbbb  released")
