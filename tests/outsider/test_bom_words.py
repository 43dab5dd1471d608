"""A JSON payload starting with a UTF-8 byte-order mark (what .NET's Encoding.UTF8 and PowerShell's
`Out-File -Encoding utf8` write first) was refused "malformed JSON: JSON is malformed: invalid
character (byte 0)": true, and no help to the one who cannot see byte 0 in their editor (session
32). The intake and every request subject now say what it is."""

from __future__ import annotations

import msgspec

from services.claim.intake import decode_claim, decode_error
from shared.commands import invalid_reply

BOM_CLAIM = b'\xef\xbb\xbf{"claim_id": "bom-1", "namespace": "team-a"}'
WORDS = "malformed JSON: the payload starts with a UTF-8 byte-order mark (bytes EF BB BF): send the JSON without one"


def test_the_intake_names_the_byte_order_mark():
    try:
        decode_claim(BOM_CLAIM)
    except Exception as err:  # msgspec's
        assert decode_error(err, BOM_CLAIM) == WORDS
    else:
        raise AssertionError("a payload with a byte-order mark was taken")


def test_a_request_names_it_too():
    try:
        msgspec.json.decode(BOM_CLAIM)
    except msgspec.DecodeError as err:
        reply = invalid_reply(err, BOM_CLAIM)
    assert reply.error.code == "invalid" and reply.error.message == WORDS, reply


def test_a_byte_order_mark_elsewhere_is_not_blamed():
    data = b'{"claim_id": "bom-2", "namespace": "team-a", \xef\xbb\xbf}'
    try:
        decode_claim(data)
    except Exception as err:
        assert "byte-order mark" not in decode_error(err, data)
