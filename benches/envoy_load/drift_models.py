"""The example models (21 inputs each) compiled twice for the drift-counting measurement: as
`make build` compiles them, and with a drift reference (`edgescore compile --reference`) made
from the training generator's feature vectors (models/traffic.py, `edgescore features`).

    .venv/bin/python -m benches.envoy_load.drift_models [--out target/bench-drift] [--rows 5000]

prints the two run.py invocations whose difference in Envoy CPU per request is the drift
counting of the three models (README.md, "Drift counting").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from harness import render_envoy
from models import traffic

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "target" / "release" / "edgescore"
SCHEMA = ROOT / "models" / "example" / "schema.json"


def cli(*args: str | Path) -> None:
    subprocess.run([str(CLI), *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "bench-drift")
    ap.add_argument("--rows", type=int, default=5000, help="reference rows from the training generator")
    args = ap.parse_args(argv)
    if not CLI.is_file():
        print(f"missing (run `make build`): {CLI}", file=sys.stderr)
        return 2
    plain, drift = args.out / "plain", args.out / "drift"
    plain.mkdir(parents=True, exist_ok=True)
    drift.mkdir(parents=True, exist_ok=True)
    requests, rows = args.out / "reference.jsonl", args.out / "reference.csv"
    requests.write_text("".join(json.dumps(r) + "\n" for r in traffic.requests(args.rows, 20261129)))
    cli("features", "--schema", SCHEMA, "--hash-key", render_envoy.hash_key(), "--requests", requests, "-o", rows)
    for example in render_envoy.read_example_list():
        name = example.policy.name
        common = (example.source, "--schema", SCHEMA, "--name", name, "--version", "bench")
        cli("compile", *common, "-o", plain / f"{name}.esm")
        cli("compile", *common, "-o", drift / f"{name}.esm", "--reference", rows)
    names = [e.policy.name for e in render_envoy.read_example_list()]
    for label, d in (("without", plain), ("with", drift)):
        models = " ".join(str(d / f"{n}.esm") for n in names)
        print(f"# {label} drift counting:\n.venv/bin/python -m benches.envoy_load.run --variants edgescore,native --models {models}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
