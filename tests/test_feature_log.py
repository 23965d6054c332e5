"""The training loop security teams run, end to end with a real Envoy: the filter logs the
features it computed (access log, `feature_log.sample_rate` 1), models/feature_log.py turns the
log into a table, the CLI re-scores that table to the filter's own scores, and a model trained
on the table and compiled with the schema the loader writes scores in the filter exactly as
XGBoost does.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from harness.require import require_build
from models import feature_log
from test_envoy import MODELS, envoy_config, render_envoy, traffic

ROOT = Path(__file__).resolve().parent.parent

REQUESTS = traffic.requests()


def edgescore_bin() -> str:
    return os.environ.get("EDGESCORE_BIN") or str(ROOT / "target" / "release" / "edgescore")


def logged_lines(running, n: int) -> list[str]:
    """The raw access-log lines once `n` requests carry a feature object."""
    deadline = time.monotonic() + 10  # Envoy flushes its access log about once a second
    while True:
        running.envoy.access_log()  # flushes our side of the file
        lines = running.envoy.stdout_path.read_text(errors="replace").splitlines()
        if sum(feature_log.parse_line(ln) is not None for ln in lines) >= n:
            return lines
        assert time.monotonic() < deadline, "the access log did not carry the feature log"
        time.sleep(0.2)


def send_all(running) -> None:
    for req in REQUESTS:
        assert running.send(req).status == 200


@pytest.fixture(scope="module")
def logged(upstream, start_envoy):
    """The demo requests through the shipped models (thresholds above 1: everything passes)."""
    require_build()
    policies = tuple(dataclasses.replace(m, threshold=1.5) for m in MODELS)
    plugin = render_envoy.plugin_config("enforce", policies, sample_rate=1.0)
    running = start_envoy(envoy_config(upstream.port, plugin), "logging")
    send_all(running)
    table, skipped = feature_log.load(logged_lines(running, len(REQUESTS)))
    assert len(table) == len(REQUESTS), f"{len(table)} feature-log lines ({skipped} other lines)"
    return table


def feature_columns(table) -> list[str]:
    return [c for c in table.columns if not c.startswith("score.") and c != "decision"]


def cli_scores(model: Path, table, tmp_path: Path) -> np.ndarray:
    csv = tmp_path / f"{model.stem}.csv"
    table[feature_columns(table)].to_csv(csv, index=False, na_rep="")
    out = subprocess.run([edgescore_bin(), "score", str(model), "--csv", str(csv)], check=True,
                         capture_output=True, text=True).stdout
    return np.array([float(line.split()[-1]) for line in out.splitlines() if line.strip()], dtype=np.float32)


def test_the_log_rescored_by_the_cli_gives_the_filters_scores(logged, tmp_path):
    for m in MODELS:
        column = next(c for c in logged.columns if c.startswith(f"score.{m.name}@"))
        got = cli_scores(m.artifact, logged, tmp_path)
        want = logged[column].to_numpy(dtype=np.float32)
        assert got.shape == want.shape
        # The log holds the f32 score exactly; the CLI prints 9 significant digits, which
        # round-trips an f32.
        np.testing.assert_array_equal(got, want, err_msg=m.name)


def test_the_log_has_the_schema_features_in_order(logged):
    schema = json.loads((ROOT / "models" / "example" / "schema.json").read_text())
    assert feature_columns(logged) == [f["name"] for f in schema["features"]]
    assert set(logged["decision"]) == {"allow"}


def test_a_model_trained_on_the_log_scores_in_the_filter_as_in_xgboost(logged, upstream, start_envoy, tmp_path):
    import xgboost as xgb

    features = feature_columns(logged)
    X = logged[features].to_numpy(dtype=np.float32)
    y = np.array([r.kind != "browser" for r in REQUESTS], dtype=np.float32)
    booster = xgb.train({"objective": "binary:logistic", "max_depth": 3, "eta": 0.5, "base_score": 0.4,
                         "seed": 7, "nthread": 1}, xgb.DMatrix(X, label=y, feature_names=features), num_boost_round=8)
    booster.save_model(str(tmp_path / "retrained.json"))
    buckets = {f["name"]: f.get("buckets", 0)
               for f in json.loads((ROOT / "models" / "example" / "schema.json").read_text())["features"]}
    (tmp_path / "schema.json").write_text(json.dumps(feature_log.schema_for(features, buckets)))
    esm = tmp_path / "retrained.esm"
    subprocess.run([edgescore_bin(), "compile", str(tmp_path / "retrained.json"), "--schema", str(tmp_path / "schema.json"),
                    "--name", "retrained", "--version", "t1", "-o", str(esm)], check=True, capture_output=True)

    plugin = render_envoy.plugin_config("enforce", (), sample_rate=1.0)
    plugin["models"] = [{"artifact": base64.b64encode(esm.read_bytes()).decode(), "threshold": 1.5, "action": "block"}]
    running = start_envoy(envoy_config(upstream.port, plugin), "retrained")
    send_all(running)
    table, _ = feature_log.load(logged_lines(running, len(REQUESTS)))
    want = booster.predict(xgb.DMatrix(X, feature_names=features)).astype(np.float32)
    got = table["score.retrained@t1"].to_numpy(dtype=np.float32)
    # Same requests, same features (the filter's hashing key is the demo's), same model.
    np.testing.assert_array_equal(table[features].to_numpy(dtype=np.float32), X)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
