"""The admission webhook's HTTP door under hostile or broken requests: each gets an HTTP answer
that says what is wrong, and none holds a connection for good. Found by the session-25 outsider:
`Content-Length: abc` or `-5` and a body nested 100,000 levels deep dropped the connection with
no answer and a traceback in the log ("Unhandled exception in client_connected_cb"), a head over
64 KiB was reset without a word, and a client that sent half a request (a head without its end, a
body shorter than its Content-Length) held its connection open forever (slowloris: the API
server's reviews queue behind no one, but every such connection is kept)."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.pool_controller import webhook


def _allow(path: str, review: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True}}


@pytest.fixture
async def port(monkeypatch):
    monkeypatch.setattr(webhook, "READ_TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(webhook, "IDLE_TIMEOUT_S", 1.0, raising=False)
    server = await webhook.start_webhook(_allow, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def _exchange(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """What the server answers before it closes the connection (or b'' for nothing at all)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), wait)
    finally:
        writer.close()


def _post(body: bytes, length: str | None = None) -> bytes:
    return (b"POST /validate HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: "
            + (length or str(len(body))).encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize("request_bytes, status, words", [
    (_post(b"", "abc"), b"400", b"Content-Length must be a whole number of bytes, got 'abc'"),
    (_post(b"", "-5"), b"400", b"Content-Length must be a whole number of bytes, got '-5'"),
    (_post(b"", "9" * 5000), b"413", b"body over"),
    (_post(b"[" * 100_000 + b"]" * 100_000), b"400", b"nested too deeply"),
    (b"POST /validate HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", b"431", b"request head over 64 KiB"),
    (b"POST /validate HTTP/1.1\r\nContent-Length: 5\r\n", b"408", b"request head not complete"),
    (_post(b"{}", "50"), b"408", b"body of 50 bytes not complete"),
])
async def test_a_broken_request_gets_an_answer_saying_what_is_wrong(port, request_bytes, status, words):
    answer = await _exchange(port, request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert words in answer


async def test_an_idle_connection_is_closed_and_the_server_goes_on(port):
    assert await _exchange(port, b"", wait=5.0) == b""  # closed after the idle timeout, no answer
    review = json.dumps({"request": {"uid": "u1"}}).encode()
    answer = await _exchange(port, _post(review).replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n"))
    assert answer.startswith(b"HTTP/1.1 200") and b'"uid": "u1", "allowed": true' in answer


async def test_keep_alive_serves_several_reviews_on_one_connection(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for uid in ("a", "b"):
        writer.write(_post(json.dumps({"request": {"uid": uid}}).encode()))
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        assert f'"uid": "{uid}"'.encode() in await reader.readexactly(length)
    writer.close()
