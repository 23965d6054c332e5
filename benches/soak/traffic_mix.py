"""The soak's load: an open loop of mixed requests, each on its own connection at its scheduled
time (a slow answer never delays the next request), and how each was answered."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from demo import traffic
from harness import client

# Hostile requests as raw bytes (Envoy's codec answers some of them itself, 4xx).
HOSTILE = [
    b"GET /\xff\xfe HTTP/1.1\r\nhost: a\r\nuser-agent: \xff\xfe\xfd\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\n" + b"".join(b"x-h%d: %d\r\n" % (i, i) for i in range(90)) + b"\r\n",
    b"GET /" + b"a" * 8000 + b" HTTP/1.1\r\nhost: a\r\ncookie: " + b"c" * 40000 + b"\r\n\r\n",
    b"POST /api/chat/messages HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\n{\"me\xff\x00\"]}",
    b"GET / HTTP/1.1\r\nhost: [::1\r\ncontent-length: 99999999999999999999\r\n\r\n",
]


@dataclass
class Outcome:
    sent_at: float  # seconds from the start of the load
    latency_s: float
    status: int | None  # None: no HTTP answer (lost)
    cause: str
    kind: str  # tree, text, big body, hostile


def _chat(text: str) -> client.Request:
    return traffic.chat("soak chat", "text", json.dumps({"message": text, "channel": "general"}).encode())


def _kinds() -> list[tuple[str, object]]:
    reqs = traffic.requests()
    chats = [_chat(t) for t in ("thanks for the help yesterday!", "you are a worthless idiot and everyone hates you",
                                "earn money fast, visit my site for free skins")]
    big = traffic.chat("soak big body", "text", json.dumps({"message": "lorem ipsum " * 21000}).encode())
    out: list[tuple[str, object]] = [("tree", r) for r in reqs]
    out += [("text", c) for c in chats] * 2
    out += [("big body", big)]
    out += [("hostile", h) for h in HOSTILE]
    return out


def _raw(port: int, data: bytes) -> int | None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        # No half-close after sending: Envoy closes a connection the client half-closed, and the
        # answer with it.
        s.sendall(data)
        head = b""
        while b"\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                return None
            head += chunk
    return int(head.split()[1])


def _classify(kind: str, status: int | None, headers: dict[str, str]) -> str:
    if status is None:
        return f"lost ({kind}: {headers.get('error', 'no answer')})"
    decision = headers.get("x-edgescore-decision", "")
    if status == 403 and decision.startswith("block;text="):
        return "blocked by the text path (expected)"
    if status == 403 and decision.startswith("block;"):
        return "blocked by the trees (expected)"
    if 200 <= status < 300:
        return "passed (2xx)"
    if kind == "hostile" and 400 <= status < 500:
        return "hostile request refused by Envoy (4xx, expected)"
    if kind == "big body" and status == 413:
        return "body over Envoy's buffer limit (413, expected)"
    return f"unexpected {status} ({kind})"


def _one(port: int, kind: str, req, sent_at: float, out: list[Outcome], lock: threading.Lock) -> None:
    start = time.monotonic()
    status, headers = None, {}
    try:
        if kind == "hostile":
            status = _raw(port, req)
        else:
            resp = client.send("127.0.0.1", port, req, timeout=15)
            status, headers = resp.status, {k.lower(): v for k, v in resp.headers}
    except (OSError, ValueError, IndexError) as e:
        status, headers = None, {"error": type(e).__name__}
    o = Outcome(sent_at, time.monotonic() - start, status, _classify(kind, status, headers), kind)
    with lock:
        out.append(o)


def mix(port: int, rate: float, t0: float, duration: float, out: list[Outcome], stop: threading.Event) -> None:
    kinds = _kinds()
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=128) as pool:
        i = 0
        while not stop.is_set():
            at = i / rate
            if at >= duration:
                break
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            kind, req = kinds[i % len(kinds)]
            pool.submit(_one, port, kind, req, at, out, lock)
            i += 1
