"""A crawler that signs its requests as Web Bot Auth has it (RFC 9421 HTTP message signatures:
Ed25519 over `@authority`, `created`, `expires`, a `keyid` that is the key's RFC 7638 JWK
thumbprint, `tag="web-bot-auth"`), and a server of key directories on 127.0.0.1, for the demo
(demo/run.py) and tests/test_verified_bots.py. Keys are made when a `Signer` is: none is ever
written to disk.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.require import module

# Where a Web Bot Auth signer publishes its keys.
DIRECTORY_PATH = "/.well-known/http-message-signatures-directory"


def b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class Signer:
    """A fresh Ed25519 key, its JWK set and its thumbprint (the `keyid`)."""

    def __init__(self) -> None:
        ed = module("cryptography.hazmat.primitives.asymmetric.ed25519")
        serialization = module("cryptography.hazmat.primitives.serialization")
        self.key = ed.Ed25519PrivateKey.generate()
        raw = self.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.x = b64url(raw)
        canonical = json.dumps({"crv": "Ed25519", "kty": "OKP", "x": self.x}, separators=(",", ":"), sort_keys=True)
        self.keyid = b64url(hashlib.sha256(canonical.encode()).digest())

    def jwks(self) -> bytes:
        return json.dumps({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": self.x, "use": "sig"}]}).encode()

    def headers(self, authority: str, created: int, expires: int, keyid: str | None = None) -> dict[str, str]:
        """`signature-input` and `signature` of a request to `authority` (RFC 9421 §2.5's
        signature base), under `keyid` (default: this key's own)."""
        params = f'("@authority");created={created};expires={expires};keyid="{keyid or self.keyid}";alg="ed25519";tag="web-bot-auth"'
        base = f'"@authority": {authority.lower()}\n"@signature-params": {params}'
        sig = base64.b64encode(self.key.sign(base.encode())).decode()
        return {"signature-input": f"sig1={params}", "signature": f"sig1=:{sig}:"}


class DirectoryServer:
    """Serves `bodies` (path → bytes; 404 for any other path) on 127.0.0.1 in a thread of this
    process; `close` stops it."""

    def __init__(self, bodies: dict[str, bytes], port: int = 0) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = bodies.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", "application/http-message-signatures-directory+json")
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
