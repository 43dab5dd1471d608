"""A nats-server started on a port that another process bound first (the suite starts many
servers at once, each on a port found free a moment before): `start_nats_server` neither takes
the other process for its own server nor fails when it chose the port itself."""

from __future__ import annotations

import socket

import pytest

import shared.natsserver as natsserver
from shared.natsserver import NatsServerError, start_nats_server


def test_another_server_on_the_port_is_not_taken_for_this_one(tmp_path, fresh_nats):
    # a connection to the port reaches the other server, which answers INFO: this one never listened
    with pytest.raises(NatsServerError, match="address already in use"):
        start_nats_server(tmp_path / "mine", port=fresh_nats.port)


def test_a_free_port_taken_before_the_server_bound_it_is_replaced(tmp_path, monkeypatch):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        picks = iter([taken])
        real = natsserver.free_port
        monkeypatch.setattr(natsserver, "free_port", lambda: next(picks, None) or real())
        server = start_nats_server(tmp_path / "nats")
        try:
            assert server.port != taken and server.process.poll() is None
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                assert sock.recv(4) == b"INFO"
        finally:
            server.stop()
