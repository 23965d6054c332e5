//! The filter's per-request cost inside wasmtime against the same work natively (issue 3,
//! "Speed": features + 3 models of the reference size, ratio ≤ 1.5). See benches/README.md.
//!
//! Variants, measured in interleaved rounds (a b c d e a b c d e ...):
//!   native        `replay::score_all`: `Scorer::score` over the request set, natively.
//!   wasm-score    the same `replay::score_all`, compiled into the filter (`--features
//!                 bench-exports`, built into target/bench-wasm) and called through one export on
//!                 a bare wasmtime instance: the wasm vs native execution ratio.
//!   wasm-stream   the shipped .wasm through the proxy-wasm test host: per request a stream with
//!                 its properties, `proxy_on_request_headers` (headers, properties, scoring,
//!                 header replacement, filter state, metrics), then `proxy_on_log`, `_done`,
//!                 `_delete` -- what Envoy calls, plus the harness host's own cost.
//!   noop-calls    the no-op filter of benches/envoy_load making the same host calls as the
//!                 filter (`FILTER_MIX` in benches/envoy_load/run.py) through the same host: the
//!                 ABI + harness floor under wasm-stream.
//!   noop          the no-op filter with no host calls: the stream lifecycle alone.
//!
//!   cargo bench -p edgescore-benches --bench filter_wasm [-- --rounds 7 --ms 300 --models a.esm,b.esm,c.esm
//!                                                          --requests FILE.jsonl --only native,wasm-score
//!                                                          --passes N --bench-wasm FILE.wasm --dump-elf OUT]
//!
//! The models default to target/bench-models/{bot,scanner,abuse}.esm (`make bench-models`);
//! EDGESCORE_BENCH_FILTER_MODELS="a.esm,b.esm,c.esm" or `--models` override them.

use anyhow::{bail, ensure, Context, Result};
use base64::Engine as _;
use edgescore_benches::repo_root;
use edgescore_core::replay::score_all;
use edgescore_core::{OwnedRequest, Property};
use edgescore_core::{HeaderMap, Model, PluginConfig, Scorer};
use edgescore_proxy_host::{cargo, Action, Host, Vm};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The scorer's feature-log sampler seed (the bench exports use the same).
const SEED: u64 = 1;
const TARGET_RATIO: f64 = 1.5;

#[derive(Deserialize)]
struct Recorded {
    headers: Vec<(String, String)>,
    #[serde(default)]
    properties: BTreeMap<String, String>,
    #[serde(default)]
    kind: String,
}

struct Args {
    rounds: usize,
    budget: Duration,
    models: Vec<PathBuf>,
    requests: PathBuf,
    /// Run only these variants (for profiling).
    only: Option<Vec<String>>,
    /// Fixed passes over the request set per measurement instead of the time budget (for
    /// instruction counts under callgrind).
    passes: Option<u32>,
    /// A prebuilt bench-exports .wasm for wasm-score (e.g. built with other target features).
    bench_wasm: Option<PathBuf>,
    /// Write wasm-score's module as compiled by this engine (an ELF: `objdump -d` it) and exit.
    dump_elf: Option<PathBuf>,
}

fn parse_args() -> Result<Option<Args>> {
    let root = repo_root();
    let mut a = Args {
        rounds: 7,
        budget: Duration::from_millis(300),
        models: match std::env::var("EDGESCORE_BENCH_FILTER_MODELS") {
            Ok(list) => list.split(',').map(PathBuf::from).collect(),
            Err(_) => ["bot", "scanner", "abuse"].iter().map(|n| root.join(format!("target/bench-models/{n}.esm"))).collect(),
        },
        requests: root.join("tests/golden/requests.jsonl"),
        only: None,
        passes: None,
        bench_wasm: None,
        dump_elf: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--rounds" => a.rounds = value()?.parse()?,
            "--ms" => a.budget = Duration::from_millis(value()?.parse()?),
            "--models" => a.models = value()?.split(',').map(PathBuf::from).collect(),
            "--requests" => a.requests = PathBuf::from(value()?),
            "--only" => a.only = Some(value()?.split(',').map(str::to_string).collect()),
            "--passes" => a.passes = Some(value()?.parse()?),
            "--bench-wasm" => a.bench_wasm = Some(PathBuf::from(value()?)),
            "--dump-elf" => a.dump_elf = Some(PathBuf::from(value()?)),
            // `cargo bench -- NAME` passes NAME to every bench: run only if it selects this one.
            name if !name.starts_with('-') => {
                if !"filter_wasm".contains(name) {
                    return Ok(None);
                }
            }
            other => bail!("unknown option {other} (--rounds N, --ms MS, --passes N, --models a,b,c, --requests FILE, --only v1,v2, --bench-wasm FILE, --dump-elf OUT)"),
        }
    }
    ensure!(a.rounds > 0, "--rounds must be at least 1");
    Ok(Some(a))
}

/// The plugin configuration every variant uses: the models with thresholds above 1 (every
/// model runs and every request gets the score headers, none is answered locally), enforce
/// mode, no feature log -- as benches/envoy_load configures Envoy.
fn plugin_config(models: &[Vec<u8>]) -> Result<String> {
    let hash_key = std::fs::read_to_string(repo_root().join("models/example/hash_key.txt"))?.trim().to_string();
    let entries: Vec<serde_json::Value> = models
        .iter()
        .map(|m| {
            serde_json::json!({
                "artifact": base64::engine::general_purpose::STANDARD.encode(m),
                "threshold": 1.5,
                "action": "block",
                "status": 403,
                "body": "blocked by edgescore\n",
            })
        })
        .collect();
    Ok(serde_json::json!({
        "mode": "enforce",
        "hash_key": hash_key,
        "on_error": "allow",
        "headers": {"scores": "x-edgescore", "decision": "x-edgescore-decision"},
        "feature_log": {"sample_rate": 0.0},
        "models": entries,
    })
    .to_string())
}

/// One request as each side gets it: the filter's wire format, and pairs for the test host.
struct BenchRequest {
    owned: OwnedRequest,
    headers: edgescore_proxy_host::HeaderMap,
    properties: Vec<([&'static str; 2], String)>,
}

fn load_requests(path: &Path) -> Result<(Vec<BenchRequest>, BTreeMap<String, usize>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    let mut kinds = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let r: Recorded = serde_json::from_str(line).with_context(|| format!("{}:{}", path.display(), i + 1))?;
        *kinds.entry(if r.kind.is_empty() { "-".into() } else { r.kind.clone() }).or_default() += 1;
        let mut properties = Vec::new();
        let mut props = Vec::new();
        for (k, v) in &r.properties {
            let Some(p) = Property::from_name(k.as_bytes()) else { continue };
            let (a, b) = p.name().split_once('.').unwrap();
            properties.push(([a, b], v.clone()));
            props.push((k.as_bytes(), v.as_bytes()));
        }
        let owned = OwnedRequest::decode(&HeaderMap::encode(&r.headers), &HeaderMap::encode(&props))
            .map_err(|e| anyhow::anyhow!("request {}: {e}", i + 1))?;
        out.push(BenchRequest { owned, headers: edgescore_proxy_host::HeaderMap::from_pairs(r.headers.iter().map(|(k, v)| (k, v))), properties });
    }
    ensure!(!out.is_empty(), "no requests in {}", path.display());
    Ok((out, kinds))
}

/// The filter with `bench-exports`, in its own target directory so the shipped .wasm stays as
/// `make build` made it. Same profile (`wasm`) and target as the shipped one.
fn bench_wasm() -> Result<PathBuf> {
    let dir = repo_root().join("target/bench-wasm");
    let dir_s = dir.to_str().context("non-UTF-8 path")?;
    cargo::cargo_once(&[
        "build", "--quiet", "--profile", "wasm", "--target", "wasm32-wasip1", "-p", "edgescore-filter",
        "--features", "bench-exports", "--target-dir", dir_s,
    ])?;
    Ok(dir.join("wasm32-wasip1/wasm/edgescore_filter.wasm"))
}

/// The no-op filter's host-call plan: the calls the edgescore filter makes per request, read
/// from `FILTER_MIX` in benches/envoy_load/run.py (kept there, next to the filter's Envoy bench),
/// e.g. `headers=1,properties=1,replace=2,set_property=1,increment=5,record=3`.
fn noop_plan() -> Result<String> {
    let path = repo_root().join("benches/envoy_load/run.py");
    let text = std::fs::read_to_string(&path)?;
    let line = text.lines().find(|l| l.starts_with("FILTER_MIX = {")).with_context(|| format!("no `FILTER_MIX = {{...}}` line in {}", path.display()))?;
    let body = line.split_once('{').and_then(|(_, b)| b.split_once('}')).map(|(b, _)| b).context("FILTER_MIX is not a one-line dict")?;
    let mut plan = Vec::new();
    for item in body.split(',') {
        let (k, v) = item.split_once(':').with_context(|| format!("FILTER_MIX item {item:?}"))?;
        let n: u32 = v.trim().parse().with_context(|| format!("FILTER_MIX item {item:?}"))?;
        plan.push(format!("{}={n}", k.trim().trim_matches('"')));
    }
    Ok(plan.join(","))
}

/// benches/envoy_load's no-op filter, built where its run.py builds it.
fn noop_wasm() -> Result<PathBuf> {
    let root = repo_root();
    let dir = root.join("target/envoy-bench-noop");
    let manifest = root.join("benches/envoy_load/noop/Cargo.toml");
    cargo::cargo_once(&[
        "build", "--quiet", "--release", "--target", "wasm32-wasip1",
        "--manifest-path", manifest.to_str().context("non-UTF-8 path")?,
        "--target-dir", dir.to_str().context("non-UTF-8 path")?,
    ])?;
    Ok(dir.join("wasm32-wasip1/release/edgescore_noop_filter.wasm"))
}

/// The bench-exports filter on a bare wasmtime instance: no proxy-wasm host, every import a
/// trap (scoring makes no host call, so a trap would mean it did). Same engine settings as the
/// test host (`Config::new()` + Cranelift `OptLevel::Speed`).
struct BareFilter {
    store: wasmtime::Store<()>,
    score: wasmtime::TypedFunc<u32, i64>,
}

fn bare_engine() -> Result<wasmtime::Engine> {
    let mut cfg = wasmtime::Config::new();
    cfg.cranelift_opt_level(wasmtime::OptLevel::Speed);
    Ok(wasmtime::Engine::new(&cfg)?)
}

impl BareFilter {
    fn new(path: &Path, config: &str, requests: &[BenchRequest]) -> Result<BareFilter> {
        let engine = bare_engine()?;
        let module = wasmtime::Module::from_file(&engine, path)?;
        let mut linker = wasmtime::Linker::new(&engine);
        linker.define_unknown_imports_as_traps(&module)?;
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = linker.instantiate(&mut store, &module)?;
        instance.get_typed_func::<(), ()>(&mut store, "_initialize")?.call(&mut store, ())?;
        let memory = instance.get_memory(&mut store, "memory").context("no memory export")?;
        let buffer = instance.get_typed_func::<u32, u32>(&mut store, "edgescore_bench_buffer")?;
        let configure = instance.get_typed_func::<u32, i32>(&mut store, "edgescore_bench_configure")?;
        let add = instance.get_typed_func::<(u32, u32), i32>(&mut store, "edgescore_bench_add_request")?;
        let score = instance.get_typed_func::<u32, i64>(&mut store, "edgescore_bench_score")?;
        let put = |store: &mut wasmtime::Store<()>, bytes: &[u8]| -> Result<()> {
            let ptr = buffer.call(&mut *store, bytes.len() as u32)?;
            memory.write(&mut *store, ptr as usize, bytes)?;
            Ok(())
        };
        put(&mut store, config.as_bytes())?;
        ensure!(configure.call(&mut store, config.len() as u32)? == 1, "edgescore_bench_configure refused the configuration");
        for r in requests {
            let props = HeaderMap::encode(
                &Property::ALL.iter().zip(&r.owned.properties).filter_map(|(k, v)| Some((k.name().as_bytes(), v.as_deref()?))).collect::<Vec<_>>(),
            );
            put(&mut store, &[r.owned.headers.as_slice(), &props].concat())?;
            ensure!(add.call(&mut store, (r.owned.headers.len() as u32, props.len() as u32))? > 0, "edgescore_bench_add_request refused a request");
        }
        Ok(BareFilter { store, score })
    }

    fn run(&mut self, passes: u32) -> Result<u64> {
        Ok(self.score.call(&mut self.store, passes)? as u64)
    }
}

/// One request through a proxy-wasm VM the way Envoy drives an HTTP filter.
fn stream(vm: &mut Vm, r: &BenchRequest) -> Result<edgescore_proxy_host::Stream> {
    let s = vm.stream();
    for (path, value) in &r.properties {
        s.set_property(path, value);
    }
    let action = vm.request_headers(&s, &r.headers, true)?;
    ensure!(action == Action::Continue, "request headers returned {action:?}");
    vm.done(&s)?;
    Ok(s)
}

struct Variant<'a> {
    name: &'static str,
    what: &'static str,
    /// Runs `passes` passes over the request set.
    run: Box<dyn FnMut(u32) -> Result<()> + 'a>,
    passes: u32,
    ns_per_request: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

fn main() -> Result<()> {
    let Some(args) = parse_args()? else { return Ok(()) };
    let root = repo_root();
    let rel = |p: &Path| p.strip_prefix(&root).unwrap_or(p).display().to_string();

    let mut artifacts = Vec::new();
    let mut model_lines = Vec::new();
    for path in &args.models {
        let bytes = std::fs::read(path).with_context(|| {
            format!("reading {} (the reference-size models: `make bench-models`, or --models a.esm,b.esm,c.esm)", path.display())
        })?;
        let model = Model::load(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let e = model.ensemble();
        model_lines.push(format!(
            "{} ({:?}, {} trees, {} nodes, {} KB)",
            e.name(),
            e.source(),
            e.trees().len(),
            e.nodes().len(),
            e.size_bytes() / 1024
        ));
        artifacts.push(bytes);
    }
    let config = plugin_config(&artifacts)?;
    let (requests, kinds) = load_requests(&args.requests)?;
    let n = requests.len();

    eprintln!("building the filter (shipped and with bench-exports) and the no-op filter ...");
    let shipped = cargo::filter_wasm()?;
    let bench = match &args.bench_wasm {
        Some(p) => p.clone(),
        None => bench_wasm()?,
    };
    let noop = noop_wasm()?;
    let plan = noop_plan()?;

    // Native.
    let mut scorer = Scorer::new(&PluginConfig::parse(config.as_bytes())?, SEED)?;
    let owned: Vec<OwnedRequest> = requests.iter().map(|r| r.owned.clone()).collect();
    let native_sum = score_all(&mut scorer, &owned, 1)?;
    let mut native_headers = Vec::new();
    for r in &owned {
        scorer.decide(&r.request()?, true)?;
        native_headers.push(scorer.scores_header().to_vec());
    }

    let want = |name: &str| args.only.as_ref().is_none_or(|o| o.iter().any(|x| x == name));
    let each = |vm: &mut Vm, passes: u32| -> Result<()> {
        for _ in 0..passes {
            for r in &requests {
                stream(vm, r)?;
            }
        }
        Ok(())
    };
    let mut variants: Vec<Variant> = Vec::new();
    let variant = |name, what, run| Variant { name, what, run, passes: 1, ns_per_request: vec![] };
    if want("native") {
        let (scorer, owned) = (&mut scorer, &owned);
        variants.push(variant(
            "native",
            "replay::score_all -> Scorer::decide (release, LTO)",
            Box::new(move |p| {
                std::hint::black_box(score_all(scorer, std::hint::black_box(owned), p)?);
                Ok(())
            }),
        ));
    }
    if let Some(out) = &args.dump_elf {
        std::fs::write(out, bare_engine()?.precompile_module(&std::fs::read(&bench)?)?)?;
        eprintln!("wrote {} (the compiled {}; objdump -d it)", out.display(), rel(&bench));
        return Ok(());
    }
    eprintln!("compiling the .wasm modules with Cranelift (OptLevel::Speed) ...");
    if want("wasm-score") {
        // The filter with bench-exports on a bare instance; checked against the native run.
        let mut bare = BareFilter::new(&bench, &config, &requests)?;
        let wasm_sum = bare.run(1)?;
        ensure!(wasm_sum == native_sum, "the wasm scorer's checksum {wasm_sum:#x} differs from the native {native_sum:#x}");
        variants.push(variant(
            "wasm-score",
            "the same loop in the .wasm, one export call",
            Box::new(move |p| {
                std::hint::black_box(bare.run(p)?);
                Ok(())
            }),
        ));
    }
    if want("wasm-stream") {
        // The shipped filter through the proxy-wasm host; its score header checked against native.
        let host = Host::new(&shipped)?;
        let mut vm = host.vm(b"")?;
        ensure!(vm.configure(config.as_bytes())?, "the filter refused the configuration: {:?}", vm.log_messages());
        for (r, want) in requests.iter().zip(&native_headers) {
            let s = stream(&mut vm, r)?;
            let got = s.request_headers().get("x-edgescore").map(<[u8]>::to_vec);
            ensure!(
                got.as_deref() == Some(want.as_slice()),
                "x-edgescore {:?} != native {:?}",
                got.as_deref().map(String::from_utf8_lossy),
                String::from_utf8_lossy(want)
            );
        }
        variants.push(variant("wasm-stream", "shipped .wasm: stream + on_request_headers + log/done/delete", Box::new(move |p| each(&mut vm, p))));
    }
    if want("noop-calls") || want("noop") {
        let noop_host = Host::new(&noop)?;
        if want("noop-calls") {
            let mut vm = noop_host.vm(b"")?;
            ensure!(vm.configure(plan.as_bytes())?, "the no-op filter refused its plan {plan}");
            variants.push(variant("noop-calls", "no-op filter making the filter's host calls", Box::new(move |p| each(&mut vm, p))));
        }
        if want("noop") {
            let mut vm = noop_host.vm(b"")?;
            ensure!(vm.configure(b"")?, "the no-op filter refused an empty plan");
            variants.push(variant("noop", "no-op filter, no host calls", Box::new(move |p| each(&mut vm, p))));
        }
    }
    ensure!(!variants.is_empty(), "--only selected no variant (native, wasm-score, wasm-stream, noop-calls, noop)");

    // Warm-up and calibration: passes per measurement so that each takes about the budget.
    for v in &mut variants {
        (v.run)(1)?;
        let t = Instant::now();
        (v.run)(1)?;
        let one = t.elapsed().as_secs_f64().max(1e-9);
        v.passes = args.passes.unwrap_or(((args.budget.as_secs_f64() / one) as u32).max(1));
    }
    let load_before = loadavg();
    for _ in 0..args.rounds {
        for v in &mut variants {
            let t = Instant::now();
            (v.run)(v.passes)?;
            v.ns_per_request.push(t.elapsed().as_nanos() as f64 / (v.passes.max(1) as f64 * n as f64));
        }
    }
    let load_after = loadavg();

    // Report. Ratios are medians of per-round ratios (the rounds interleave the variants).
    let times = |name: &str| variants.iter().find(|v| v.name == name).map(|v| v.ns_per_request.clone());
    let ratios = |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| x / y).collect() };
    let min = |v: &[f64]| v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
    println!("edgescore filter: per-request cost in wasmtime vs native");
    println!(
        "wasmtime 48.0.8, Cranelift OptLevel::Speed; {} requests from {} ({}); load avg {} before, {} after",
        n,
        rel(&args.requests),
        kinds.iter().map(|(k, c)| format!("{c} {k}")).collect::<Vec<_>>().join(", "),
        load_before,
        load_after
    );
    println!("models: {}", model_lines.join(", "));
    println!("modules: {} (wasm-stream), {} (wasm-score), {} (noop)", rel(&shipped), rel(&bench), rel(&noop));
    println!("noop-calls plan (FILTER_MIX in benches/envoy_load/run.py): {plan}");
    println!(
        "{} rounds x ~{} ms per variant, interleaved; ns/request: median (min - max) over rounds; wasm checksums and x-edgescore headers equal native",
        args.rounds,
        args.budget.as_millis()
    );
    println!();
    println!("{:<12} {:>9} {:>9} {:>9} {:>8}  what", "variant", "ns/req", "min", "max", "/native");
    println!("{}", "-".repeat(104));
    let native = times("native");
    let row = |name: &str, t: &[f64], what: &str| {
        let r = native.as_ref().map_or("-".to_string(), |nat| format!("{:.2}", median(&ratios(t, nat))));
        println!("{:<12} {:>9.0} {:>9.0} {:>9.0} {:>8}  {}", name, median(t), min(t), max(t), r, what);
    };
    for v in &variants {
        row(v.name, &v.ns_per_request, v.what);
    }
    if let (Some(stream), Some(calls)) = (times("wasm-stream"), times("noop-calls")) {
        let derived: Vec<f64> = stream.iter().zip(&calls).map(|(s, c)| s - c).collect();
        row("derived", &derived, "wasm-stream - noop-calls: the filter's own work inside its callbacks");
    }
    println!();
    if let (Some(nat), Some(wasm)) = (&native, times("wasm-score")) {
        let r = ratios(&wasm, nat);
        let ratio = median(&r);
        println!(
            "wasm/native execution ratio (wasm-score / native): {ratio:.2} (rounds {:.2} - {:.2}); target <= {TARGET_RATIO}: {}",
            min(&r),
            max(&r),
            if ratio <= TARGET_RATIO { "met" } else { "NOT met" }
        );
    }
    if let (Some(stream), Some(calls)) = (times("wasm-stream"), times("noop-calls")) {
        print!(
            "harness + ABI floor (noop-calls): {:.0} ns/request = {:.0}% of wasm-stream",
            median(&calls),
            100.0 * median(&ratios(&calls, &stream))
        );
        match times("noop") {
            Some(lifecycle) => println!("; the stream lifecycle alone (noop): {:.0} ns", median(&lifecycle)),
            None => println!(),
        }
    }
    Ok(())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next().map(str::to_string)).unwrap_or_else(|| "?".into())
}
