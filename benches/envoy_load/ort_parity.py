"""Is variant (e) the same scoring as the filter? For the demo's requests (demo/traffic.py), as
the filter receives them in Envoy, the Python features (request_features.py) must equal
`edgescore features` exactly, and ONNX Runtime's scores on them must agree with `edgescore
score` on the compiled example models to 1e-5, giving the same decisions under the example
policies. run.py runs this before measuring (e); alone:

    .venv/bin/python -m benches.envoy_load.ort_parity [--cli target/release/edgescore]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np

from benches.envoy_load import onnx_models
from benches.envoy_load.ort_sidecar import Scorer
from demo import traffic
from harness import client, render_envoy

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA = ROOT / "models" / "example" / "schema.json"
TOLERANCE = 1e-5


def filter_view(r: client.Request) -> list[tuple[str, str]]:
    """The header map the filter reads for `r` sent over HTTP/1.1: pseudo-headers, the client's
    headers (`host` became `:authority`, `connection` is hop-by-hop), and the two Envoy adds."""
    pairs = [(":authority", traffic.SITE), (":path", r.path), (":method", r.method), (":scheme", "http")]
    for k, v in r.header_list("127.0.0.1:10000"):
        if k == "host":
            pairs[0] = (":authority", v)
        elif k != "connection":
            pairs.append((k, str(len(r.body)) if k == "content-length" and v is None else v))
    return pairs + [("x-forwarded-proto", "http"), ("x-request-id", str(uuid.UUID(int=len(pairs))))]


def check(cli: Path, log=print) -> None:
    """Raises AssertionError naming the first difference."""
    reqs = [filter_view(r) for r in traffic.requests()]
    models = render_envoy.EXAMPLE_MODELS
    with tempfile.TemporaryDirectory() as tmp:
        src, table = Path(tmp) / "requests.jsonl", Path(tmp) / "features.csv"
        src.write_text("".join(json.dumps({"headers": h, "properties": {"request.protocol": "HTTP/1.1"}}) + "\n"
                               for h in reqs))
        subprocess.run([str(cli), "features", "--schema", str(SCHEMA), "--hash-key", render_envoy.hash_key(),
                        "--requests", str(src), "--output", str(table)], check=True)
        expected = np.genfromtxt(table, delimiter=",", skip_header=1, dtype=np.float32, filling_values=np.nan)
        rust_scores = np.array([[float(line) for line in subprocess.run(
            [str(cli), "score", str(m.artifact), "--csv", str(table)], check=True, capture_output=True,
            text=True).stdout.split()] for m in models]).T
    scorer = Scorer(sidecar_config(cli, threshold=None))
    worst, decisions = 0.0, []
    for i, h in enumerate(reqs):
        pairs = [(k.encode(), v.encode()) for k, v in h]
        x = scorer.schema.compute(pairs, b"HTTP/1.1")
        same = (x == expected[i]) | (np.isnan(x) & np.isnan(expected[i]))
        assert same.all(), (f"request {i + 1}: features differ at "
                            f"{[(scorer.schema.names[j], x[j], expected[i][j]) for j in np.flatnonzero(~same)]}")
        ort = scorer.scores(pairs, b"HTTP/1.1")
        diff = np.abs(np.array(ort) - rust_scores[i])
        assert (diff <= TOLERANCE).all(), f"request {i + 1}: ORT {ort} vs edgescore {list(rust_scores[i])}"
        ours, theirs = scorer.decide(ort)[2], scorer.decide(list(rust_scores[i]))[2]
        assert ours == theirs, f"request {i + 1}: decision {ours} (ORT) vs {theirs} (edgescore)"
        worst = max(worst, float(diff.max()))
        decisions.append(ours.split(";")[0])
    log(f"ort parity: {len(reqs)} demo requests, {len(scorer.schema.names)} features equal to `edgescore features`, "
        f"ORT scores within {worst:.1e} of edgescore's (tolerance {TOLERANCE:g}), same decisions "
        f"({', '.join(f'{decisions.count(d)} {d}' for d in sorted(set(decisions)))})")


def sidecar_config(cli: Path, threshold: float | None) -> dict:
    """The ORT sidecar's configuration: the filter's policies (`threshold` overrides them all, as
    run.py's never-blocking bench policies do), the ONNX models, the filter's header names."""
    plugin = render_envoy.plugin_config("enforce", render_envoy.EXAMPLE_MODELS, text=False)
    models = []
    for m in render_envoy.EXAMPLE_MODELS:
        version = json.loads(subprocess.run([str(cli), "inspect", "--json", str(m.artifact)], check=True,
                                            capture_output=True, text=True).stdout)["version"]
        models.append({"name": m.name, "id": f"{m.name}@{version}" if version else m.name,
                       "onnx": str(onnx_models.convert(m.name)), "threshold": m.threshold if threshold is None else threshold,
                       "action": m.action, "status": m.status or 403, "body": m.body or "blocked by edgescore\n"})
    return {"hash_key": plugin["hash_key"], "schema": json.loads(SCHEMA.read_text()), "headers": plugin["headers"],
            "mode": plugin["mode"], "models": models}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", type=Path, default=ROOT / "target" / "release" / "edgescore")
    args = ap.parse_args(argv)
    check(args.cli)
    return 0


if __name__ == "__main__":
    sys.exit(main())
