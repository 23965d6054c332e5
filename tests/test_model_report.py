"""`edgescore inspect --html`: the report of each example model (its artifact from `make models`,
and its trained source with models/example/schema.json) against the CLI's own JSON, XGBoost's
and LightGBM's gain importance and NumPy's quantiles of `edgescore score`; then rendered in
headless Chromium (Debian's, `make system-tools`) to a PNG that must show the charts.

Run as a script, it writes the screenshot in the docs (`make model-report-screenshot`):

    PYTHONPATH=. .venv/bin/python tests/test_model_report.py --out docs/images/model-report.png --version 2026-11-23
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from harness import render_envoy
from harness.require import missing

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("EDGESCORE_BIN", REPO / "target" / "release" / "edgescore"))
EXAMPLE = REPO / "models" / "example"
SCHEMA = EXAMPLE / "schema.json"
ARTIFACTS = REPO / "target" / "models"
# (name, source file, its library: what the source records about gain)
MODELS = [(e.policy.name, e.source.name, e.library) for e in render_envoy.EXAMPLES]
QUANTILES = [0.0, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 1.0]
WINDOW = (1280, 2000)
# The page's CSS colours of a bar and of a threshold mark (report/html.rs).
BAR_RGB, MARK_RGB = (0x3B, 0x73, 0xB9), (0xC0, 0x39, 0x2B)


def cli(*args: str | Path, cwd: Path | None = None) -> str:
    p = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)
    assert p.returncode == 0, (args, p.stderr)
    return p.stdout


def write_rows(out: Path, n: int = 400, seed: int = 11) -> Path:
    """Feature rows of synthetic traffic, as the filter computes them (`edgescore features`)."""
    from models import traffic

    requests = out.with_suffix(".jsonl")
    requests.write_text("".join(json.dumps(r) + "\n" for r in traffic.requests(n, seed)))
    hash_key = (EXAMPLE / "hash_key.txt").read_text().strip()
    cli("features", "--schema", SCHEMA, "--hash-key", hash_key, "--requests", requests, "--output", out)
    return out


class Page(HTMLParser):
    """What the tests read off a report: facts, charts and their bars, schema rows, threshold
    rows and rugs, quantiles, the gain note."""

    def __init__(self, text: str):
        super().__init__()
        self.facts: dict[str, str] = {}
        self.charts: dict[str, list[tuple[str, float]]] = {}
        self.schema: list[str] = []
        self.thresholds: list[str] = []
        self.rugs = 0
        self.quantiles: dict[int, dict[float, float]] = {}
        self.gain_note = ""
        self._section = self._chart = self._fact = None
        self._output: int | None = None
        self._text: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self._section = a.get("id")
        elif tag == "figure" and a.get("class") == "chart":
            self._chart = a["data-chart"]
            self.charts[self._chart] = []
        elif tag == "rect" and a.get("class") == "bar":
            self.charts[self._chart].append((a["data-label"], float(a["data-value"])))
        elif tag == "svg" and a.get("class") == "rug":
            self.rugs += 1
        elif tag == "tr" and "data-feature" in a:
            (self.schema if self._section == "schema" else self.thresholds).append(a["data-feature"])
        elif tag == "div" and "data-fact" in a:
            self._fact = a["data-fact"]
        elif tag == "div" and "data-output" in a:
            self._output = int(a["data-output"])
        elif tag == "dd" and self._fact:
            self._text = []
        elif tag == "td" and "data-quantile" in a:
            self.quantiles.setdefault(self._output, {})[float(a["data-quantile"])] = float(a["data-value"])
        elif tag == "p" and a.get("id") == "gain-unavailable":
            self._text = []

    def handle_endtag(self, tag):
        if tag == "figure":
            self._chart = None
        elif tag == "dd" and self._fact:
            self.facts[self._fact] = "".join(self._text)
            self._fact, self._text = None, None
        elif tag == "p" and self._text is not None and self._section == "importance":
            self.gain_note, self._text = "".join(self._text), None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def report(model: Path, out: Path, rows: Path, *extra: str | Path) -> str:
    cli("inspect", model, *extra, "--html", out, "--csv", rows)
    return out.read_text()


def library_gain(kind: str, source: Path, names: list[str]) -> dict[str, float]:
    """Total gain per feature as the training library itself reports it."""
    if kind == "xgboost":
        import xgboost

        return xgboost.Booster(model_file=str(source)).get_score(importance_type="total_gain")
    import lightgbm

    gains = lightgbm.Booster(model_file=str(source)).feature_importance(importance_type="gain")
    return {names[i]: float(g) for i, g in enumerate(gains) if g > 0}


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> Path:
    if not BIN.is_file():
        missing(f"edgescore binary not found at {BIN}")
    return write_rows(tmp_path_factory.mktemp("rows") / "rows.csv")


@pytest.mark.parametrize("from_source", [False, True], ids=["artifact", "source"])
@pytest.mark.parametrize("name,source,kind", MODELS, ids=[m[0] for m in MODELS])
def test_report_content(name, source, kind, from_source, rows, tmp_path):
    esm = ARTIFACTS / f"{name}.esm"
    if not esm.is_file():
        missing(f"{esm} not built (run `make models`)")
    model, extra = (EXAMPLE / source, ["--schema", SCHEMA]) if from_source else (esm, [])
    text = report(model, tmp_path / "report.html", rows, *extra)
    summary = json.loads(cli("inspect", model, *extra, "--json"))
    page = Page(text)

    assert "<script" not in text and "http://" not in text and "https://" not in text
    assert page.facts["trees"] == str(summary["trees"]) and int(page.facts["trees"]) > 0
    assert page.facts["features"] == "21" and page.facts["outputs"] == str(summary["n_outputs"])
    schema_names = [f["name"] for f in json.loads(SCHEMA.read_text())["features"]]
    assert page.schema == schema_names

    has_gain = from_source and kind != "catboost"
    outputs = len(page.quantiles)
    assert outputs >= 1
    expected = {"depth", "leaves", "splits", *(f"scores-{k}" for k in range(outputs))} | ({"gain"} if has_gain else set())
    assert set(page.charts) == expected

    # Shape and split counts: the same numbers `inspect --json` prints.
    assert [v for _, v in page.charts["depth"]] == summary["depth_histogram"]
    assert sum(v for _, v in page.charts["leaves"]) == summary["trees"]
    used = {f["name"]: f["splits"] for f in summary["features_used"]}
    assert dict(page.charts["splits"]) == used
    assert sorted(page.thresholds) == sorted(used) and page.rugs >= 1

    if has_gain:
        lib = library_gain(kind, EXAMPLE / source, schema_names)
        gain = dict(page.charts["gain"])
        assert set(gain) == set(used)
        for feature, total in gain.items():
            assert total == pytest.approx(lib.get(feature, 0.0), rel=1e-4, abs=1e-6), feature
    elif from_source:
        assert "CatBoost model files do not record split gain" in page.gain_note
    else:
        assert "artifact does not keep split gain" in page.gain_note

    # The score distribution: what `edgescore score` prints for the rows, whichever way the model came.
    scores = np.loadtxt(cli("score", esm, "--csv", rows).splitlines(), delimiter=",", ndmin=2)
    n_rows = len(rows.read_text().splitlines()) - 1
    assert scores.shape == (n_rows, outputs)
    for k in range(outputs):
        assert sum(v for _, v in page.charts[f"scores-{k}"]) == n_rows
        want = np.quantile(scores[:, k], QUANTILES)
        got = [page.quantiles[k][q] for q in QUANTILES]
        assert got == pytest.approx(want, rel=1e-7, abs=1e-9)


def test_inspect_refuses_flags_that_do_not_apply(rows, tmp_path):
    esm = ARTIFACTS / "bot.esm"
    if not esm.is_file():
        missing(f"{esm} not built (run `make models`)")
    out = tmp_path / "r.html"
    # Exit 1: the command's own refusal; exit 2: clap's usage errors.
    for args, needle, code in [
        ((esm, "--schema", SCHEMA, "--html", out), "is a compiled artifact: --schema", 1),
        ((esm, "--csv", rows), "--html", 2),
        ((esm, "--json", "--html", out), "cannot be used with", 2),
    ]:
        p = subprocess.run([str(BIN), "inspect", *map(str, args)], capture_output=True, text=True, timeout=60)
        assert p.returncode == code and needle in p.stderr, (args, p.returncode, p.stderr)
        assert not out.exists()


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        missing("no chromium (run `make system-tools`: Debian's chromium package)")
    return found


def screenshot(page: Path, png: Path, window: tuple[int, int] = WINDOW, timeout: float = 90.0) -> None:
    """Renders `page` in headless Chromium with nothing but the file to load; stopped by its
    process group (Chromium's zygote and renderers are its children) when done or late."""
    with tempfile.TemporaryDirectory(prefix="edgescore-chromium-") as profile:
        args = [chromium_binary(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={window[0]},{window[1]}",
                page.resolve().as_uri()]
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
            raise AssertionError(f"chromium did not finish within {timeout} s:\n{log.decode(errors='replace')[-2000:]}")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert proc.returncode == 0 and png.is_file(), log.decode(errors="replace")[-2000:]


def test_report_renders_in_chromium(rows, tmp_path):
    from PIL import Image

    page = tmp_path / "bot.html"
    report(EXAMPLE / "bot.json", page, rows, "--schema", SCHEMA)
    png = tmp_path / "bot.png"
    # Tall enough for the whole page: the threshold rugs and score histogram are below 2,000 px.
    window = (1280, 4000)
    screenshot(page, png, window)
    with Image.open(png) as im:
        assert im.size == window
        pixels = np.asarray(im.convert("RGB")).reshape(-1, 3)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    assert len(colours) > 50, f"{len(colours)} colours: a blank or unstyled page"
    # The most common colour is the sections' white or the page's grey; not everything is.
    assert counts.max() / len(pixels) < 0.8
    bar = int(np.all(pixels == BAR_RGB, axis=1).sum())
    mark = int(np.all(pixels == MARK_RGB, axis=1).sum())
    # The depth, leaves, split and gain charts fill well over 20,000 pixels with the bar colour.
    assert bar > 20_000, f"{bar} bar pixels: the charts did not render"
    assert mark > 100, f"{mark} threshold-mark pixels: the rug plots did not render"


def main() -> None:
    ap = argparse.ArgumentParser(description="Write the model report screenshot shown in the docs.")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "model-report.png")
    ap.add_argument("--version", default="1", help="the model version the page shows (the Makefile's MODEL_VERSION)")
    args = ap.parse_args()
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        write_rows(Path(tmp) / "rows.csv")
        page = Path(tmp) / "bot.html"
        # Run where the rows are, so the page names them `rows.csv`, not a temporary path.
        cli("inspect", EXAMPLE / "bot.json", "--schema", SCHEMA, "--version", args.version, "--html", page, "--csv", "rows.csv",
            cwd=Path(tmp))
        png = Path(tmp) / "shot.png"
        screenshot(page, png)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        # A 64-colour palette keeps text and charts crisp at a third of the bytes.
        with Image.open(png) as im:
            im.convert("RGB").quantize(colors=64).save(args.out, optimize=True)
    print(f"model report screenshot -> {args.out}")


if __name__ == "__main__":
    main()
