"""Writes fuzz/seeds-features/: the demo's requests (demo/traffic.py) as the `features` target's
raw form: byte 1, u32 length, the header map as Envoy hands it to the filter (pseudo-headers
first, `host` become `:authority`), then the connection properties as a map.

    python3 fuzz/seed_features.py      # from the repository root
"""

import pathlib
import struct
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from demo.traffic import requests  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parent / "seeds-features"

# (protocol, TLS version, SNI, source address): plaintext HTTP/1.1, TLS over IPv6, HTTP/2 over a
# dual-stack listener; the demo's requests take them in turn.
CONNECTIONS = [
    [("request.protocol", "HTTP/1.1"), ("source.address", "127.0.0.1:41234")],
    [("request.protocol", "HTTP/1.1"), ("connection.tls_version", "TLSv1.3"),
     ("connection.requested_server_name", "shop.example.com"), ("source.address", "[2001:db8:1:2::5]:443")],
    [("request.protocol", "HTTP/2"), ("connection.tls_version", "TLSv1.2"), ("source.address", "[::ffff:192.0.2.9]:5555")],
]


def header_map(pairs: list[tuple[str, str]]) -> bytes:
    raw = [(n.encode(), v.encode()) for n, v in pairs]
    out = struct.pack("<I", len(raw))
    out += b"".join(struct.pack("<II", len(n), len(v)) for n, v in raw)
    return out + b"".join(n + b"\0" + v + b"\0" for n, v in raw)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for i, req in enumerate(requests()):
        headers = req.header_list("192.0.2.10:10000")
        authority = next((v for k, v in headers if k == "host"), None)
        pseudo = [(":authority", authority)] if authority is not None else []
        pseudo += [(":path", req.path), (":method", req.method), (":scheme", "http")]
        rest = [(k, str(len(req.body)) if v is None else v) for k, v in headers if k != "host"]
        hm = header_map(pseudo + rest)
        props = header_map(CONNECTIONS[i % len(CONNECTIONS)])
        name = req.name.replace(" ", "_").replace(".", "").replace(",", "")
        (OUT / f"{i:02}_{name}").write_bytes(b"\x01" + struct.pack("<I", len(hm)) + hm + props)


if __name__ == "__main__":
    main()
