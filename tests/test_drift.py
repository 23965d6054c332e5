"""The drift watch ("is my model stale", docs/operators.md) end to end, in real Envoy.

The example `bot` model is compiled with a drift reference (`edgescore compile --reference`)
made from the training distribution (models/traffic.py, the generator the example models were
trained on) as the filter itself computes its features: a first Envoy logs every request's
feature vector (the feature log), and those rows are the reference.

- Both builds count: the Wasm filter and the native module, given the same traffic, export the
  same bin counts, each equal to the count of the logged feature vectors (and scores) in each
  reference bin, and the reference shares as gauges. The native module counts without
  allocating (its test build counts every allocation).
- A real Prometheus runs the shipped recording rules and alerts
  (deploy/prometheus/edgescore.rules.yml; a rendered copy with a 60 s window and a 3 s `for:`,
  the expressions as shipped) over the Wasm filter's metrics: traffic from the training
  distribution keeps every input's PSI below 0.1 and EdgescoreFeatureDrift silent; the same
  traffic with one input shifted (path_length: slashes added at the end of the path, which no
  other feature sees) raises that input's PSI above 0.25 and fires the alert for it alone.
  In both phases each recorded PSI is the formula over the recorded shares, and the recorded
  reference shares are the artifact's. The dashboard's drift panels return data from that
  Prometheus.

Envoy and Prometheus bind 127.0.0.1 (free ports) and are stopped by PID. Needs `make build` and
Debian's prometheus (`make system-tools`).
"""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness import client, render_envoy
from harness.prometheus import Prometheus, finite
from harness.require import require_native
from models import traffic as training
from test_envoy import envoy_config
from test_native import native_config, with_module  # noqa: F401 (a fixture)
from test_prometheus import DASHBOARD, concrete, dashboard_queries, scrape_config, wait_for
from test_registry_envoy import edgescore_bin

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "models" / "example" / "schema.json"
RULES = ROOT / "deploy" / "prometheus" / "edgescore.rules.yml"
NS = render_envoy.NATIVE_STATS_PREFIX
MODEL = "bot"
SHIFTED = "path_length"
# The test's window and `for:` in place of the shipped 15m and 30m.
WINDOW_S = 60
FOR_S = 3


def as_request(d: dict, i: int) -> client.Request:
    """A models/traffic.py request as the harness client sends it."""
    pseudo = {k: v for k, v in d["headers"] if k.startswith(":")}
    headers = [("host", pseudo[":authority"])] + [(k, v) for k, v in d["headers"] if not k.startswith(":")]
    length = next((int(v) for k, v in headers if k == "content-length"), 0)
    return client.Request(f"training {i}", d["kind"], pseudo[":method"], pseudo[":path"], headers, body=b"x" * length)


def shifted(d: dict) -> dict:
    """The request with empty path segments added at the end of its path: a longer path, the
    same segments, prefix and query."""
    def path(v: str) -> str:
        p, q, rest = v.partition("?")
        return p + "/" * 24 + q + rest
    return {**d, "headers": [[k, path(v) if k == ":path" else v] for k, v in d["headers"]]}


def cli(*args: str | Path) -> str:
    p = subprocess.run([edgescore_bin(), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


def features_csv(requests: list[dict], out: Path) -> list[dict[str, str]]:
    """The CLI's feature vectors of `requests` (the filter's own feature code)."""
    src = out.with_suffix(".jsonl")
    src.write_text("".join(json.dumps(r) + "\n" for r in requests))
    cli("features", "--schema", SCHEMA, "--hash-key", render_envoy.hash_key(), "--requests", src, "-o", out)
    with out.open() as f:
        return list(csv.DictReader(f))


def send_all(running, requests: list[client.Request]) -> None:
    """Sends every request, eight at a time (a connection each)."""
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda r: running.send(r).status, requests))
    assert set(statuses) <= {200, 403}, statuses


def logged_rows(running, n: int) -> list[dict]:
    """The last `n` access-log lines' feature logs, once all are written."""
    lines = wait_for("the access log", lambda: (l := running.envoy.access_log()) and len(l) >= n and l)
    return [json.loads(line["edgescore_features"]) for line in lines[-n:]]


def plugin(artifact: Path, sample_rate: float) -> dict:
    cfg = render_envoy.plugin_config(models=(), sample_rate=sample_rate, text=False)
    cfg["models"] = [{"artifact": base64.b64encode(artifact.read_bytes()).decode("ascii"), "threshold": 0.9, "action": "tag"}]
    return cfg


@pytest.fixture(scope="module")
def compiled(upstream, start_envoy, tmp_path_factory) -> dict:
    """The drift model, its reference's bins (inspect --json) and the feature names."""
    require_native()
    tmp = tmp_path_factory.mktemp("drift")
    plain, drift = tmp / "plain.esm", tmp / "drift.esm"
    source = ROOT / "models" / "example" / "bot.json"
    cli("compile", source, "--schema", SCHEMA, "--name", MODEL, "-o", plain)
    logger = start_envoy(envoy_config(upstream.port, plugin(plain, 1.0)), "reference")
    reference = training.requests(1500, 1)
    send_all(logger, [as_request(d, i) for i, d in enumerate(reference)])
    rows = logged_rows(logger, len(reference))
    names = [f["name"] for f in json.loads(SCHEMA.read_text())["features"]]
    rows_csv = tmp / "reference.csv"
    with rows_csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        for r in rows:
            w.writerow(["" if r["features"][n] is None else r["features"][n] for n in names])
    cli("compile", source, "--schema", SCHEMA, "--name", MODEL, "-o", drift, "--reference", rows_csv)
    report = json.loads(cli("inspect", "--json", drift))["drift_reference"]
    return {"artifact": drift, "reference": report, "names": names}


# ---------------------------------------------------------------------------------------------
# both builds count the same bins


PROM_LINE = re.compile(r'^(edgescore_drift_[a-z_]+)\{([^}]*)\} (\S+)$')


def drift_series(running) -> dict[tuple, float]:
    """Every edgescore_drift_* series of /stats/prometheus: (name, sorted labels) -> value."""
    running.settle()
    out = {}
    for line in running.envoy.prometheus().splitlines():
        if m := PROM_LINE.match(line):
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2))))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def bin_of(edges: list[float], x: float | None) -> str:
    """The core's bin rule: the number of edges at or below x, or `missing`."""
    if x is None or math.isnan(x):
        return "missing"
    return str(int(np.searchsorted(np.float32(edges), np.float32(x), side="right")))


def test_both_builds_count_every_bin_and_export_the_reference(compiled, upstream, start_envoy):
    cfg = plugin(compiled["artifact"], 1.0)
    wasm = start_envoy(envoy_config(upstream.port, cfg), "drift-wasm")
    native = start_envoy(native_config(upstream.port, cfg), "drift-native")
    reqs = [as_request(d, i) for i, d in enumerate(training.requests(300, 4))]
    for running in (wasm, native):
        send_all(running, reqs)
    logs = {"wasm": logged_rows(wasm, len(reqs)), "native": logged_rows(native, len(reqs))}
    # The same vectors and scores (sent eight at a time: in any order).
    assert sorted(map(json.dumps, logs["wasm"])) == sorted(map(json.dumps, logs["native"]))
    ref = compiled["reference"]
    want: dict[tuple, float] = {}
    for row in logs["wasm"]:
        for f in ref["features"]:
            key = ("edgescore_drift_bin", (("bin", bin_of(f["edges"], row["features"][f["name"]])), ("feature", f["name"]), ("model", MODEL)))
            want[key] = want.get(key, 0) + 1
        score = next(v for k, v in row["scores"].items() if k.split("@")[0] == MODEL)
        key = ("edgescore_drift_score_bin", (("bin", bin_of(ref["outputs"][0]["edges"], score)), ("model", MODEL)))
        want[key] = want.get(key, 0) + 1
    for f in ref["features"]:
        for b, share in enumerate(f["shares"]):
            label = "missing" if b == len(f["edges"]) + 1 else str(b)
            want[("edgescore_drift_reference_ppm", (("bin", label), ("feature", f["name"]), ("model", MODEL)))] = float(round(share * 1e6))
    for b, share in enumerate(ref["outputs"][0]["shares"]):
        label = "missing" if b == len(ref["outputs"][0]["edges"]) + 1 else str(b)
        want[("edgescore_drift_score_reference_ppm", (("bin", label), ("model", MODEL)))] = float(round(share * 1e6))
    assert len(want) > 100
    for name, running in (("wasm", wasm), ("native", native)):
        got = drift_series(running)
        # The Wasm filter defines every bin at 0; the native module's series start with a count.
        nonzero = {k: v for k, v in got.items() if v != 0}
        assert nonzero == {k: v for k, v in want.items() if v != 0}, name


def test_native_drift_counting_allocates_nothing(compiled, with_module, upstream, start_envoy):  # noqa: F811
    """The native module's test build counts every allocation: after a warm-up, 1,000 requests
    through a model with a drift reference make none."""
    with_module()
    native = start_envoy(native_config(upstream.port, plugin(compiled["artifact"], 0.0)), "drift-alloc")
    reqs = [as_request(d, i) for i, d in enumerate(training.requests(1300, 5))]
    send_all(native, reqs[:300])
    gauge = f"{NS}.edgescore.native_allocations"
    before = native.counter(gauge)
    assert before > 0
    send_all(native, reqs[300:])
    assert native.counter(f"{NS}.edgescore.requests_scored") >= len(reqs)
    assert native.counter(gauge) == before


# ---------------------------------------------------------------------------------------------
# PSI and the alert in a real Prometheus


def test_the_shift_changes_only_the_shifted_input(tmp_path):
    """The premise of the shifted traffic: the filter's feature code sees it differ from the
    original in path_length alone."""
    reqs = training.requests(400, 6)
    before = features_csv(reqs, tmp_path / "before.csv")
    after = features_csv([shifted(d) for d in reqs], tmp_path / "after.csv")
    changed = {k for b, a in zip(before, after) for k in b if b[k] != a[k]}
    assert changed == {SHIFTED}


def rendered_rules(out: Path) -> Path:
    """The shipped rules with the test's window and `for:`, the expressions otherwise as shipped."""
    text = RULES.read_text()
    assert text.count("[15m]") == 5 and text.count("for: 30m") == 2
    out.write_text(text.replace("[15m]", f"[{WINDOW_S}s]").replace("for: 30m", f"for: {FOR_S}s"))
    yaml.safe_load(out.read_text())
    return out


def psi(prom: Prometheus) -> dict[str, float]:
    return {k[0]: v for k, v in prom.by_labels(f'edgescore:drift_psi{{model="{MODEL}"}}', "feature").items()}


def feature_alerts(prom: Prometheus, state: str) -> set[str]:
    q = f'ALERTS{{alertname="EdgescoreFeatureDrift",alertstate="{state}",model="{MODEL}"}}'
    return {k[0] for k in prom.by_labels(q, "feature")}


def assert_psi_is_the_formula(prom: Prometheus, reference: dict) -> None:
    """The recorded PSI of each input is sum((live - ref) * ln(live / ref)) over its bins, each
    share floored at 1e-4, a bin without traffic at live 0; the recorded reference shares are
    the artifact's (as ppm gauges, normalised)."""
    at = time.time()
    live = prom.by_labels(f'edgescore:drift_live_share{{model="{MODEL}"}}', "feature", "bin", at=at)
    ref = prom.by_labels(f'edgescore:drift_reference_share{{model="{MODEL}"}}', "feature", "bin", at=at)
    recorded = {k[0]: v for k, v in prom.by_labels(f'edgescore:drift_psi{{model="{MODEL}"}}', "feature", at=at).items()}
    for f in reference["features"]:
        bins = ["missing" if b == len(f["edges"]) + 1 else str(b) for b in range(len(f["shares"]))]
        ppm = [round(s * 1e6) for s in f["shares"]]
        for b, p in zip(bins, ppm):
            assert ref[(f["name"], b)] == pytest.approx(p / sum(ppm), abs=1e-9), (f["name"], b)
        l_ = [max(live.get((f["name"], b), 0.0), 1e-4) for b in bins]
        r_ = [max(ref[(f["name"], b)], 1e-4) for b in bins]
        want = sum((lv - rv) * math.log(lv / rv) for lv, rv in zip(l_, r_))
        assert recorded[f["name"]] == pytest.approx(want, rel=1e-6, abs=1e-9), f["name"]


def test_psi_stays_low_on_training_traffic_and_alerts_on_a_shift(compiled, upstream, start_envoy, tmp_path):
    running = start_envoy(envoy_config(upstream.port, plugin(compiled["artifact"], 0.0)), "drift-prometheus")
    config = scrape_config(running.envoy.admin)
    config["rule_files"] = [str(rendered_rules(tmp_path / "edgescore.rules.yml"))]
    prom = Prometheus(config, tmp_path / "prom").start()
    names = compiled["names"]
    try:
        # A baseline scrape of every bin at 0 first: increase() counts from there.
        wait_for("Prometheus' baseline scrape", lambda: len(prom.query(f'edgescore_drift_bin{{model="{MODEL}"}}')) > 100
                 and prom.query(f'count_over_time(edgescore_requests_scored[{WINDOW_S}s])')[0][1] >= 2, timeout=30)
        # Training traffic, then every input's PSI over it.
        t = time.monotonic()
        send_all(running, [as_request(d, i) for i, d in enumerate(training.requests(800, 2))])
        assert time.monotonic() - t < WINDOW_S / 2, "the training traffic must fit in half a window"
        running.settle()
        wait_for("a PSI per input", lambda: set(psi(prom)) == set(names)
                 and prom.by_labels(f'edgescore:drift_requests{{model="{MODEL}"}}').get((), 0) >= 700, timeout=30)
        time.sleep(FOR_S + 2)
        calm = psi(prom)
        assert max(calm.values()) < 0.1, calm
        assert_psi_is_the_formula(prom, compiled["reference"])
        assert finite(prom.query(f'edgescore:drift_score_psi{{model="{MODEL}"}}'))
        assert feature_alerts(prom, "firing") == set() and feature_alerts(prom, "pending") == set()

        # The same distribution with path_length shifted, until the window holds nothing else.
        shifted_reqs = [as_request(shifted(d), i) for i, d in enumerate(training.requests(20000, 3))]
        start, sent = time.monotonic(), 0
        while time.monotonic() - start < WINDOW_S + 3 and sent < len(shifted_reqs):
            send_all(running, shifted_reqs[sent:sent + 80])
            sent += 80
        assert sent >= 400, sent
        firing = wait_for("the alert", lambda: feature_alerts(prom, "firing"), timeout=30)
        drifted = psi(prom)
        assert firing == {SHIFTED}, (firing, drifted)
        assert drifted[SHIFTED] > 0.25, drifted
        assert max(v for k, v in drifted.items() if k != SHIFTED) < 0.25, drifted
        assert_psi_is_the_formula(prom, compiled["reference"])

        # The dashboard's drift row has data from this Prometheus.
        drift_panels = [(title, expr) for title, expr in dashboard_queries() if "drift" in expr]
        assert len(drift_panels) >= 4
        for title, expr in drift_panels:
            assert finite(prom.query(concrete(expr, f"{WINDOW_S}s"))), (title, expr)
    finally:
        prom.stop()


def test_dashboard_has_the_drift_row():
    dash = json.loads(DASHBOARD.read_text())
    assert any(p["type"] == "row" and "Drift" in p["title"] for p in dash["panels"])
