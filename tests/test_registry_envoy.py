"""Hot model updates in a real Envoy from a signed registry (docs/registry.md), for the Wasm
filter and for the native module alike (every test runs for both: `kind`).

A real Envoy with `--concurrency 2` (both workers must switch) loads the filter and, as a
singleton service VM (`envoy.bootstrap.wasm`), the registry poller (the native module polls on
Envoy's main thread itself); the registry is a directory
served on loopback by Python's `http.server`, written by the real `edgescore keygen` and
`publish`. The tests publish v1, then v2 (different trees), check that every request is
answered by v2 with v2's scores (the CLI re-scores the filter's own feature log), then serve
every kind of bad registry — garbage, unsigned, unknown key, bad signature, a rolled-back
manifest or model version, an artifact that is oversized, truncated, altered, invalid, of
another schema or off its golden rows, the registry down — and check that each is refused with
its counter and one log line while v2 keeps serving. Another Envoy requires two signatures and
has floors on the sequence and on bot's version: a manifest that has expired, is valid for too
long or for ever, is below a floor or is signed by one key only is refused the same way, and the
same manifest co-signed (`edgescore cosign`) is taken. Finally Envoy starts with the registry
down: without bootstrap artifacts it applies `on_error`, with them it serves them.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import http.client
import json
import os
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from demo import traffic
from harness import envoyctl, render_envoy
from harness.registry import RegistryServer, signed_envelope, utc
from harness.require import require_build
from harness.running import Running
from models import feature_log
from test_envoy import MODELS, envoy_config, header, scores_of
from test_feature_log import cli_scores

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "models" / "example" / "schema.json"
POLL_SECONDS = 1
WORKERS = 2
REQUESTS = [r for r in traffic.requests() if not r.body]
# What `answered_by` reports for a request without a score header.
NO_MODEL = "(no model)"


def edgescore_bin() -> str:
    return os.environ.get("EDGESCORE_BIN") or str(ROOT / "target" / "release" / "edgescore")


def cli(*args: str | Path) -> str:
    p = subprocess.run([edgescore_bin(), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def wait_for(what: str, pred, timeout: float = 8 * POLL_SECONDS + 10):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# the registry, written by the real CLI (and re-signed by hand for the tampered cases)


@dataclasses.dataclass
class Registry:
    dir: Path
    key: Path
    pub: Path
    other_key: Path
    artifacts: dict[str, Path]
    server: RegistryServer
    # A second trusted key, for co-signatures.
    second_key: Path
    second_pub: Path

    def envelope(self) -> dict:
        return json.loads((self.dir / "manifest.json").read_text())

    def manifest(self) -> dict:
        return json.loads(base64.b64decode(self.envelope()["payload"]))

    def publish(self, artifact: Path, *extra: str) -> None:
        cli("publish", artifact, "--registry", self.dir, "--key", self.key, *extra)

    def signed_envelope(self, manifest: dict, key: Path | None = None) -> bytes:
        """`manifest` in an envelope signed with `key` (default: the team's)."""
        return signed_envelope(manifest, [key or self.key])

    def write_envelope(self, raw: bytes) -> None:
        tmp = self.dir / "manifest.json.next"
        tmp.write_bytes(raw)
        tmp.replace(self.dir / "manifest.json")

    def add_artifact(self, data: bytes) -> tuple[str, str]:
        """Stores `data` content-addressed; (relative path, sha256)."""
        sha = hashlib.sha256(data).hexdigest()
        rel = f"artifacts/{sha}.esm"
        (self.dir / rel).write_bytes(data)
        return rel, sha


@pytest.fixture(scope="module")
def registry(tmp_path_factory, kind):
    tmp = tmp_path_factory.mktemp("registry")
    cli("keygen", "-o", tmp / "team")
    cli("keygen", "-o", tmp / "other")
    cli("keygen", "-o", tmp / "second")
    arts = {m.name: m.artifact for m in MODELS}
    # v2 of `bot`: other trees (the scanner model's, under the name bot) so its scores differ.
    arts["bot-v2"] = tmp / "bot-v2.esm"
    cli("compile", ROOT / "models" / "example" / "scanner.txt", "--schema", SCHEMA, "--name", "bot",
        "--version", "v2", "-o", arts["bot-v2"])
    arts["bot-v3"] = tmp / "bot-v3.esm"
    cli("compile", ROOT / "models" / "example" / "bot.json", "--schema", SCHEMA, "--name", "bot",
        "--version", "v3", "-o", arts["bot-v3"])
    reg_dir = tmp / "registry"
    reg_dir.mkdir()
    server = RegistryServer(reg_dir)
    reg = Registry(reg_dir, tmp / "team.key", tmp / "team.pub", tmp / "other.key", arts, server, tmp / "second.key", tmp / "second.pub")
    for m in MODELS:
        reg.publish(m.artifact)
    yield reg
    server.down()


def plugin(reg: Registry, *, bootstrap: bool = False, **registry_overrides) -> dict:
    """The example policies, the models named (from the registry) and, with `bootstrap`,
    also inline as bootstrap artifacts; the registry section trusts the team's key unless
    `public_keys` overrides it."""
    cfg = render_envoy.plugin_config("enforce", MODELS, sample_rate=1.0, text=False)
    for entry, m in zip(cfg["models"], MODELS):
        entry["name"] = m.name
        if not bootstrap:
            del entry["artifact"]
    keys = registry_overrides.pop("public_keys", [json.loads(reg.pub.read_text())])
    section = dict(poll_seconds=POLL_SECONDS, check_ms=50, max_artifact_bytes=4 << 20)
    section.update(registry_overrides)
    cfg["registry"] = render_envoy.registry_section(keys, **section)
    return cfg


def start(upstream, reg: Registry, workdir: Path, name: str, kind: str, tls: bool = False, **kw) -> Running:
    """An Envoy polling `reg`; with `tls`, envoy.yaml's TLS listener too (the same filter
    configuration on a second listener)."""
    p = plugin(reg, **kw)
    cfg = envoy_config(upstream.port, p, tls=tls)
    render_envoy.add_registry(cfg, p, "127.0.0.1", reg.server.port)
    if kind == "native":
        cfg = render_envoy.to_native(cfg)
    e = envoyctl.Envoy(cfg, workdir, name=name, concurrency=WORKERS, log_level="info")
    try:
        e.start()
    except BaseException:
        e.stop()
        raise
    return Running(e)


@pytest.fixture(scope="module")
def envoy(upstream, registry, tmp_path_factory, kind):
    running = start(upstream, registry, tmp_path_factory.mktemp("envoy-registry"), "registry", kind)
    yield running
    running.envoy.stop()


def swaps_per_update(kind: str, listeners: int = 1) -> int:
    """What one update adds to `swaps` once every worker took it: the Wasm filter counts each root
    context's swap, one per worker and one on Envoy's main thread (docs/registry.md), which may
    come last; the native module counts the workers of each configuration (one per listener)."""
    return WORKERS + 1 if kind == "wasm" else WORKERS * listeners


def stat(running: Running, name: str) -> int:
    return running.counter(f"wasmcustom.edgescore.registry.{name}")


def answered_by(running: Running, upstream, n: int = 12) -> list[str]:
    """The model ids in the score header of `n` requests, each on a fresh connection."""
    upstream.take()
    for i in range(n):
        assert running.send(REQUESTS[i % len(REQUESTS)]).status in (200, 403)
    ids = []
    for rec in upstream.take():
        scores = header(rec, "x-edgescore")
        # No header: a worker without models yet (on_error allow), which `serving` waits out.
        ids.extend(scores_of(scores).keys() if scores is not None else [NO_MODEL])
    return ids


def serving(running: Running, upstream, bot_version: int, timeout: float = 10.0) -> None:
    """Requests on fresh connections (spread over both workers) are all answered by
    bot@`bot_version`. Retried for a moment: the swap counter the tests wait on also counts the
    root context Envoy keeps on its main thread, so one worker may still be a tick behind."""
    deadline = time.monotonic() + timeout
    while True:
        ids = answered_by(running, upstream)
        want = f"bot@{bot_version}"
        if want in ids and all(i != NO_MODEL and i != "bot" and (not i.startswith("bot@") or i == want) for i in ids):
            return
        assert time.monotonic() < deadline, (want, ids)
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------
# publish v1, then v2


def test_both_workers_take_v1_then_v2(envoy, registry, upstream, tmp_path, kind):
    # v1 of each model: every root context swaps once (the counter is process-wide).
    wait_for("both workers to take v1", lambda: stat(envoy, "swaps") >= swaps_per_update(kind))
    serving(envoy, upstream, 1)
    assert stat(envoy, "refused.unreachable") == 0
    before = stat(envoy, "swaps")
    t0 = time.monotonic()
    registry.publish(registry.artifacts["bot-v2"])
    wait_for("both workers to take v2", lambda: stat(envoy, "swaps") >= before + swaps_per_update(kind))
    # A few poll periods plus the workers' check and copy, on a loaded machine too.
    assert time.monotonic() - t0 < 4 * POLL_SECONDS + 5
    serving(envoy, upstream, 2)
    assert stat(envoy, "copy_faults") == 0
    assert stat(envoy, "version.bot") == 2
    # v2 scores like v2's artifact through the CLI: the feature log re-scored.
    # Envoy writes its access log (stdout, a file here) every 200 ms (envoyctl): poll.
    def bot2_rows():
        table, _ = feature_log.load(envoy.envoy.stdout_path.read_text(errors="replace").splitlines())
        table = table[table["score.bot@2"].notna()] if "score.bot@2" in table.columns else table.iloc[0:0]
        return [table] if len(table) >= 6 else None  # a list: a DataFrame has no truth value

    [table] = wait_for("six feature-log rows scored by bot@2", bot2_rows, timeout=10)
    got = cli_scores(registry.artifacts["bot-v2"], table.drop(columns=[c for c in table.columns if c.startswith("score.") and c != "score.bot@2"]), tmp_path)
    import numpy as np

    np.testing.assert_array_equal(got, table["score.bot@2"].to_numpy(dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# refusals: each leaves v2 serving, counts its reason and logs one line


class Tamper:
    """Manifests derived from the last good one, signed by hand; every one has a sequence above
    all before it, so that only the tampering can be the reason for a refusal."""

    def __init__(self, reg: Registry):
        self.reg = reg
        self.good = reg.manifest()
        self.good_envelope = (reg.dir / "manifest.json").read_bytes()
        self.sequence = self.good["sequence"]

    def fresh(self) -> dict:
        self.sequence += 1
        return json.loads(json.dumps(self.good)) | {"sequence": self.sequence}

    def bot(self, m: dict, data: bytes, version: int | None = None) -> dict:
        """A new active `bot` entry for `data`, copied from the current one."""
        cur = next(e for e in m["models"] if e["name"] == "bot" and e["mode"] == "active")
        rel, sha = self.reg.add_artifact(data)
        new = dict(cur, artifact=rel, sha256=sha, size=len(data), version=version or cur["version"] + 1)
        m["models"] = [e for e in m["models"] if e is not cur] + [new]
        return new

    def cases(self):
        reg, v3 = self.reg, self.reg.artifacts["bot-v3"].read_bytes()

        def signed(m: dict, key: Path | None = None) -> dict:
            return json.loads(reg.signed_envelope(m, key))

        def garbage():
            reg.write_envelope(b"<html>502 Bad Gateway</html>")

        def unsigned():
            env = signed(self.fresh())
            env["signatures"] = []
            reg.write_envelope(json.dumps(env).encode())

        def unknown_key():
            reg.write_envelope(reg.signed_envelope(self.fresh(), key=reg.other_key))

        def bad_signature():
            env = signed(self.fresh())
            payload = bytearray(base64.b64decode(env["payload"]))
            payload[payload.index(b'"sequence": ') + 12] ^= 0x01  # another digit: still JSON
            env["payload"] = base64.b64encode(bytes(payload)).decode()
            reg.write_envelope(json.dumps(env).encode())

        def manifest_rollback():
            reg.write_envelope(reg.signed_envelope(self.good | {"sequence": 1}))

        def model_rollback():
            m = self.fresh()
            self.bot(m, v3, version=1)
            reg.write_envelope(reg.signed_envelope(m))

        def with_bot(edit):
            def case():
                m = self.fresh()
                edit(self.bot(m, v3))
                reg.write_envelope(reg.signed_envelope(m))
            return case

        def invalid_artifact():
            m = self.fresh()
            self.bot(m, _flip(v3, len(v3) // 2))
            reg.write_envelope(reg.signed_envelope(m))

        def golden(e):
            e["golden"] = json.loads(json.dumps(e["golden"]))
            e["golden"][0]["y"][0] = 12345.0

        return [
            ("malformed", garbage), ("unsigned", unsigned), ("unknown_key", unknown_key),
            ("bad_signature", bad_signature), ("rollback", manifest_rollback), ("rollback", model_rollback),
            ("oversized", with_bot(lambda e: e.update(size=5 << 20))),
            ("truncated", with_bot(lambda e: (reg.dir / e["artifact"]).write_bytes(v3[:-100]))),
            ("sha_mismatch", with_bot(lambda e: (reg.dir / e["artifact"]).write_bytes(_flip(v3, len(v3) // 2)))),
            ("invalid_artifact", invalid_artifact),
            ("schema_mismatch", with_bot(lambda e: e.update(schema_hash="0" * 64))),
            ("golden_mismatch", with_bot(golden)),
        ]


def _flip(data: bytes, at: int) -> bytes:
    b = bytearray(data)
    b[at] ^= 0x01
    return bytes(b)


def test_every_refusal_leaves_v2_serving(envoy, registry, upstream, kind):
    wait_for("v2", lambda: "bot@2" in answered_by(envoy, upstream, 4))
    # The requests see the workers' swaps; the main thread's may still be on its way.
    wait_for("every root context to take v2", lambda: stat(envoy, "swaps") % swaps_per_update(kind) == 0)
    tamper = Tamper(registry)
    swaps = stat(envoy, "swaps")
    try:
        for reason, case in tamper.cases():
            before = stat(envoy, f"refused.{reason}")
            case()
            wait_for(f"refused.{reason}", lambda: stat(envoy, f"refused.{reason}") > before)
            serving(envoy, upstream, 2)
            # Envoy writes its log file every 200 ms (envoyctl): the line may trail the counter.
            wait_for(f"the log's {reason} line", lambda: f": {reason}: " in envoy.envoy.log_path.read_text(errors="replace"), timeout=5)
        assert stat(envoy, "swaps") == swaps
        # The registry down: refused as unreachable, v2 keeps serving.
        before = stat(envoy, "refused.unreachable")
        registry.server.down()
        try:
            wait_for("refused.unreachable", lambda: stat(envoy, "refused.unreachable") > before)
            serving(envoy, upstream, 2)
            wait_for("seconds since the last good poll", lambda: stat(envoy, "seconds_since_good_poll") >= 1)
        finally:
            registry.server.up()
        # Back up, the next publish through the CLI (over the last, refused manifest) is taken.
        registry.publish(registry.artifacts["bot-v3"])
        version = next(e["version"] for e in registry.manifest()["models"] if e["name"] == "bot")
        wait_for(f"v{version}", lambda: stat(envoy, "swaps") >= swaps + swaps_per_update(kind))
        serving(envoy, upstream, version)
    finally:
        registry.write_envelope(tamper.good_envelope)


# ---------------------------------------------------------------------------------------------
# freshness, floors and k-of-n signatures


def test_expiry_floors_and_two_signatures(upstream, registry, tmp_path, kind):
    """A poller with `threshold` 2 of two keys, `min_sequence` and `min_versions` at what the
    registry serves: each kind of stale, replayed or under-signed manifest is refused with its
    counter and log line, the models it serves stay; the same manifest co-signed is taken."""
    both = [registry.key, registry.second_key]
    registry.publish(registry.artifacts["bot-v2"], "--key", str(registry.second_key))
    good = registry.manifest()
    good_envelope = (registry.dir / "manifest.json").read_bytes()
    assert len(registry.envelope()["signatures"]) == 2
    bot = next(e["version"] for e in good["models"] if e["name"] == "bot" and e["mode"] == "active")
    assert bot >= 2, good
    pubs = [json.loads(p.read_text()) for p in (registry.pub, registry.second_pub)]
    running = start(upstream, registry, tmp_path / "floors", "floors", kind, public_keys=pubs, threshold=2,
                    min_sequence=good["sequence"], min_versions={"bot": bot})
    try:
        wait_for("both workers to take the registry's models", lambda: stat(running, "swaps") >= swaps_per_update(kind))
        serving(running, upstream, bot)
        swaps = stat(running, "swaps")
        sequence = good["sequence"]

        def fresh(**fields) -> dict:
            nonlocal sequence
            sequence += 1
            return json.loads(json.dumps(good)) | {"sequence": sequence} | fields

        def bot_version(version: int) -> dict:
            m = fresh()
            next(e for e in m["models"] if e["name"] == "bot" and e["mode"] == "active")["version"] = version
            return m

        now = time.time()
        forever = fresh()
        del forever["expires"]
        bot_below = bot_version(bot - 1)
        cases = [
            ("expired", signed_envelope(fresh(published_at=utc(now - 2 * 86400), expires=utc(now - 60)), both)),
            ("validity_too_long", signed_envelope(fresh(published_at=utc(now), expires=utc(now + 32 * 86400)), both)),
            ("validity_too_long", signed_envelope(forever, both)),
            ("below_minimum", signed_envelope(good | {"sequence": good["sequence"] - 1}, both)),
            ("below_minimum", signed_envelope(bot_below, both)),
            ("too_few_signatures", signed_envelope(fresh(), [registry.key])),
        ]
        def logged(reason: str) -> int:
            return running.envoy.log_path.read_text(errors="replace").count(f": {reason}: ")

        for reason, raw in cases:
            before, lines = stat(running, f"refused.{reason}"), logged(reason)
            registry.write_envelope(raw)
            wait_for(f"refused.{reason}", lambda: stat(running, f"refused.{reason}") > before)
            serving(running, upstream, bot)
            # Envoy writes its log file every 200 ms (envoyctl): the line may trail the counter.
            wait_for(f"the log's {reason} line", lambda: logged(reason) > lines, timeout=5)
        assert stat(running, "swaps") == swaps, "a refused manifest changed the served models"
        # Of these, only the manifest whose bot entry is below its floor verified (the entry
        # refused, the served bot kept).
        assert stat(running, "manifest_sequence") == bot_below["sequence"]
        # The last, under-signed manifest co-signed by the second key: taken (same models).
        cli("cosign", registry.dir, "--key", registry.second_key)
        wait_for("the co-signed manifest", lambda: stat(running, "manifest_sequence") == sequence)
        serving(running, upstream, bot)
        assert stat(running, "swaps") == swaps
    finally:
        running.envoy.stop()
        registry.write_envelope(good_envelope)


# ---------------------------------------------------------------------------------------------
# start-up with the registry down


def test_start_with_the_registry_down(upstream, registry, tmp_path, kind):
    registry.server.down()
    try:
        bare = start(upstream, registry, tmp_path / "bare", "bare", kind)
        try:
            # No bootstrap artifact: the configured on_error (allow), counted as errors.
            upstream.take()
            for r in REQUESTS[:4]:
                assert bare.send(r).status == 200
            assert all(header(rec, "x-edgescore") is None for rec in upstream.take())
            assert bare.counter("wasmcustom.edgescore.errors") >= 4
            wait_for("refused.unreachable", lambda: stat(bare, "refused.unreachable") >= 1)
        finally:
            bare.envoy.stop()
        boot = start(upstream, registry, tmp_path / "boot", "boot", kind, bootstrap=True)
        try:
            ids = answered_by(boot, upstream, 4)
            assert ids and NO_MODEL not in ids and all("@" not in i or not i.split("@")[1].isdigit() for i in ids), ids
            assert any(i.startswith("bot") for i in ids)
        finally:
            boot.envoy.stop()
    finally:
        registry.server.up()


def tls_answered_by(running: Running, upstream, n: int = 4) -> list[str]:
    """`answered_by` over the TLS listener."""
    port = running.envoy.listener_port(render_envoy.TLS_LISTENER)
    upstream.take()
    for r in REQUESTS[:n]:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl._create_unverified_context())
        try:
            conn.request(r.method, r.path, headers=dict(r.header_list(f"127.0.0.1:{port}")))
            assert conn.getresponse().status in (200, 403)
        finally:
            conn.close()
    return [i for rec in upstream.take() for i in scores_of(header(rec, "x-edgescore") or "").keys()]


def test_two_listeners_poll_once(upstream, registry, tmp_path, kind):
    """The same configuration on two listeners: each manifest is accepted once (one poller for
    the process: the Wasm service VM; the native module's group of configurations), and both
    listeners' workers take it."""
    require_build()  # the TLS listener's certificate
    running = start(upstream, registry, tmp_path / "two", "two", kind, tls=True)
    try:
        # Every worker of both listeners' configurations takes the served set (the Wasm filter's
        # one configuration per worker serves both listeners).
        listeners = 2 if kind == "native" else 1
        wait_for("every worker to take the registry's models", lambda: stat(running, "swaps") >= swaps_per_update(kind, listeners))
        bot = next(e["version"] for e in registry.manifest()["models"] if e["name"] == "bot" and e["mode"] == "active")
        serving(running, upstream, bot)
        assert stat(running, "manifests_accepted") == 1
        swaps = stat(running, "swaps")
        registry.publish(registry.artifacts["bot-v3"])
        bot = next(e["version"] for e in registry.manifest()["models"] if e["name"] == "bot" and e["mode"] == "active")
        wait_for(f"v{bot} on every worker", lambda: stat(running, "swaps") >= swaps + swaps_per_update(kind, listeners))
        serving(running, upstream, bot)
        wait_for(f"v{bot} over TLS", lambda: f"bot@{bot}" in tls_answered_by(running, upstream))
        assert stat(running, "manifests_accepted") == 2
        assert stat(running, "models_accepted") == len(MODELS) + 1
    finally:
        running.envoy.stop()


# ---------------------------------------------------------------------------------------------
# the configuration section


def test_registry_section_matches_the_docs_and_schema():
    """Every field of the filter's RegistryConfig is in the JSON Schema and documented, and the
    plugin JSON the root envoy.yaml ships is valid by the schema."""
    import re

    import jsonschema

    source = (ROOT / "core" / "src" / "config" / "registry.rs").read_text()
    body = source[source.index("pub struct RegistryConfig"):]
    fields = set(re.findall(r"^\s*pub (\w+):", body[:body.index("\n}\n")], re.M))
    schema = json.loads((ROOT / "docs" / "configuration.schema.json").read_text())
    assert set(schema["properties"]["registry"]["properties"]) == fields
    docs = (ROOT / "docs" / "configuration.md").read_text()
    assert not [f for f in fields if f"`registry.{f}`" not in docs]
    validator = jsonschema.Draft202012Validator(schema)
    shipped = json.loads(render_envoy.wasm_filter(render_envoy.load_config(registry=True))["configuration"]["value"])
    assert "registry" in shipped and all("artifact" not in m for m in shipped["models"])
    assert not [e.message for e in validator.iter_errors(shipped)]
    assert not validator.is_valid(dict(shipped, registry=dict(shipped["registry"], poll=5)))
