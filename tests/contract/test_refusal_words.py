"""Refusals of a request say what is wrong in words another team can act on, naming the field:
the key of a bad value in a map, the rule of a pattern, a payload that is empty or not an object.
(The intake's refusals are checked on the whole hostile corpus by test_differential.py.)"""

from __future__ import annotations

import msgspec
import pytest

from schemas.commands import SubmitClaim
from shared.commands import _Strict, invalid_reply

_decode = _Strict(msgspec.json.Decoder(SubmitClaim).decode).decode


def _refusal(body: bytes):
    with pytest.raises(Exception) as raised:
        _decode(body)
    return invalid_reply(raised.value, body, _decode).error


def test_a_bad_value_in_a_map_is_named_by_its_key():
    error = _refusal(b'{"claim": {"claim_id": "c", "namespace": "t", "labels": {"a": "1", "b": 2, "c": 3}}}')
    assert error.field == "claim.labels.b" and "got `int`" in error.message


def test_a_map_too_deep_to_read_is_named_itself():
    deep = b"[" * 3000 + b"]" * 3000
    error = _refusal(b'{"claim": {"claim_id": "c", "namespace": "t", "node_selector": {"k": ' + deep + b"}}}")
    assert error.field == "claim.node_selector"


def test_a_pattern_is_said_in_words():
    error = _refusal(b'{"claim": {"claim_id": "c", "namespace": "Team A"}}')
    assert error.field == "claim.namespace"
    assert error.message.startswith("Expected lower-case DNS-like name (`str` matching regex '^[a-z0-9]")


@pytest.mark.parametrize("body, words", [
    (b"", "malformed JSON: the payload is empty"),
    (b'{"claim": {"claim_id": "c"', "malformed JSON: the payload ends before its JSON value does (cut off?)"),
    (b"[1]", "the payload must be one JSON object; it is `array`"),
    (b"null", "the payload must be one JSON object; it is `null`"),
])
def test_a_payload_as_a_whole_is_said_plainly(body, words):
    assert _refusal(body).message == words
