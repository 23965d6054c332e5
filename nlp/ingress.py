"""Each replica's own HTTP listener: the API without Serve's proxy hop.

Through Serve's proxy a request is parsed by the proxy's uvicorn, routed, pickled into a
Ray actor call to the replica, unwrapped into a Starlette request there, and its answer
streamed back the same way: on this machine that cost more CPU per request than the model
(benches/nlp_load/README.md). Here the replica parses HTTP itself (uvicorn with httptools,
a bare ASGI callable, no middleware, no access log) on an event loop of its own thread and
hands the request to the same ScoringService; Serve still places, health-checks and replaces
the replicas, and its proxy stays available as the other door.

Every replica on a node binds the same host:port with SO_REUSEPORT, so the kernel spreads
connections over them and a replica that a rolling update starts can take connections
before the old one is gone. (Any process of the same user can join such a port: run one
application per ingress port.)
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import AsyncIterator

import uvicorn

from nlp.http_api import Reply
from nlp.scoring_service import ScoringService

logger = logging.getLogger("ray.serve")

# Longer than Serve's proxy keeps idle connections (90 s): an idle Envoy connection is
# closed by this end only after that long, which keeps the close-while-sending race rare.
KEEP_ALIVE_S = 90
STARTUP_TIMEOUT_S = 30


class IngressServer:
    def __init__(self, service: ScoringService, host: str, port: int) -> None:
        self._service = service
        self._sock = _reuseport_socket(host, port)  # bind errors surface in the constructor
        self._server = uvicorn.Server(
            uvicorn.Config(
                self._asgi,
                http="httptools",
                interface="asgi3",
                lifespan="off",
                access_log=False,
                proxy_headers=False,
                server_header=False,
                log_config=None,
                log_level="warning",
                timeout_keep_alive=KEEP_ALIVE_S,
                backlog=2048,
            )
        )
        self._server.install_signal_handlers = lambda: None  # not the main thread
        self._thread = threading.Thread(target=self._serve, name=f"ingress-{port}", daemon=True)
        self._thread.start()
        if not _wait_until(lambda: self._server.started or not self._thread.is_alive(), STARTUP_TIMEOUT_S):
            raise RuntimeError(f"the ingress on {host}:{port} did not start")
        if not self._server.started:
            raise RuntimeError(f"the ingress on {host}:{port} failed to start (see the replica log)")
        self.address = (host, port)

    @property
    def serving(self) -> bool:
        return self._thread.is_alive() and not self._server.should_exit

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)

    def _serve(self) -> None:
        try:
            import uvloop  # ray[serve] brings it; a cheaper loop than asyncio's

            loop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._server.serve(sockets=[self._sock]))
        except Exception:
            logger.exception("the ingress server stopped")
        finally:
            loop.close()

    async def _asgi(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        content_length = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                content_length = value.decode("latin-1")
                break
        reply = await self._service.handle(scope["method"], scope["path"], content_length, _body(receive))
        await send_reply(send, reply)


async def send_reply(send, reply: Reply) -> None:
    headers = [
        (b"content-type", reply.content_type.encode()),
        (b"content-length", str(len(reply.body)).encode()),
        *((name.encode(), value.encode()) for name, value in reply.headers),
    ]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


async def _body(receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        if chunk := message.get("body", b""):
            yield chunk
        if not message.get("more_body", False):
            return


def _reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise RuntimeError(f"cannot listen on {host}:{port}: {err}") from err
    return sock


def _wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
