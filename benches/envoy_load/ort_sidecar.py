"""Variant (e) of run.py: an ext_authz (HTTP service) sidecar in Python, scoring the example
models converted to ONNX with ONNX Runtime on features computed in Python
(request_features.py) — the data-science team's default way to put models next to Envoy.

    .venv/bin/python -m benches.envoy_load.ort_sidecar SIDECAR.json

SIDECAR.json (run.py writes it from the filter's plugin configuration): `hash_key`, `schema`
(the schema file's JSON), `headers` ({"scores": ..., "decision": ... or absent}), `mode`, and
`models`: [{"name", "id", "onnx", "threshold", "action", "status", "body"}]. It listens on
127.0.0.1 (a port the kernel picks, printed as `listening on ADDR`), one process, one thread of
uvicorn's event loop (uvloop, httptools), and answers each check as the filter decides: 200
with the score header(s), or the block status and body.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

# What run.py's `authorization_request.headers_to_add` forwards (the Rust sidecar reads the same):
# the downstream protocol and the client's own content-length, both lost in the check request.
PROTOCOL = b"x-edgescore-protocol"
CONTENT_LENGTH = b"x-edgescore-content-length"
# ext_authz's own content-length and the async client's headers: the filter never sees them.
AUTHZ_HOP = {b"content-length", b"x-envoy-internal", b"x-envoy-expected-rq-timeout-ms", PROTOCOL, CONTENT_LENGTH}
STRENGTH = {"allow": 0, "tag": 1, "block": 2}


def as_filter_sees(scope: dict) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """The check request's headers back in the shape of the filter's header map (pseudo-headers,
    `host` as `:authority`, then the rest in the order ext_authz sent them), and the protocol."""
    path = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
    pairs = [(b":method", scope["method"].encode()), (b":path", path)]
    rest, protocol, length = [], None, None
    for name, value in scope["headers"]:
        if name == b"host":
            pairs.append((b":authority", value))
        elif name == PROTOCOL:
            protocol = value
        elif name == CONTENT_LENGTH:
            length = value
        elif name not in AUTHZ_HOP:
            rest.append((name, value))
    if length is not None:
        rest.append((b"content-length", length))
    return pairs + rest, protocol


class Scorer:
    """Features → every ONNX model → the filter's decision and header values."""

    def __init__(self, cfg: dict):
        import numpy as np

        from benches.envoy_load import onnx_models
        from benches.envoy_load.request_features import FeatureSchema

        self.schema = FeatureSchema(cfg["schema"], cfg["hash_key"].encode())
        self.models = cfg["models"]
        self.sessions = [onnx_models.session(Path(m["onnx"])) for m in self.models]
        self.x = np.zeros((1, len(self.schema.slots)), dtype=np.float32)
        self.scores_name = cfg["headers"]["scores"].encode()
        self.decision_name = (cfg["headers"].get("decision") or "").encode()
        self.enforce = cfg.get("mode", "enforce") == "enforce"

    def scores(self, pairs: list[tuple[bytes, bytes]], protocol: bytes | None) -> list[float]:
        self.schema.compute(pairs, protocol, out=self.x[0])
        return [float(s.run(["probabilities"], {"input": self.x})[0][0, 1]) for s in self.sessions]

    def decide(self, scores: list[float]) -> tuple[str, int | None, str]:
        """The strongest band and the first model that asked for it, and the decision text."""
        action, by = "allow", None
        for i, (m, s) in enumerate(zip(self.models, scores)):
            band = m["action"] if s >= m["threshold"] else "allow"
            if STRENGTH[band] > STRENGTH[action]:
                action, by = band, i
        text = action + ("" if by is None else f";model={self.models[by]['id']}")
        return action, by, text + (";shadow" if action == "block" and not self.enforce else "")

    def answer(self, scores: list[float]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """(status, headers, body) as the filter's edits would be (core/src/decision.rs)."""
        action, by, decision = self.decide(scores)
        if action == "block" and self.enforce:
            m = self.models[by]
            return m["status"], [(self.decision_name or self.scores_name, decision.encode())], m["body"].encode()
        values = ";".join(f"{m['name']}={s:.4f}" for m, s in zip(self.models, scores)).encode()
        if self.decision_name:
            return 200, [(self.scores_name, values), (self.decision_name, decision.encode())], b""
        return 200, [(self.scores_name, decision.encode() + b" " + values)], b""


def app_for(scorer: Scorer):
    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        status, headers, body = scorer.answer(scorer.scores(*as_filter_sees(scope)))
        # With its length, uvicorn needs no chunked encoding.
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benches.envoy_load.ort_sidecar SIDECAR.json", file=sys.stderr)
        return 2
    scorer = Scorer(json.loads(Path(args[0]).read_text()))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)  # before saying so: connections wait in the backlog until uvicorn serves
    config = uvicorn.Config(app_for(scorer), loop="uvloop", http="httptools", lifespan="off", access_log=False,
                            log_level="warning", workers=1)
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
