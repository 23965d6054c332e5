"""edgescore's evaluator in V8, the engine Envoy runs the filter in (wasmtime, the `wasm` entry,
is only a stand-in): the score guest (benches/score_guest) in Node.js, `v8_guest.mjs`, with
`--no-liftoff` (TurboFan only, as proxy-wasm-cpp-host sets V8 up for Envoy). Its outputs are
checked against the library like any peer's; its result is the ratio V8 ÷ native (the
evaluator's ns/row in V8 ÷ peer-native's), not a ratio in the table of peers. Node's V8 is
not Envoy's (Node 20 ships V8 11.3, Envoy 1.40 a newer one): the same compiler, another
version."""

from __future__ import annotations

import shutil
from pathlib import Path

from .harness import ROOT, NotApplicable, Prepared
from .wasm import GUEST

KEY = "v8"
HOW = "the score guest in Node.js's V8 (TurboFan), one export call per pass"
COMPILED = False
SCRIPT = ROOT / "benches" / "shapes" / "peers" / "v8_guest.mjs"


def applies(cell) -> bool:
    return True


def prepare(cell, trained: dict, esm: Path) -> Prepared:
    node = shutil.which("node")
    if node is None:
        raise NotApplicable("v8: no `node` on PATH")
    d = Path(trained["dir"])

    def command(row_set, seconds, n_check):
        return [node, "--no-liftoff", SCRIPT, esm, GUEST, d / f"{row_set}.f32", trained["features"], seconds, n_check]

    return Prepared(KEY, cell.name, command)
