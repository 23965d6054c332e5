// The score guest (benches/score_guest) in V8, the engine Envoy runs the filter in: the same
// single-row loop as shape-wasm's wasmtime run, one `guest_score(1)` export call per pass.
//
//   node --no-liftoff v8_guest.mjs MODEL.esm GUEST.wasm ROWS.f32 N_FEATURES SECONDS N_CHECK
//
// `--no-liftoff` is what Envoy runs with: proxy-wasm-cpp-host's V8 engine sets
// `v8_flags.liftoff = false`, so every function is compiled by TurboFan up front. Prints
// `pred <i> <outputs>` for the first N_CHECK rows, then one JSON line.
import { readFileSync } from "node:fs";

const [esmPath, guestPath, rowsPath, nFeatures, seconds, nCheck] = process.argv.slice(2);
const module = new WebAssembly.Module(readFileSync(guestPath));
// Every import traps, as in shape-wasm (`define_unknown_imports_as_traps`): scoring calls none.
const imports = {};
for (const { module: m, name } of WebAssembly.Module.imports(module)) {
  (imports[m] ??= {})[name] = () => {
    throw new Error(`the guest called ${m}.${name}`);
  };
}
const g = new WebAssembly.Instance(module, imports).exports;

function put(bytes) {
  const ptr = g.guest_buffer(bytes.length);
  new Uint8Array(g.memory.buffer, ptr, bytes.length).set(bytes);
}

const esm = readFileSync(esmPath);
put(esm);
const nOut = g.guest_load_model(esm.length);
if (nOut <= 0) throw new Error("the guest refused the artifact");
const rows = readFileSync(rowsPath);
put(rows);
const nRows = g.guest_load_rows(rows.length);
if (nRows !== rows.length / (4 * Number(nFeatures))) throw new Error(`the guest loaded ${nRows} rows`);

const lines = [];
for (let i = 0; i < Math.min(Number(nCheck), nRows); i++) {
  const ptr = g.guest_outputs(i);
  if (ptr === 0) throw new Error(`the guest could not score row ${i}`);
  const out = new Float32Array(g.memory.buffer, ptr, nOut);
  lines.push(`pred ${i} ${Array.from(out, (v) => v.toPrecision(9)).join(" ")}`);
}
if (lines.length) console.log(lines.join("\n"));

// Warm-up pass, then whole passes until the budget is spent (peer-native's loop).
let sink = g.guest_score(1);
const budget = Number(seconds) * 1e9;
const start = process.hrtime.bigint();
let calls = 0;
let elapsed = 0;
while (elapsed < budget) {
  sink += g.guest_score(1);
  calls += nRows;
  elapsed = Number(process.hrtime.bigint() - start);
}
if (!Number.isFinite(sink)) throw new Error("scoring failed");
console.log(JSON.stringify({ peer: "v8", ns_per_row: calls ? elapsed / calls : null, calls, v8: process.versions.v8 }));
