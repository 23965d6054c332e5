"""The HTTP contract of the service, independent of Ray and of any web framework: parsing,
limits, JSON shapes. Both doors (each replica's own listener, nlp/ingress.py, and Serve's
proxy, nlp/app.py) turn a `Reply` into their framework's response.

POST /score   {"text": "..."} -> 200 {"score", "label", "labels", "model"}
GET  /healthz                 -> 200 {"status": "ok", "model"}
GET  /stats                   -> 200 {"requests", "scored", ...} (see nlp/README.md)
GET  /metrics                 -> 200 the same counters in Prometheus' text format
Errors are JSON: {"error": "<code>", "message": "<what to fix>"} with a 4xx/5xx status.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator

from nlp.model import Score

JSON_TYPE = "application/json"


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = JSON_TYPE
    headers: tuple[tuple[str, str], ...] = ()


def json_bytes(value: Any) -> bytes:
    """Compact JSON, as Starlette's JSONResponse writes it."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def json_reply(value: Any, status: int = 200) -> Reply:
    return Reply(status, json_bytes(value))


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers

    def reply(self) -> Reply:
        body = json_bytes({"error": self.code, "message": self.message})
        return Reply(self.status, body, headers=self.headers)


async def read_capped_body(
    content_length: str | None, chunks: AsyncIterator[bytes], max_bytes: int
) -> bytes:
    """The request body, refusing (413) anything over max_bytes without reading it all."""
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise ApiError(400, "bad_content_length", "Content-Length is not an integer") from None
        if declared > max_bytes:
            raise _too_large(declared, max_bytes)
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > max_bytes:
            raise _too_large(len(body), max_bytes)
    return bytes(body)


def parse_score_request(body: bytes) -> str:
    """The text to score from a POST /score body, or an ApiError saying what is wrong."""
    if not body:
        raise ApiError(400, "empty_body", 'the body is empty; send {"text": "..."}')
    try:
        payload = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "invalid_utf8", "the body is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {err}") from None
    if not isinstance(payload, dict):
        raise ApiError(
            400, "not_an_object", f'the body must be a JSON object {{"text": ...}}, not {_json_type(payload)}'
        )
    if "text" not in payload:
        raise ApiError(400, "missing_text", 'the JSON object has no "text" field')
    text = payload["text"]
    if not isinstance(text, str):
        raise ApiError(400, "text_not_string", f'"text" must be a string, not {_json_type(text)}')
    return text


def score_body(score: Score, model_id: str) -> bytes:
    return json_bytes({"score": score.score, "label": score.label, "labels": score.labels, "model": model_id})


def method_not_allowed(allowed: str) -> ApiError:
    return ApiError(405, "method_not_allowed", f"use {allowed}", headers=(("allow", allowed),))


def overloaded(code: str, message: str) -> ApiError:
    """503 for admission: the caller (the filter) fails open at once instead of waiting."""
    return ApiError(503, code, message, headers=(("retry-after", "1"),))


def _too_large(size: int, max_bytes: int) -> ApiError:
    return ApiError(
        413, "too_large", f"the body is {size} bytes; this service accepts at most {max_bytes}"
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)
