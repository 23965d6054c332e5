"""The shape matrix's report on made-up timings (no training, no builds: seconds):
`.venv/bin/python -m pytest benches/shapes/test_report.py`."""

from __future__ import annotations

from benches.shapes import report
from benches.shapes.cells import select


def timed(ours: list[float], tl2cgen: list[float], lleaves: list[float] | None = None) -> dict:
    def entry(runs: list[float]) -> dict:
        return {"status": "ok", "runs_ns": runs, "ns_per_row": sorted(runs)[len(runs) // 2]}

    per = {"edgescore": entry(ours), "tl2cgen": entry(tl2cgen)}
    if lleaves:
        per["lleaves"] = entry(lleaves)
    return per


def test_ratio_is_against_the_faster_compiled_peer_with_each_rounds_range() -> None:
    # Round 2 was slow for both: its ratio stays 0.5; round 3 was slow for edgescore only.
    r = report.ratios(timed([100, 200, 150], [200, 400, 200], lleaves=[300, 300, 300]))
    assert r["compiled_peer"] == "tl2cgen"
    assert r["compiled"] == 150 / 200
    assert r["compiled_range"] == (0.5, 0.75)


def test_one_round_has_no_range() -> None:
    assert report.ratios(timed([100], [200]))["compiled_range"] is None


def test_summary_counts_pairs_at_or_under_one_and_their_median() -> None:
    cells = select(["xgb_d6_t10", "lgb_l31_t10"])
    results = {"xgb_d6_t10": {"between": timed([100], [100]), "skewed": timed([300], [100])},
               "lgb_l31_t10": {"between": timed([50], [100]), "skewed": timed([20], [100])}}
    text = report.summary(cells, results)
    assert text.startswith("3 of 4 cell/row-set pairs at or under 1.0")
    assert "median 0.75, range 0.20–3.00" in text
    lines = report.markdown(cells, results)
    assert "| xgb_d6_t10 | xgboost | 10 |" in lines[2] and "**1.00** (tl2cgen)" in lines[2]


def test_wasm_and_v8_are_each_over_native_and_counted_against_1_3() -> None:
    cells = select(["xgb_d6_t10"])
    between, skewed = timed([100], [100]), timed([200], [100])
    between["wasm"] = {"status": "ok", "ratio": 1.25}
    between["v8"] = {"status": "ok", "runs_ns": [120.0], "ns_per_row": 120.0}
    skewed["v8"] = {"status": "ok", "runs_ns": [300.0], "ns_per_row": 300.0}
    results = {"xgb_d6_t10": {"between": between, "skewed": skewed}}
    assert report.ratios(between)["v8_native"] == 1.2
    assert report.ratios(skewed)["v8_native"] == 1.5
    text = report.summary(cells, results)
    assert "; wasm ÷ native 1.25–1.25, 1 of 1 within 1.3" in text
    assert "; V8 ÷ native 1.20–1.50, 1 of 2 within 1.3." in text
    lines = report.markdown(cells, results)
    assert lines[2].endswith("| 1.25 | 1.20 |") and lines[3].endswith("| – | 1.50 |")
