"""Clients with network stacks of their own, for the tour's loop (demo/loop.py): Chromium, with
Chrome's TLS stack and its own headers, and the same headers replayed byte for byte through
Python's TLS stack, so that the two differ in their TLS client hello alone.

Chromium runs headless on a throwaway profile, one navigation per run (most runs also ask for
the favicon: the request races Chromium's exit), over HTTP/1.1 (`--disable-http2`, as the replay speaks), with `shop.example.com`
resolved to the listener's loopback address. Every process it starts is stopped by its
process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
from pathlib import Path

from harness.client import SITE, Request

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-http2",               # HTTP/1.1, as the Python replay speaks
    "--ignore-certificate-errors",   # the listener's certificate is self-signed
)
CHROMIUM_TIMEOUT_S = 60


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium_get(address: tuple[str, int], path: str, user_agent: str) -> None:
    """One navigation of Chromium to https://shop.example.com:PORT/path at `address`."""
    binary = chromium_binary()
    if binary is None:
        raise RuntimeError("no chromium (Debian's chromium package: `make system-tools` installs it)")
    host, port = address
    with tempfile.TemporaryDirectory(prefix="edgescore-chromium-") as profile:
        proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--host-resolver-rules=MAP {SITE} {host}",
             f"--user-agent={user_agent}", "--dump-dom", f"https://{SITE}:{port}{path}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = proc.wait(timeout=CHROMIUM_TIMEOUT_S)
        finally:
            try:  # its renderer and utility processes share its process group
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        if rc != 0:
            raise RuntimeError(f"chromium exited with {rc} fetching {path}")


class _HeaderCapture:
    """A TLS server on a free loopback port that records each request's head, in order as
    written, and answers it with an empty page on a closed connection."""

    def __init__(self, cert: Path, key: Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.heads: list[tuple[str, list[tuple[str, str]]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            try:
                conn.settimeout(5)
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    data = b""
                    while b"\r\n\r\n" not in data and len(data) < 65536:
                        chunk = tls.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
                    if len(lines[0].split(" ")) == 3:
                        path = lines[0].split(" ")[1]
                        self.heads.append((path, [tuple(ln.split(": ", 1)) for ln in lines[1:] if ": " in ln]))
                    tls.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            except (OSError, ssl.SSLError):
                pass  # a connection Chromium gave up on (a preconnect) teaches nothing

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def chromium_requests(user_agent: str, cert: Path, key: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """What Chromium sends for a navigation (and the favicon, if it asks for it): each request's
    path (`{page}` for the navigation's) and its headers, in order, as written on the wire,
    with the page's URL as `{page}` and the site's `host:port` as `{origin}` (the `Host` and
    `Referer` values): `replay` puts in the listener's, for any page."""
    capture = _HeaderCapture(cert, key)
    page = "/edgescore-capture"
    try:
        chromium_get(("127.0.0.1", capture.port), page, user_agent)
        heads = list(capture.heads)
    finally:
        capture.close()
    if not any(p == page for p, _ in heads):
        raise RuntimeError(f"chromium's navigation did not reach the capturing server ({len(heads)} requests did)")
    url, origin = f"https://{SITE}:{capture.port}{page}", f"{SITE}:{capture.port}"
    return [("{page}" if p == page else p, [(k, v.replace(url, "{page}").replace(origin, "{origin}")) for k, v in h])
            for p, h in heads]


def replay(captured: list[tuple[str, list[tuple[str, str]]]], page: str, port: int, name: str, kind: str) -> list[Request]:
    """The captured requests, for a navigation to `page` on `port`, as harness.client requests:
    Chromium's headers, byte for byte but for the page and port in `Host` and `Referer`."""
    origin = f"{SITE}:{port}"
    url = f"https://{origin}{page}"
    return [Request(f"{name} {p}", kind, "GET", page if p == "{page}" else p,
                    [(k, v.replace("{page}", url).replace("{origin}", origin)) for k, v in h])
            for p, h in captured]
