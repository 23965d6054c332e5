"""The HTTP contract of the service, independent of Ray: parsing, limits, JSON shapes.

POST /score   {"text": "..."} -> 200 {"score", "label", "labels", "model"}
GET  /healthz                 -> 200 {"status": "ok", "model"}
GET  /stats                   -> 200 {"requests", "scored", ...} (see nlp/README.md)
Errors are JSON: {"error": "<code>", "message": "<what to fix>"} with a 4xx/5xx status.
"""

from __future__ import annotations

import json
from typing import AsyncIterator

from starlette.responses import JSONResponse

from nlp.model import Score


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.code, "message": self.message}, status_code=self.status)


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


def score_body(score: Score, model_id: str) -> dict:
    return {"score": score.score, "label": score.label, "labels": score.labels, "model": model_id}


def _too_large(size: int, max_bytes: int) -> ApiError:
    return ApiError(
        413, "too_large", f"the body is {size} bytes; this service accepts at most {max_bytes}"
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)
