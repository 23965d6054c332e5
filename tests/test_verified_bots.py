"""Verified bots in a real Envoy, for the Wasm filter and the native module (`kind`): the test
serves two key directories over HTTP on 127.0.0.1 (the crawler's JWK set, and one that is not a
JWK set), the filter's poller fetches them (the Wasm service VM, the native module's main thread),
and requests signed by the test (RFC 9421, Ed25519, as a Web Bot Auth crawler signs them) go
through a model that blocks everything.

With `action: allow` the crawler's signed request passes, the decision naming it; with `tag` it is
blocked as any other, the decision naming it. A forged, an expired, an unknown-key, a huge and a
malformed signature are each refused by reason in /stats/prometheus and get the model's decision,
never a 5xx; an unsigned request is decided as without verified bots. The native module's counting
build allocates nothing per signed request.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time

import pytest

from harness import render_envoy
from harness.require import require_build, require_native
from harness.web_bot_auth import DirectoryServer, Signer
from test_envoy import envoy_config, policies
from test_native import NS, logged, with_module  # noqa: F401 (a fixture)

AUTHORITY = "shop.example.com"
BROKEN = b'{"keys": "not a list"}'


@pytest.fixture(scope="module")
def crawler() -> Signer:
    return Signer()


@pytest.fixture(scope="module")
def directories(crawler):
    d = DirectoryServer({"/crawler.json": crawler.jwks(), "/broken.json": BROKEN})
    yield d
    d.close()


def bots_envoy(kind: str, action: str, upstream_port: int, directories_port: int, tls: bool = False) -> dict:
    """A model that blocks everything (`bot` at threshold 0), and `verified_bots` trusting the
    crawler's directory and a broken one on the cluster `bots`, and one on a cluster without a
    host (Envoy answers that callout inside the call that sends it). With `tls`, the TLS listener
    too (the same filter configuration on a second listener)."""
    plugin = render_envoy.plugin_config("enforce", policies(bot=0.0), sample_rate=1.0, text=False)
    plugin["verified_bots"] = {
        "directories": [{"name": "crawler", "cluster": "bots", "path": "/crawler.json"}, {"name": "broken", "cluster": "bots", "path": "/broken.json"},
                        {"name": "nohost", "cluster": "empty"}],
        "action": action,
    }
    cfg = envoy_config(upstream_port, plugin, tls=tls)
    render_envoy.add_static_cluster(cfg, "bots", "127.0.0.1", directories_port)
    cfg["static_resources"]["clusters"].append({"name": "empty", "type": "STATIC", "connect_timeout": "1s",
                                                "load_assignment": {"cluster_name": "empty", "endpoints": []}})
    if kind == "native":
        return render_envoy.to_native(cfg)
    render_envoy.add_service_vm(cfg, plugin)
    return cfg


def get(port: int, headers: dict[str, str], tls: bool = False) -> int:
    if tls:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/products?page=2", headers={"host": AUTHORITY, "user-agent": "ExampleCrawler/1.0", **headers})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def wait_for_keys(running) -> None:
    """Until the poller has handed the crawler's key over (its gauge), then a few flush periods
    for every worker to take it."""
    deadline = time.monotonic() + 30
    while running.metric("edgescore_verified_bots_keys") < 1:
        assert time.monotonic() < deadline, "the crawler's directory was never fetched"
        time.sleep(0.2)
    running.settle()


@pytest.mark.parametrize("action", ["allow", "tag"])
def test_signed_requests_verified_refused_by_reason_never_5xx(kind, action, crawler, directories, upstream, start_envoy):
    running = start_envoy(bots_envoy(kind, action, upstream.port, directories.port), f"bots_{kind}_{action}")
    wait_for_keys(running)
    now = int(time.time())
    forger = Signer()
    cases = [
        ("verified", crawler.headers(AUTHORITY, now - 5, now + 55)),
        ("bad_signature", forger.headers(AUTHORITY, now - 5, now + 55, keyid=crawler.keyid)),
        ("expired", crawler.headers(AUTHORITY, now - 600, now - 300)),
        ("unknown_key", forger.headers(AUTHORITY, now - 5, now + 55)),
        ("too_large", {"signature-input": 'sig1=("@authority");tag="' + "a" * 10_000 + '"', "signature": "sig1=:AAAA:"}),
        ("malformed", {"signature-input": 'sig1=("@authority"', "signature": "sig1=:AAAA:"}),
        ("unsigned", {}),
    ]
    statuses = {name: get(running.port, headers) for name, headers in cases}
    verified = 200 if action == "allow" else 403
    assert statuses == {name: verified if name == "verified" else 403 for name, _ in cases}
    log = logged(running, 0, len(cases))
    decisions = [line.get("edgescore", "") for line in log]
    assert decisions[0].startswith("allow;verified_bot=crawler " if action == "allow" else "block;model=bot")
    assert decisions[0].split(" ")[0].endswith(";verified_bot=crawler")
    assert all(d.startswith("block;model=bot") and "verified_bot" not in d for d in decisions[1:]), decisions
    features = [json.loads(line["edgescore_features"])["features"] for line in log]
    assert [f.get("verified_bot", "absent") for f in features] == ["absent"] * len(cases)  # the example models do not read it
    assert running.metric("edgescore_verified_bots_verified") == 1
    for reason in ("bad_signature", "expired", "unknown_key", "too_large", "malformed"):
        assert running.metric(f'edgescore_verified_bots_refused{{reason="{reason}"}}') == 1, reason
    assert running.metric('edgescore_verified_bots_directory_refused{reason="not_jwks"}') >= 1
    assert running.metric('edgescore_verified_bots_directory_refused{reason="unreachable"}') >= 1
    assert running.metric("edgescore_verified_bots_directories_accepted") >= 1
    assert running.metric("edgescore_errors") == 0


def test_two_listeners_fetch_each_directory_once(kind, crawler, directories, upstream, start_envoy):
    """The same configuration on two listeners: each directory fetched once (one poller for the
    process: the Wasm service VM; the native module's group of configurations), and the crawler
    verified on both listeners."""
    require_build()  # the TLS listener's certificate
    running = start_envoy(bots_envoy(kind, "allow", upstream.port, directories.port, tls=True), f"bots_two_{kind}")
    wait_for_keys(running)
    now = int(time.time())
    assert get(running.port, crawler.headers(AUTHORITY, now - 5, now + 55)) == 200
    tls_port = running.envoy.listener_port(render_envoy.TLS_LISTENER)
    assert get(tls_port, crawler.headers(AUTHORITY, now - 5, now + 55), tls=True) == 200
    assert get(tls_port, {}, tls=True) == 403
    assert running.metric("edgescore_verified_bots_directories_accepted") == 1
    assert running.metric("edgescore_verified_bots_verified") == 2


def test_native_no_allocation_with_signed_requests(with_module, crawler, directories, upstream, start_envoy):
    """The module's counting build: after a warm-up, verified, forged, expired, hostile and
    unsigned requests allocate nothing in the module."""
    require_native()
    with_module()
    native = start_envoy(bots_envoy("native", "allow", upstream.port, directories.port), "bots_alloc")
    wait_for_keys(native)
    forger = Signer()

    def round_(n: int) -> None:
        now = int(time.time())
        variants = [
            crawler.headers(AUTHORITY, now - 5, now + 55),
            forger.headers(AUTHORITY, now - 5, now + 55, keyid=crawler.keyid),
            crawler.headers(AUTHORITY, now - 600, now - 300),
            {"signature-input": 'sig1=("@authority");tag="' + "a" * 10_000 + '"', "signature": "sig1=:AAAA:"},
            {},
        ]
        for i in range(n):
            get(native.port, variants[i % len(variants)])

    gauge = f"{NS}.edgescore.native_allocations"
    round_(100)
    before = native.counter(gauge)
    assert before > 0
    round_(500)
    assert native.counter(gauge) == before
    assert native.metric("edgescore_verified_bots_verified") == 120


def test_schema_and_docs_name_every_field():
    """docs/configuration.schema.json and docs/configuration.md name every field of the
    `verified_bots` section (core/src/config/verified_bots.rs) and of its directories."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    source = (root / "core" / "src" / "config" / "verified_bots.rs").read_text()

    def fields(struct: str) -> set[str]:
        body = source[source.index(f"pub struct {struct}"):]
        return set(re.findall(r"^\s*pub (\w+):", body[:body.index("\n}\n")], re.M))

    schema = json.loads((root / "docs" / "configuration.schema.json").read_text())["properties"]["verified_bots"]
    assert set(schema["properties"]) == fields("VerifiedBotsConfig")
    assert set(schema["properties"]["directories"]["items"]["properties"]) == fields("DirectoryConfig")
    docs = (root / "docs" / "configuration.md").read_text()
    assert not [f for f in fields("VerifiedBotsConfig") if f"`verified_bots.{f}" not in docs]
    assert not [f for f in fields("DirectoryConfig") if f"`verified_bots.directories[].{f}`" not in docs]
