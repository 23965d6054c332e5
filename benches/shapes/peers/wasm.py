"""edgescore inside wasmtime: `target/release/shape-wasm MODEL.esm GUEST.wasm ROWS.csv SECONDS`
times the same single-row loop natively and in the evaluator-only wasm module
(benches/score_guest, wasm32-wasip1, Cranelift OptLevel::Speed as in filter_wasm.rs), one
after the other in one process, after checking that both give the same outputs on every row.
Not a peer in the ratio table: its result is the wasm/native ratio per cell and row set."""

from __future__ import annotations

from .harness import ROOT, Prepared, last_json

KEY = "wasm"
HOW = "shape-wasm: the evaluator in wasmtime vs the same loop natively"
COMPILED = False
RUNNER = ROOT / "target" / "release" / "shape-wasm"
GUEST = ROOT / "target" / "wasm32-wasip1" / "wasm" / "edgescore_score_guest.wasm"


def applies(cell) -> bool:
    return True


def prepare(cell, trained: dict, esm) -> Prepared:
    from pathlib import Path

    d = Path(trained["dir"])

    def command(row_set, seconds, n_check):
        return [RUNNER, esm, GUEST, d / f"{row_set}.csv", seconds]

    def parse(out):
        j = last_json(out)
        if j["max_abs_diff"] > 0:
            raise RuntimeError(f"wasm and native outputs differ by {j['max_abs_diff']:g}")
        return {"ns_per_row": j["wasm_ns_per_row"], "native_ns_per_row": j["native_ns_per_row"],
                "calls": j["wasm_calls"], "ratio": j["wasm_ns_per_row"] / j["native_ns_per_row"]}

    return Prepared(KEY, cell.name, command, parse=parse)
