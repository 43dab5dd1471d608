"""Ports `gpuledger up` remembers: the same on every start while free, the one asked for from then
on, a new one (said out loud) when something else took it."""

from __future__ import annotations

import json
import random
import socket

from gpuledger_cli.ports import PortBook, port_is_free


def test_a_port_is_chosen_once_and_kept_across_starts(tmp_path):
    first = PortBook(tmp_path)
    nats, web = first.take("nats"), first.take("dashboard")
    first.save()
    first.release()  # that `up` ended
    again = PortBook(tmp_path)
    assert (again.take("nats"), again.take("dashboard")) == (nats, web)
    assert nats != web and 20000 <= nats <= 32767  # below the ephemeral range: nobody borrows it
    assert again.changed == []


def test_a_requested_port_is_used_and_remembered(tmp_path):
    # a port free now: a fixed one may be held by a stack another test (or worker) started
    requested = next(p for p in range(24500, 24600) if port_is_free(p))
    book = PortBook(tmp_path)
    book.take("nats", requested=requested)
    book.save()
    book.release()
    assert PortBook(tmp_path).take("nats") == requested


def test_a_remembered_port_someone_took_is_replaced_and_said(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        (tmp_path / "ports.json").write_text(json.dumps({"nats": taken}))
        book = PortBook(tmp_path, rng=random.Random(7))
        fresh = book.take("nats")
    assert fresh != taken and port_is_free(fresh)
    assert book.changed == [f"port {taken} remembered for nats is in use; using {fresh}"]


def test_an_unreadable_ports_file_means_new_ports_not_a_crash(tmp_path, capsys):
    (tmp_path / "ports.json").write_text("{not json")
    assert PortBook(tmp_path).take("nats") > 0
    assert "ignoring" in capsys.readouterr().err


def test_two_stacks_starting_at_once_never_take_the_same_port(tmp_path):
    """A port is bound only when its process is ready, tens of seconds after `up` chose it on a
    busy machine: another `up` starting meanwhile found it free and took it too (the suite runs
    several stacks at once). The same random choices make both books try the same ports here."""
    first = PortBook(tmp_path / "a", rng=random.Random(7))
    second = PortBook(tmp_path / "b", rng=random.Random(7))
    names = ("nats", "dashboard", "metrics-quota")
    mine = {first.take(name) for name in names}
    theirs = {second.take(name) for name in names}
    assert not mine & theirs


def test_a_remembered_port_another_starting_stack_holds_is_replaced(tmp_path):
    starting = PortBook(tmp_path / "other", rng=random.Random(3))
    held = starting.take("dashboard")  # chosen, not yet bound: nothing listens on it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "ports.json").write_text(json.dumps({"dashboard": held}))
    book = PortBook(tmp_path / "mine")
    assert book.take("dashboard") != held and book.changed
    starting.release()  # that `up` ended (or died: the kernel drops the locks)
    assert PortBook(tmp_path / "mine").take("dashboard") == held
