"""The filter's request features in Python: a port of core/src/features/{extract,hash,ua}.rs for
the features models/example/schema.json uses, as a team scoring in a Python ext_authz sidecar
would write it (variant (e) of run.py). `ort_parity.py` checks it against `edgescore features`.

A request is what the filter reads: header pairs in Envoy's order (pseudo-headers included) and
the `request.protocol` property. Values are f32, NaN for missing; categoricals are bucket indices.
"""

from __future__ import annotations

import ctypes
import ipaddress
import math
from pathlib import Path

import numpy as np
import xxhash

# The xxhash package exposes xxh3 with a seed only, but the filter keys xxh3 with a 192-byte
# secret; the xxHash C library inside the package exports the secret variant, so call it.
_lib = ctypes.CDLL(str(next(Path(xxhash.__file__).parent.glob("_xxhash*.so"))))
_lib.XXH3_64bits_withSecret.restype = ctypes.c_uint64
_lib.XXH3_64bits_withSecret.argtypes = (ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)

# (token, family), first match in this order wins (core/src/features/ua.rs FAMILIES).
UA_FAMILIES = (
    (b"headlesschrome", b"headless-chrome"), (b"phantomjs", b"phantomjs"), (b"puppeteer", b"puppeteer"),
    (b"selenium", b"selenium"), (b"curl/", b"curl"), (b"wget/", b"wget"), (b"python-requests", b"python-requests"),
    (b"python-urllib", b"python-urllib"), (b"aiohttp", b"aiohttp"), (b"httpx", b"httpx"), (b"go-http-client", b"go"),
    (b"okhttp", b"okhttp"), (b"java/", b"java"), (b"apache-httpclient", b"java"), (b"node-fetch", b"node"),
    (b"axios", b"node"), (b"scrapy", b"scrapy"), (b"googlebot", b"googlebot"), (b"bingbot", b"bingbot"),
    (b"edg/", b"edge"), (b"opr/", b"opera"), (b"samsungbrowser", b"samsung"), (b"firefox/", b"firefox"),
    (b"chrome/", b"chrome"), (b"crios/", b"chrome"), (b"safari/", b"safari"), (b"bot", b"other-bot"),
    (b"spider", b"other-bot"), (b"crawl", b"other-bot"),
)
PROTOCOLS = {b"HTTP/1.0": 1.0, b"HTTP/1.1": 1.1, b"HTTP/2": 2.0, b"HTTP/2.0": 2.0, b"HTTP/3": 3.0, b"HTTP/3.0": 3.0}
NAN = math.nan


class HashKey:
    """core/src/features/hash.rs: the configured key expanded into an xxh3 secret."""

    def __init__(self, key: bytes):
        self.secret = b"".join(xxhash.xxh3_128_intdigest(key, seed=0x6564_6765_7363_6F72 ^ i).to_bytes(16, "little")
                               for i in range(12))

    def hash(self, value: bytes) -> int:
        return _lib.XXH3_64bits_withSecret(value, len(value), self.secret, len(self.secret))


def bucket(h: int, buckets: int) -> int:
    return (h * buckets) >> 64


def count_items(value: bytes, sep: bytes) -> int:
    """Items between `sep` that hold more than spaces and tabs."""
    return sum(1 for s in value.split(sep) if s.strip(b" \t"))


def parse_decimal(v: bytes) -> float:
    v = v.strip(b" \t\n\r\x0c")  # Rust's trim_ascii: no vertical tab
    if not v or len(v) > 20 or not v.isdigit():
        return NAN
    return float(min(int(v), 2**64 - 1))


def ua_family(ua: bytes) -> bytes:
    lower = ua.lower()  # ASCII only, like eq_ignore_ascii_case
    for token, family in UA_FAMILIES:
        if token in lower:
            return family
    end = min((i for i in (ua.find(b"/"), ua.find(b" ")) if i >= 0), default=len(ua))
    return ua[:end]


def path_prefix(path: bytes) -> bytes:
    i = path.find(b"/", 1)
    return path if i < 0 else path[:i]


def host_is_ip(authority: bytes) -> bool:
    """`v4`, `v4:port`, `[v6]` or `[v6]:port` with a port of digits only (extract.rs ip_literal)."""
    try:
        a = authority.decode()
        if a.startswith("["):
            ip, bracket, port = a[1:].partition("]")
            if not bracket or "%" in ip:  # Rust's Ipv6Addr has no zone ids
                return False
            ipaddress.IPv6Address(ip)
        else:
            ip, colon, digits = a.partition(":")
            port = colon + digits
            ipaddress.IPv4Address(ip)
    except (UnicodeDecodeError, ValueError):
        return False
    return port == "" or (port[0] == ":" and all(c in "0123456789" for c in port[1:]))


class FeatureSchema:
    """The slots of a schema file (its `features`, in order), computed per request."""

    def __init__(self, schema: dict, hash_key: bytes):
        self.key = HashKey(hash_key)
        self.slots = [(f["name"], f.get("buckets", 0)) for f in schema["features"]]
        for name, _ in self.slots:
            if not (name in NUMERIC or name in CATEGORICAL or name.startswith("header_present:")):
                raise ValueError(f"feature {name!r} is not ported to Python")
        self.names = [n for n, _ in self.slots]

    def compute(self, headers: list[tuple[bytes, bytes]], protocol: bytes | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
        method = path = authority = user_agent = content_length = None
        count = size = cookies = languages = 0
        present: set[bytes] = set()
        order = []
        for name, value in headers:
            if name[:1] == b":":
                if name == b":method":
                    method = value
                elif name == b":path":
                    path = value
                elif name == b":authority":
                    authority = value
                continue
            count += 1
            size += len(name) + len(value)
            order.append(name + b"\n")
            present.add(name)
            if name == b"user-agent" and user_agent is None:
                user_agent = value
            elif name == b"cookie":
                cookies += count_items(value, b";")
            elif name == b"accept-language":
                languages += count_items(value, b",")
            elif name == b"content-length" and content_length is None:
                content_length = value
            elif name == b"host" and authority is None:
                authority = value
        query = None
        if path is not None:
            path, q, rest = path.partition(b"?")
            query = rest if q else b""
        numeric = {
            "header_count": count, "header_bytes": size,
            "path_length": NAN if path is None else len(path),
            "path_depth": NAN if path is None else sum(1 for s in path.split(b"/") if s),
            "query_length": NAN if query is None else len(query),
            "query_param_count": NAN if query is None else count_items(query, b"&"),
            "cookie_count": cookies, "accept_language_count": languages,
            "content_length": NAN if content_length is None else parse_decimal(content_length),
            "ua_length": 0 if user_agent is None else len(user_agent),
            "http_protocol": PROTOCOLS.get(protocol, NAN) if protocol is not None else NAN,
            "tls_version": 0.0,  # plaintext: Envoy has no connection.tls_version
            "sni_present": 0.0,
            "host_is_ip": NAN if authority is None else float(host_is_ip(authority)),
        }
        hashed = {
            "method": method,
            "ua_family": None if user_agent is None else ua_family(user_agent),
            "path_prefix": None if path is None else path_prefix(path),
            "header_order": b"".join(order),
        }
        x = np.empty(len(self.slots), dtype=np.float32) if out is None else out
        for i, (name, buckets) in enumerate(self.slots):
            if buckets:
                v = hashed[name]
                x[i] = NAN if v is None else bucket(self.key.hash(v), buckets)
            elif name.startswith("header_present:"):
                x[i] = name.split(":", 1)[1].encode() in present
            else:
                x[i] = numeric[name]
        return x


NUMERIC = ("header_count", "header_bytes", "path_length", "path_depth", "query_length", "query_param_count",
           "cookie_count", "accept_language_count", "content_length", "ua_length", "http_protocol", "tls_version",
           "sni_present", "host_is_ip")
CATEGORICAL = ("method", "ua_family", "path_prefix", "header_order")
