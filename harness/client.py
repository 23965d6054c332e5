"""HTTP/1.1 requests sent with exactly the headers listed, in order, and nothing added.

The header order matters (`header_order` is a model feature), so requests go out with
http.client with no automatic Host or Accept-Encoding. The demo's requests (demo/traffic.py),
the tests and the load benches all send through `send`.
"""

from __future__ import annotations

import http.client
import ssl
from dataclasses import dataclass, field

SITE = "shop.example.com"  # the host a `host` header of None names: the one browsers and most clients name
ADDRESS = "{address}"  # placeholder: the IP literal and port connected to


@dataclass
class Request:
    name: str
    kind: str  # what the request imitates ("browser", "bot", …): the truth a test or the demo checks against
    method: str
    path: str
    headers: list[tuple[str, str]]  # in wire order; "host" is filled in if None
    body: bytes = b""
    note: str = field(default="")

    def header_list(self, address: str) -> list[tuple[str, str]]:
        """The headers to send: a `host` of None is the site's name, `ADDRESS` the address
        connected to (`ip:port`, as a scanner sweeping addresses sends it)."""
        def value(k: str, v: str | None) -> str:
            if k == "host" and v is None:
                return SITE
            return address if v == ADDRESS else v
        return [(k, value(k, v)) for k, v in self.headers]


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class _TlsConnection(http.client.HTTPSConnection):
    """HTTPS to an address, naming SITE in the TLS client hello (SNI), as a client of the site
    does; the server's certificate is not checked (the demo's and the tests' are self-signed)."""

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=SITE)


def _connection(host: str, port: int, timeout: float, tls: bool, source: str | None) -> http.client.HTTPConnection:
    source_address = (source, 0) if source else None
    if not tls:
        return http.client.HTTPConnection(host, port, timeout=timeout, source_address=source_address)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return _TlsConnection(host, port, timeout=timeout, source_address=source_address, context=context)


def send(host: str, port: int, req: Request, timeout: float = 10.0, *, tls: bool = False,
         source: str | None = None) -> Response:
    """Sends `req` on a fresh connection with exactly its headers, in order: over TLS (Python's
    own TLS stack, SNI `SITE`) with `tls`, from the loopback address `source` if given (the
    filter's per-client counts key on the client's address)."""
    conn = _connection(host, port, timeout, tls, source)
    try:
        conn.putrequest(req.method, req.path, skip_host=True, skip_accept_encoding=True)
        for k, v in req.header_list(f"{host}:{port}"):
            if k == "content-length" and v is None:
                v = str(len(req.body))
            conn.putheader(k, v)
        if req.body and not any(k == "content-length" for k, _ in req.headers):
            conn.putheader("content-length", str(len(req.body)))
        conn.endheaders(req.body or None)
        r = conn.getresponse()
        body = r.read()
        return Response(r.status, [(k.lower(), v) for k, v in r.getheaders()], body)
    finally:
        conn.close()
