"""The short soak (issue 14): `benches/soak/run.py` for 90 seconds inside `make test`.

The same run as `make soak` (real Envoy with --concurrency 2, the real Ray NLP service, the
signed registry, every fault injected), only shorter and slower: the NLP service killed and
restarted, its answers held beyond the timeout, a model republished every 10 s, the registry
frozen until its manifest expires, a corrupted model and an expired manifest published. The
soak itself decides pass or fail (its exit status and results.json); this test checks those
verdicts, so a fault that silently did nothing fails here too. Its Envoy RSS bound is 5 %:
90 s is mostly the warm-up that an hour's 2 % spreads over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_short_soak_loses_nothing_and_every_fault_happens(tmp_path: Path) -> None:
    cli = os.environ.get("EDGESCORE_BIN", str(ROOT / "target" / "debug" / "edgescore"))
    out = tmp_path / "soak"
    proc = subprocess.run([sys.executable, "-m", "benches.soak.run", "--minutes", "1.5", "--rate", "20", "--rss-target", "5",
                           "--out", str(out), "--cli", cli], cwd=ROOT, capture_output=True, text=True, timeout=420)
    assert (out / "results.json").exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads((out / "results.json").read_text())
    summary = proc.stdout.strip().splitlines()[-1]
    assert r["sent"] >= 0.95 * 90 * 20, summary
    assert r["lost"] == 0, summary
    assert not [c for c in r["by_cause"] if c.startswith("unexpected")], r["by_cause"]
    assert r["faults_missed"] == [], summary
    assert r["models_published"] >= 8, summary
    assert r["envoy_rss_growth"] < 0.05, summary
    # No VM died (no reload was needed) and the workers swapped the republished models.
    reloads = {k: v for k, v in r["stats"].items() if k.endswith(".vm_reload") or k.endswith(".vm_reload_failure")}
    assert reloads and not any(reloads.values()), reloads
    assert sum(v for k, v in r["stats"].items() if k.endswith("registry.swaps")) > 0, r["stats"]
    assert proc.returncode == 0 and summary.startswith("soak OK"), summary
    assert (out / "soak.png").stat().st_size > 10_000
