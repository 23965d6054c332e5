"""The shape matrix benchmark (benches/shapes, issue 12) end to end on two tiny cells.

`--quick --no-lleaves --no-wasm` on a 10-tree XGBoost and a 10-tree LightGBM cell with tiny
time budgets: the JSON must hold a ratio to a compiled peer for every cell and row set, and
edgescore's predictions on every row must match the library's own `predict` within 1e-5 (the
run checks every peer that way before timing it). The first run trains the two models and
builds target/release/peer-native and the tl2cgen harnesses (minutes); later runs reuse
benches/shapes/build/.

Not part of `make test` (its first run builds release binaries: minutes CI's budget does not
have); run it after changing the bench: `.venv/bin/python -m pytest benches/shapes/test_quick.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CELLS = ["xgb_d6_t10", "lgb_l31_t10"]


def test_quick_shape_matrix_reports_every_ratio_and_edgescore_matches_the_libraries(tmp_path: Path) -> None:
    out = tmp_path / "shapes.json"
    proc = subprocess.run([sys.executable, "-m", "benches.shapes.run", "--quick", "--no-lleaves", "--no-wasm",
                           "--cells", ",".join(CELLS), "--seconds", "0.02", "--rounds", "1", "--json", str(out)],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert sorted(doc["cells"]) == sorted(CELLS)
    for name, cell in doc["cells"].items():
        for row_set in ("between", "skewed"):
            res = cell["results"][row_set]
            es = res["edgescore"]
            assert es["status"] == "ok", (name, row_set, es)
            assert es["max_abs_diff"] <= 1e-5, (name, row_set, es["max_abs_diff"])
            assert es["ns_per_row"] > 0
            ratios = res["ratios"]
            assert ratios["compiled"] is not None and ratios["compiled"] > 0, (name, row_set, ratios)
            # Every peer that was timed agreed with the library first.
            for peer, r in res.items():
                if peer != "ratios" and r.get("status") == "ok" and "max_abs_diff" in r:
                    assert r["max_abs_diff"] <= 1e-5, (name, row_set, peer, r["max_abs_diff"])
    assert "| xgb_d6_t10 |" in proc.stdout
