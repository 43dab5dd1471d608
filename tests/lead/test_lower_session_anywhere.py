"""lower_session where the session's nice means nothing: a session leader whose autogroup file is
empty (its CPU share is a cgroup's, as on a CI runner or in a container) or missing gets None and
carries on; its threads are lowered either way. Session 31's test of the autogroup itself read
that empty file as if it held a value and failed on such a runner."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from shared.priority import lower_session
print(lower_session(3, path=sys.argv[1]))
"""


def _lower_in_a_new_session(path: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, path], capture_output=True, text=True,
                          check=True, start_new_session=True, timeout=60)
    return done.stdout.strip()


def test_an_empty_autogroup_file_leaves_the_session_alone(tmp_path):
    empty = tmp_path / "autogroup"
    empty.write_text("")
    assert _lower_in_a_new_session(str(empty)) == "None"
    assert empty.read_text() == ""


def test_no_autogroup_file_leaves_the_session_alone(tmp_path):
    assert _lower_in_a_new_session(str(tmp_path / "absent")) == "None"


def test_a_session_leader_lowers_the_value_it_reads(tmp_path):
    file = tmp_path / "autogroup"
    file.write_text("/autogroup-7 nice 2\n")
    assert _lower_in_a_new_session(str(file)) == "5"
    assert file.read_text() == "5"
