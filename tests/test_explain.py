"""`edgescore explain` against the libraries' own attributions.

    edgescore explain MODEL --csv ROWS.csv

prints, per row and output, the filter's path attribution (`saabas`) and exact TreeSHAP
values (`treeshap`), in margin space. Checked here, within 1e-5:
- `saabas` equals XGBoost's `predict(pred_contribs=True, approx_contribs=True)` (the same
  path attribution) on the reference XGBoost model (300 trees, depth 6) and on fixtures;
- `treeshap` equals XGBoost's `predict(pred_contribs=True)` and LightGBM's
  `predict(pred_contrib=True)` on the reference models and on fixtures (multiclass too), and
  CatBoost's `ShapValues` on its fixtures without CTRs (which read an oblivious tree with its
  last level at the root, as edgescore does);
- every line adds up to the margin `edgescore score --raw` prints.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.require import missing

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("EDGESCORE_BIN", REPO / "target" / "release" / "edgescore"))
MODELS = REPO / "tests" / "models"
REFERENCE = REPO / "models" / "reference"

if not BIN.is_file():
    missing(f"edgescore binary not found at {BIN}", module=True)

TOLERANCE = 1e-5


def explain(model: Path, rows: Path) -> pd.DataFrame:
    p = subprocess.run([str(BIN), "explain", str(model), "--csv", str(rows)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return pd.read_csv(io.StringIO(p.stdout))


def ours(table: pd.DataFrame, method: str, n_outputs: int) -> np.ndarray:
    """(rows, outputs, features + 1), the expected value last, as XGBoost lays contributions out."""
    t = table[table["method"] == method].sort_values(["row", "output"])
    values = t.drop(columns=["row", "output", "method"]).to_numpy(dtype=np.float64)
    return values.reshape(-1, n_outputs, values.shape[1])


def assert_close(name: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape, (name, got.shape, want.shape)
    diff = np.abs(got - want)
    worst = np.unravel_index(np.argmax(diff), diff.shape)
    assert diff.max() <= TOLERANCE, f"{name}: largest difference {diff.max():.3g} at {worst}: ours {got[worst]}, theirs {want[worst]}"


def xgboost_contribs(model: Path, rows: Path, approx: bool) -> np.ndarray:
    import xgboost as xgb

    booster = xgb.Booster(model_file=str(model))
    frame = pd.read_csv(rows)
    names = booster.feature_names
    x = (frame[names] if names else frame).to_numpy(dtype=np.float32)
    c = booster.predict(xgb.DMatrix(x, missing=np.nan, feature_names=names), pred_contribs=True, approx_contribs=approx)
    return c if c.ndim == 3 else c[:, None, :]


def lightgbm_contribs(model: Path, rows: Path, n_outputs: int) -> np.ndarray:
    import lightgbm as lgb

    booster = lgb.Booster(model_file=str(model))
    frame = pd.read_csv(rows)
    names = booster.feature_name()
    x = (frame[names] if set(names) <= set(frame.columns) else frame).to_numpy(dtype=np.float32)
    c = booster.predict(x, pred_contrib=True)
    return np.asarray(c).reshape(x.shape[0], n_outputs, -1)


def fixture_models() -> list[tuple[Path, Path]]:
    """Every fixture model the compiler reads, with its rows (the refused ones left out)."""
    out = []
    for d in sorted(MODELS.iterdir()):
        for f in ("model.json", "model.txt", "model.onnx", "model.ubj", "same_model.cbm", "model.json.gz", "model.txt.gz"):
            if (d / f).exists() and (d / "rows.csv").exists() and "refuse" not in d.name:
                out.append((d / f, d / "rows.csv"))
    return out


def test_every_line_adds_up_to_the_margin_on_every_fixture(tmp_path):
    """Both methods, on every model kind: each line sums to the margin `score --raw` prints
    (where that is finite: a linear leaf times an infinite input is not)."""
    fixtures = fixture_models()
    assert len(fixtures) >= 60, len(fixtures)
    for n, (model, rows) in enumerate(fixtures):
        artifact = tmp_path / f"{n}.esm"
        subprocess.run([str(BIN), "compile", str(model), "-o", str(artifact)], check=True, capture_output=True, timeout=120)
        p = subprocess.run([str(BIN), "score", str(artifact), "--csv", str(rows), "--raw"], capture_output=True, text=True, timeout=120, check=True)
        margins = np.loadtxt(io.StringIO(p.stdout), delimiter=",", ndmin=2)
        table = explain(artifact, rows)
        finite = np.isfinite(margins)
        for method in ("saabas", "treeshap"):
            got = ours(table, method, margins.shape[1])
            assert not np.isnan(got[finite]).any(), (model, method)
            # Rows whose margin is not finite give NaN sums: left out below, quietly.
            with np.errstate(invalid="ignore"):
                sums = got.sum(axis=2)
                scale = np.maximum(1.0, np.abs(got).sum(axis=2))
            # `score --raw` prints 9 significant digits (tests/tests/explain.rs checks the sums
            # to 1e-9 in f64).
            with np.errstate(invalid="ignore"):
                worst = np.max(np.abs(sums - margins)[finite] / scale[finite])
            assert worst <= 1e-7, f"{model} {method}: sums off the margins by {worst:.3g} (relative)"


@pytest.mark.parametrize(
    "model, rows",
    [
        (REFERENCE / "bot_xgb.json", REFERENCE / "rows.csv"),
        (MODELS / "xgb_binary" / "model.json", MODELS / "xgb_binary" / "rows.csv"),
        (MODELS / "xgb_multiclass" / "model.json", MODELS / "xgb_multiclass" / "rows.csv"),
        (MODELS / "xgb_regression" / "model.json", MODELS / "xgb_regression" / "rows.csv"),
    ],
    ids=lambda p: p.parent.name if p.name.startswith("model") else p.name,
)
def test_xgboost_path_attribution_and_treeshap(model, rows):
    approx = xgboost_contribs(model, rows, approx=True)
    exact = xgboost_contribs(model, rows, approx=False)
    table = explain(model, rows)
    assert_close(f"{model} saabas vs approx_contribs", ours(table, "saabas", approx.shape[1]), approx)
    assert_close(f"{model} treeshap vs pred_contribs", ours(table, "treeshap", exact.shape[1]), exact)


@pytest.mark.parametrize(
    "model, rows, n_outputs",
    [
        (REFERENCE / "bot_lgb.txt", REFERENCE / "rows.csv", 1),
        (MODELS / "lgb_binary" / "model.txt", MODELS / "lgb_binary" / "rows.csv", 1),
        (MODELS / "lgb_multiclass" / "model.txt", MODELS / "lgb_multiclass" / "rows.csv", 3),
        (MODELS / "lgb_categorical" / "model.txt", MODELS / "lgb_categorical" / "rows.csv", 1),
    ],
    ids=lambda p: (p.parent.name if p.name.startswith("model") else p.name) if isinstance(p, Path) else str(p),
)
def test_lightgbm_treeshap(model, rows, n_outputs):
    exact = lightgbm_contribs(model, rows, n_outputs)
    table = explain(model, rows)
    assert_close(f"{model} treeshap vs pred_contrib", ours(table, "treeshap", n_outputs), exact)


def catboost_contribs(model: Path, rows: Path, n_outputs: int) -> np.ndarray:
    import catboost

    m = catboost.CatBoost()
    m.load_model(str(model), format="json")
    x = pd.read_csv(rows)[m.feature_names_].to_numpy(dtype=np.float32)
    c = np.asarray(m.get_feature_importance(catboost.Pool(x), type="ShapValues"))
    return c.reshape(x.shape[0], n_outputs, -1)


@pytest.mark.parametrize("name", ["catboost_binary", "catboost_regression", "catboost_multiclass"])
def test_catboost_treeshap(name):
    model, rows = MODELS / name / "model.json", MODELS / name / "rows.csv"
    n_outputs = json.loads((MODELS / name / "meta.json").read_text())["n_outputs"]
    exact = catboost_contribs(model, rows, n_outputs)
    assert_close(f"{model} treeshap vs ShapValues", ours(explain(model, rows), "treeshap", n_outputs), exact)


def test_a_model_without_node_values_is_refused_with_a_clear_error(tmp_path):
    artifact = tmp_path / "small.esm"
    subprocess.run(
        [str(BIN), "compile", str(MODELS / "xgb_binary" / "model.json"), "-o", str(artifact), "--no-node-values"],
        check=True, capture_output=True, timeout=120,
    )
    p = subprocess.run([str(BIN), "explain", str(artifact), "--csv", str(MODELS / "xgb_binary" / "rows.csv")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == "", (p.stdout, p.stderr)
    assert "has no node values" in p.stderr and "panicked" not in p.stderr, p.stderr
    shown = subprocess.run([str(BIN), "inspect", str(artifact)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert any(line.startswith("node values") and line.split(None, 2)[2].startswith("none") for line in shown.splitlines()), shown


def test_covers_an_artifact_cannot_hold_are_left_out_with_a_note_and_the_model_scores(tmp_path):
    """XGBoost's survival:cox hessians, summed in f32 once the margins spread, can come out
    negative, so a node's cover can: the model compiles without node values, says so, and
    scores as XGBoost does."""
    import xgboost as xgb

    rng = np.random.default_rng(2)
    x = rng.normal(size=(400, 4)).astype(np.float32)
    t = np.exp(x[:, 0] + x[:, 1] * x[:, 2] + rng.normal(size=400) * 0.3)
    params = {"objective": "survival:cox", "max_depth": 5, "eta": 0.5, "lambda": 0.1, "nthread": 1, "seed": 1, "tree_method": "hist"}
    booster = xgb.train(params, xgb.DMatrix(x, label=np.where(rng.random(400) < 0.2, -t, t)), 20)
    model = tmp_path / "cox.json"
    booster.save_model(model)
    trees = json.loads(model.read_text())["learner"]["gradient_booster"]["model"]["trees"]
    negative = [(n, i) for n, tree in enumerate(trees) for i, h in enumerate(tree["sum_hessian"]) if h < 0]
    assert negative, "this XGBoost gave the model no negative cover: the test needs other data to exercise one"

    artifact = tmp_path / "cox.esm"
    p = subprocess.run([str(BIN), "compile", str(model), "-o", str(artifact)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    tree, node = negative[0]
    assert f"note: {model}: tree {tree}: node {node}: cover -" in p.stderr and "compiled without node values" in p.stderr, p.stderr

    rows = tmp_path / "rows.csv"
    pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])]).to_csv(rows, index=False)
    scored = subprocess.run([str(BIN), "score", str(artifact), "--csv", str(rows), "--raw"], capture_output=True, text=True, timeout=60, check=True)
    ours_margin = np.array([float(v) for v in scored.stdout.split()])
    theirs = booster.predict(xgb.DMatrix(x), output_margin=True).astype(np.float64)
    assert_close("survival:cox margins", ours_margin, theirs)

    shown = subprocess.run([str(BIN), "inspect", str(artifact)], capture_output=True, text=True, timeout=60, check=True).stdout
    assert any(line.startswith("node values") and line.split(None, 2)[2].startswith("none") for line in shown.splitlines()), shown
    p = subprocess.run([str(BIN), "explain", str(model), "--csv", str(rows)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == "", (p.stdout, p.stderr)
    assert "compiled without node values" in p.stderr and "has no node values" in p.stderr and "panicked" not in p.stderr, p.stderr
