#!/usr/bin/env python3
"""The demo backend: a tiny HTTP server that answers every request with what it received.

    python harness/backend.py [--host 127.0.0.1] [--port 8081]

The JSON reply has the method, the path, the edgescore headers the filter added
(`x-edgescore`, `x-edgescore-decision`) and every header as received, so the demo (and a
person with curl) sees what the upstream sees. Standard library only: it also runs as is in the
python:3.11-slim container of docker-compose.yml. The tests import `make_server` to get the same
server with a callback that records each request.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

# A received request: method, path (raw, as on the request line), headers as (name, value) in
# the order received (values decoded as latin-1, so any byte survives), body bytes.
Record = dict

# http.server refuses requests with more than 100 headers (431); Envoy and the filter are tested
# with hundreds, so the backend accepts what Envoy lets through.
http.client._MAXHEADERS = 1000


class EchoHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Envoy reuses upstream connections
    # The headers and the body go out in two writes: with Nagle's algorithm the body waits for
    # the ACK of the headers, which the peer delays (~40 ms per response through Envoy).
    disable_nagle_algorithm = True
    server_version = "edgescore-demo-backend"
    on_request: Callable[[Record], None] | None = None
    quiet = True

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        headers = [(k.lower(), v) for k, v in self.headers.items()]
        record: Record = {"method": self.command, "path": self.path, "headers": headers, "body": body}
        if self.on_request is not None:
            self.on_request(record)
        reply = {
            "method": self.command,
            "path": self.path,
            "x-edgescore": self.headers.get("x-edgescore"),
            "x-edgescore-decision": self.headers.get("x-edgescore-decision"),
            "headers": dict(headers),
            "body_bytes": len(body),
        }
        data = (json.dumps(reply, indent=1) + "\n").encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (stdlib signature)
        if not self.quiet:
            super().log_message(format, *args)


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver listens with a backlog of 5: a burst of new upstream connections from Envoy
    # (one per concurrent request) overflowed it, the kernel dropped the SYNs, and Envoy's
    # 1 s connect timeout answered 503 before the retransmitted SYN was accepted.
    request_queue_size = 1024

    def handle_error(self, request, client_address) -> None:
        # Envoy resets pooled upstream connections (a downstream reset, an idle timeout): for
        # an upstream that is routine, not a traceback on stderr per connection.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def make_server(host: str = "127.0.0.1", port: int = 8081, on_request: Callable[[Record], None] | None = None,
                quiet: bool = True) -> ThreadingHTTPServer:
    """A bound (not yet serving) echo server; port 0 picks a free port (`server.server_port`)."""
    handler = type("Handler", (EchoHandler,), {"on_request": staticmethod(on_request) if on_request else None,
                                                "quiet": quiet})
    return EchoServer((host, port), handler)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, name="edgescore-backend", daemon=True)
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="edgescore demo backend (echoes requests as JSON)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8081)
    ap.add_argument("--verbose", action="store_true", help="log each request on stderr")
    args = ap.parse_args(argv)
    server = make_server(args.host, args.port, quiet=not args.verbose)
    # SIGTERM (docker stop, the demo driver) ends serve_forever cleanly.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"demo backend on http://{args.host}:{server.server_port}/", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
