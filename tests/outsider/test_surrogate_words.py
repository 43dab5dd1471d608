"""A lone UTF-16 surrogate (`"\\ud800"`) is refused in those words, not as a cut-off payload
(msgspec says "Input data was truncated" of both). Found by the session-24 outsider's Node.js
system: every system subject answered "the payload ends before its JSON value does (cut off?)"."""

from __future__ import annotations

import msgspec
import pytest

from schemas.commands import ReleaseClaim, SubmitClaim
from services.claim.intake import decode_error
from shared.commands import _Strict, invalid_reply


def _refusal(command, body: bytes) -> str:
    decode = _Strict(msgspec.json.Decoder(command).decode).decode
    with pytest.raises(Exception) as raised:
        decode(body)
    return invalid_reply(raised.value, body, decode).error.message


@pytest.mark.parametrize("command, body", [
    (ReleaseClaim, b'{"claim_id": "\\ud800"}'),
    (SubmitClaim, b'{"claim": {"claim_id": "c", "namespace": "t", "workload": "a\\uDBFFb"}}'),
])
def test_a_lone_surrogate_is_named(command, body):
    message = _refusal(command, body)
    assert message.startswith("malformed JSON: a lone UTF-16 surrogate (`\\u")
    assert "cut off" not in message


def test_a_pair_cut_off_is_still_cut_off():
    assert "cut off" in _refusal(ReleaseClaim, b'{"claim_id": "\\ud83d\\ude00')


def test_the_intake_says_the_same():
    body = b'{"claim_id": "c", "namespace": "t", "workload": "\\ud800"}'
    with pytest.raises(Exception) as raised:
        msgspec.json.decode(body)
    assert "lone UTF-16 surrogate" in decode_error(raised.value, body)
