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
