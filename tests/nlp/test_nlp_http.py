"""POST /score parsing and limits, without Ray."""

from __future__ import annotations

import asyncio
import json

import pytest

from nlp.http_api import ApiError, parse_score_request, read_capped_body


async def _chunks(*parts: bytes):
    for part in parts:
        yield part


def _read(content_length, parts, max_bytes=100):
    return asyncio.run(read_capped_body(content_length, _chunks(*parts), max_bytes))


def test_body_within_limit_is_read_whole():
    assert _read("6", [b"abc", b"def"]) == b"abcdef"
    assert _read(None, [b"x" * 100]) == b"x" * 100


def test_declared_oversize_is_refused_before_reading():
    def never():
        raise AssertionError("the body must not be read")
        yield b""  # pragma: no cover

    with pytest.raises(ApiError) as err:
        asyncio.run(read_capped_body("101", never(), 100))
    assert err.value.status == 413 and err.value.code == "too_large"


def test_chunked_oversize_is_refused():
    with pytest.raises(ApiError) as err:
        _read(None, [b"x" * 60, b"x" * 60])
    assert err.value.status == 413


def test_bad_content_length():
    with pytest.raises(ApiError) as err:
        _read("lots", [b""])
    assert err.value.status == 400


@pytest.mark.parametrize(
    "body,code",
    [
        (b"", "empty_body"),
        (b"{bad", "invalid_json"),
        (b"\xff\xfe", "invalid_utf8"),
        (b'["text"]', "not_an_object"),
        (b'"text"', "not_an_object"),
        (b'{"txt": "hi"}', "missing_text"),
        (b'{"text": 5}', "text_not_string"),
        (b'{"text": null}', "text_not_string"),
        (b'{"text": ["a"]}', "text_not_string"),
    ],
)
def test_bad_requests_get_400_with_a_reason(body, code):
    with pytest.raises(ApiError) as err:
        parse_score_request(body)
    assert err.value.status == 400 and err.value.code == code
    payload = json.loads(err.value.reply().body)
    assert payload["error"] == code and payload["message"]


def test_good_request():
    assert parse_score_request('{"text": "héllo", "extra": 1}'.encode()) == "héllo"
    assert parse_score_request(b'{"text": ""}') == ""
