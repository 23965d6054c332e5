"""The TLS fingerprint features in a real Envoy, for the Wasm filter and the native module
(`kind`): envoy.yaml's TLS listener (tls_inspector with JA3 and JA4) and the connection
manager's early header mutation, which writes `x-edgescore-ja4` and `x-edgescore-ja3` before
edgescore runs.

Requests over TLS from two TLS stacks (Python's ssl, curl) give two JA4s. Each request's logged
feature vector is checked against the fingerprints Envoy's access log reports for it
(`%TLS_JA4_FINGERPRINT%`, `%TLS_JA3_FINGERPRINT%`): the counts read here from the string, the
hashed categories as the CLI computes them from those strings (the core's extraction, not the
filter's run). A forged header is overwritten over TLS, and ignored over plain HTTP (where Envoy
writes none and the filter reads none), where every feature is missing. The model also reads
`tls_ua_consistent` by its own UA fingerprint table (`compile --ua-fingerprints`): 1 for curl's
handshake under curl's user agent, 0 under Chrome's, missing for a family the table does not
list and on plain HTTP.
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from harness import render_envoy
from harness.require import missing, module, require_build, require_native
from models import feature_log
from test_envoy import envoy_config
from test_feature_log import edgescore_bin
from test_native import module_build

# The TLS features and the buckets the test model declares for the categorical ones (0: numeric).
TLS_FEATURES = {"tls_ja4": 4096, "tls_ja4_a": 1024, "tls_ja4_ciphers": 0, "tls_ja4_extensions": 0, "tls_ja4_alpn": 64, "tls_ja3": 4096}
# Chrome's, as a client would forge it.
FORGED_JA4 = "t13d1516h2_8daaf6152771_d8a2da3f94cd"
FORGED_JA3 = "e7d705a3286e19ea42f587b344ee6865"
FORGED = {"x-edgescore-ja4": FORGED_JA4, "x-edgescore-ja3": FORGED_JA3}
# The model's UA fingerprint table: curl to 127.0.0.1 speaks TLS 1.3 over TCP (SNI or not, its
# own cipher and extension set), Chrome's set is the one its JA4 names.
UA_TABLE = {"families": {"curl": ["t13i*", "t13d*"], "chrome": ["t13d1516h2_8daaf6152771_*"]}}
CHROME_UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/143.0.0.0 Safari/537.36"
NS = render_envoy.NATIVE_STATS_PREFIX


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A small XGBoost model over every TLS feature and `tls_ua_consistent`, compiled with their
    schema and `UA_TABLE`."""
    xgb = module("xgboost")
    if not Path(edgescore_bin()).is_file():
        missing(f"the CLI is not built: {edgescore_bin()}")
    out = tmp_path_factory.mktemp("tls-model")
    rng = np.random.default_rng(7)
    buckets = {**TLS_FEATURES, "tls_ua_consistent": 0}
    names = list(buckets)
    X = np.column_stack([rng.integers(0, b or 100, 200) for b in buckets.values()]).astype(np.float32)
    y = (X[:, 2] > 20).astype(np.float32)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 2, "seed": 7, "nthread": 1},
                        xgb.DMatrix(X, label=y, feature_names=names), num_boost_round=3)
    booster.save_model(str(out / "tls.json"))
    (out / "schema.json").write_text(json.dumps(feature_log.schema_for(names, buckets)))
    (out / "ua_fingerprints.json").write_text(json.dumps(UA_TABLE))
    esm = out / "tls.esm"
    subprocess.run([edgescore_bin(), "compile", str(out / "tls.json"), "--schema", str(out / "schema.json"),
                    "--ua-fingerprints", str(out / "ua_fingerprints.json"), "--name", "tls", "--version", "t1", "-o", str(esm)],
                   check=True, capture_output=True)
    return esm


def tls_config(kind: str, model: Path, upstream_port: int) -> dict:
    """Both listeners, the model over every TLS feature (never blocking), every request logged."""
    plugin = render_envoy.plugin_config("enforce", (), sample_rate=1.0, text=False)
    plugin["models"] = [{"artifact": base64.b64encode(model.read_bytes()).decode(), "threshold": 1.5, "action": "block"}]
    cfg = envoy_config(upstream_port, plugin, tls=True)
    return render_envoy.to_native(cfg) if kind == "native" else cfg


@pytest.fixture(scope="module")
def running(kind, model, upstream, start_envoy):
    require_build()
    return start_envoy(tls_config(kind, model, upstream.port), f"tls_{kind}")


def python_get(port: int, path: str, headers: dict[str, str], tls: bool) -> int:
    """A GET with Python's http.client (over its ssl module with `tls`)."""
    if tls:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl._create_unverified_context())
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def curl_get(port: int, path: str, headers: dict[str, str]) -> int:
    curl = shutil.which("curl")
    if curl is None:
        missing("curl is not installed")
    args = [curl, "-sk", "-o", "/dev/null", "-w", "%{http_code}", f"https://127.0.0.1:{port}{path}"]
    for k, v in headers.items():
        args += ["-H", f"{k}: {v}"]
    return int(subprocess.run(args, check=True, capture_output=True, text=True, timeout=20).stdout)


def logged(running, paths: list[str]) -> dict[str, tuple[dict, dict]]:
    """Per path: (the feature-log object, the access-log record)."""
    deadline = time.monotonic() + 10  # Envoy flushes its access log about once a second
    while True:
        running.envoy.access_log()  # flushes our side of the file
        found = {}
        for line in running.envoy.stdout_path.read_text(errors="replace").splitlines():
            obj, record = feature_log.parse_record(line)
            if obj is not None and record.get("path") in paths:
                found[record["path"]] = (obj, record)
        if len(found) == len(paths):
            return found
        assert time.monotonic() < deadline, f"the access log has feature lines for {sorted(found)} of {paths}"
        time.sleep(0.2)


def core_features(ja4: str | None, ja3: str | None, tmp_path: Path) -> dict[str, float | None]:
    """What the core computes for a request over TLS whose fingerprint headers hold `ja4` and
    `ja3` (`edgescore features`, the CLI's run of the core's extraction)."""
    headers = [[k, v] for k, v in (("x-edgescore-ja4", ja4), ("x-edgescore-ja3", ja3)) if v is not None]
    src, out = tmp_path / "req.jsonl", tmp_path / "features.csv"
    request = {"headers": [[":method", "GET"], [":path", "/"], *headers], "properties": {"connection.tls_version": "TLSv1.3"}}
    src.write_text(json.dumps(request) + "\n")
    (tmp_path / "schema.json").write_text(json.dumps(feature_log.schema_for(list(TLS_FEATURES), TLS_FEATURES)))
    subprocess.run([edgescore_bin(), "features", "--schema", str(tmp_path / "schema.json"), "--hash-key", render_envoy.hash_key(),
                    "--requests", str(src), "-o", str(out)], check=True, capture_output=True)
    names, values = out.read_text().splitlines()[:2]
    return {n: (float(v) if v else None) for n, v in zip(names.split(","), values.split(","))}


def as_float(v) -> float | None:
    return None if v is None else float(v)


def forwarded(upstream, path: str) -> list[tuple[str, str]]:
    """The fingerprint headers the upstream received with the request for `path`."""
    with upstream.lock:
        recs = [r for r in upstream.records if r["path"] == path]
    assert len(recs) == 1, (path, len(recs))
    return [(k.lower(), v) for k, v in recs[0]["headers"] if k.lower() in ("x-edgescore-ja4", "x-edgescore-ja3")]


def test_tls_clients_get_their_own_fingerprints_forged_or_not(running, kind, upstream, tmp_path):
    tls_port = running.envoy.listener_port(render_envoy.TLS_LISTENER)
    sent = {
        f"/{kind}/python": python_get(tls_port, f"/{kind}/python", {}, tls=True),
        f"/{kind}/python-forged": python_get(tls_port, f"/{kind}/python-forged", FORGED, tls=True),
        f"/{kind}/curl": curl_get(tls_port, f"/{kind}/curl", {}),
        f"/{kind}/curl-forged": curl_get(tls_port, f"/{kind}/curl-forged", FORGED),
    }
    assert set(sent.values()) == {200}, sent
    log = logged(running, list(sent))
    ja4 = {path: record["ja4"] for path, (_, record) in log.items()}
    # Two TLS stacks, two fingerprints; the same stack forging a header keeps its own.
    assert ja4[f"/{kind}/python"] != ja4[f"/{kind}/curl"], ja4
    assert ja4[f"/{kind}/python"] == ja4[f"/{kind}/python-forged"] and ja4[f"/{kind}/curl"] == ja4[f"/{kind}/curl-forged"], ja4
    assert FORGED_JA4 not in ja4.values()
    for path, (obj, record) in log.items():
        got = {name: as_float(obj["features"][name]) for name in TLS_FEATURES}
        fingerprint, ja3 = record["ja4"], record["ja3"]
        assert len(fingerprint) == 36 and len(ja3) == 32, record
        # The JA4's counts are its characters 5-6 and 7-8 (FoxIO's JA4 spec).
        assert (got["tls_ja4_ciphers"], got["tls_ja4_extensions"]) == (float(fingerprint[4:6]), float(fingerprint[6:8])), (path, got)
        assert got == core_features(fingerprint, ja3, tmp_path), (path, fingerprint, ja3)
        assert None not in got.values(), (path, got)
    # What tells the two stacks apart: curl offers ALPN h2 (Python none: `00`) and more ciphers.
    py, curl = (log[f"/{kind}/{c}"][0]["features"] for c in ("python", "curl"))
    assert py["tls_ja4_a"] != curl["tls_ja4_a"]
    # Envoy's one copy of each reached the upstream, not the forged one.
    for path, (_, record) in log.items():
        assert forwarded(upstream, path) == [("x-edgescore-ja4", record["ja4"]), ("x-edgescore-ja3", record["ja3"])], path


def test_plain_http_has_no_fingerprint_forged_or_not(running, kind, upstream, tmp_path):
    paths = {f"/{kind}/plain": {}, f"/{kind}/plain-forged": FORGED}
    for path, headers in paths.items():
        assert python_get(running.port, path, headers, tls=False) == 200
    log = logged(running, list(paths))
    missing_values = core_features(None, None, tmp_path)
    assert set(missing_values.values()) == {None}
    for path, (obj, record) in log.items():
        headers = paths[path]
        got = {name: as_float(obj["features"][name]) for name in TLS_FEATURES}
        assert got == missing_values, (path, got)
        assert record["ja4"] in (None, "-"), record
        # Envoy wrote nothing: the upstream gets what the client sent, which the filter ignored.
        assert forwarded(upstream, path) == [(k, v) for k, v in headers.items()], path


def core_consistency(model: Path, ua: str | None, ja4: str | None, tls: bool, tmp_path: Path) -> float | None:
    """`tls_ua_consistent` as the core computes it for such a request, by the artifact's own
    table (`edgescore features --schema MODEL.esm`)."""
    headers = [[k, v] for k, v in (("user-agent", ua), ("x-edgescore-ja4", ja4)) if v is not None]
    src, out = tmp_path / "ua-req.jsonl", tmp_path / "ua-features.csv"
    request = {"headers": [[":method", "GET"], [":path", "/"], *headers], "properties": {"connection.tls_version": "TLSv1.3" if tls else ""}}
    src.write_text(json.dumps(request) + "\n")
    subprocess.run([edgescore_bin(), "features", "--schema", str(model), "--hash-key", render_envoy.hash_key(),
                    "--requests", str(src), "-o", str(out)], check=True, capture_output=True)
    names, values = out.read_text().splitlines()[:2]
    value = dict(zip(names.split(","), values.split(",")))["tls_ua_consistent"]
    return float(value) if value else None


def test_the_ua_fingerprint_table_travels_in_the_model(running, kind, model, tmp_path):
    tls_port = running.envoy.listener_port(render_envoy.TLS_LISTENER)
    sent = {
        f"/{kind}/ua-curl": ({}, "tls"),
        f"/{kind}/ua-curl-as-chrome": ({"user-agent": CHROME_UA}, "tls"),
        f"/{kind}/ua-python": ({"user-agent": "python-requests/2.32.3"}, "tls"),
        f"/{kind}/ua-plain-chrome": ({"user-agent": CHROME_UA, **FORGED}, "plain"),
    }
    for path, (headers, how) in sent.items():
        if "curl" in path:
            assert curl_get(tls_port, path, headers) == 200
        else:
            assert python_get(tls_port if how == "tls" else running.port, path, headers, tls=how == "tls") == 200
    log = logged(running, list(sent))
    got = {path: as_float(obj["features"]["tls_ua_consistent"]) for path, (obj, _) in log.items()}
    assert got == {f"/{kind}/ua-curl": 1.0, f"/{kind}/ua-curl-as-chrome": 0.0, f"/{kind}/ua-python": None, f"/{kind}/ua-plain-chrome": None}, got
    # The same by the core, from the artifact's own table and the request as Envoy logged it.
    for path, (obj, record) in log.items():
        headers, how = sent[path]
        ua = headers.get("user-agent") or record.get("user_agent")
        ja4 = record["ja4"] if how == "tls" else FORGED_JA4
        assert got[path] == core_consistency(model, ua, ja4, how == "tls", tmp_path), (path, ja4, ua)


def test_native_module_allocates_nothing_with_fingerprints(model, upstream, start_envoy, monkeypatch):
    """The native module's counting test build (test_native.py's): after a warm-up, requests over
    TLS (Python's and curl's fingerprints) and over plain HTTP, forged or not, make no allocation
    in the module. (The Wasm filter's count: tests/tests/filter_alloc.rs.)"""
    require_native()
    monkeypatch.setenv("ENVOY_DYNAMIC_MODULES_SEARCH_PATH", str(module_build()))
    native = start_envoy(tls_config("native", model, upstream.port), "tls_alloc")
    tls_port = native.envoy.listener_port(render_envoy.TLS_LISTENER)

    def round_(n: int) -> None:
        for i in range(n):
            headers = FORGED if i % 2 else {}
            if i % 25 == 0:
                assert curl_get(tls_port, f"/alloc/{i}", headers) == 200
            else:
                assert python_get(tls_port if i % 3 else native.port, f"/alloc/{i}", headers, tls=bool(i % 3)) == 200

    gauge = f"{NS}.edgescore.native_allocations"
    round_(200)
    before = native.counter(gauge)
    assert before > 0  # the counter counts (the configuration's own allocations)
    round_(600)
    assert native.counter(gauge) == before
