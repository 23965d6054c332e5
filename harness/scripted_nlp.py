"""A stand-in for the NLP service (nlp/: Ray Serve, `POST /score`) on 127.0.0.1 that answers as
a test scripts it, in the service's own answer format (nlp/README.md): a verdict for a label,
an HTTP error status, or no answer at all. For tests of what Envoy and the filter do with the
answers (metrics, fail-open), where the real service's 20-40 s start buys nothing;
tests/test_envoy_nlp.py runs the real one."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Callable

# What `script(text)` returns for a text that gets no answer (the call can only time out).
HANG = "hang"
LABELS = ("toxic", "threat", "sexual", "spam", "ok")
MODEL = "scripted@1"


def verdict(label: str, p: float = 0.99) -> dict:
    """The service's answer with `label` at probability `p` and the rest shared out."""
    rest = (1.0 - p) / (len(LABELS) - 1)
    labels = {name: (p if name == label else rest) for name in LABELS}
    return {"score": 1.0 - labels["ok"], "label": label, "labels": labels, "model": MODEL}


class ScriptedNlp:
    """`script(text)` returns a label (answered 200 with `verdict(label)`), an int (answered
    with that status) or HANG. `texts` records every text received, in order."""

    def __init__(self, script: Callable[[str], str | int]):
        self.script = script
        self.texts: list[str] = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # Headers and body in two writes: without this the body waits out the peer's
            # delayed ACK (harness/backend.py).
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                text = json.loads(body)["text"]
                with outer.lock:
                    outer.texts.append(text)
                answer = outer.script(text)
                if answer == HANG:
                    outer.released.wait(30)
                    return
                status, out = (answer, {"error": "scripted", "message": "scripted failure"}) if isinstance(answer, int) \
                    else (200, verdict(answer))
                data = json.dumps(out).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self) -> list[str]:
        with self.lock:
            return list(self.texts)

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
