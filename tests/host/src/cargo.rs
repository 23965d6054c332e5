//! Building wasm artifacts from tests: `cargo` is run from the repository root, once per
//! process per argument list (callers in other threads wait for the first build); parallel
//! test processes are serialised by cargo's own target-directory lock.

use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

/// The repository (workspace) root (env `PROXY_HOST_REPO_ROOT` overrides it).
pub fn repo_root() -> PathBuf {
    if let Some(p) = std::env::var_os("PROXY_HOST_REPO_ROOT") {
        return PathBuf::from(p);
    }
    // This crate is tests/host/.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/host/ has a grandparent")
        .to_path_buf()
}

/// Runs `cargo <args>` in the repository root (the cargo running the tests, via `$CARGO`), at
/// most once per process for the same `args`; later calls return the first result.
pub fn cargo_once(args: &[&str]) -> Result<()> {
    type Slot = Arc<OnceLock<Result<(), String>>>;
    static RUNS: OnceLock<Mutex<HashMap<Vec<String>, Slot>>> = OnceLock::new();
    let key: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let slot = RUNS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_default()
        .clone();
    let r = slot.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(&cargo)
            .current_dir(repo_root())
            .args(args)
            .output()
            .map_err(|e| format!("running {cargo:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "cargo {} failed ({}):\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    });
    match r {
        Ok(()) => Ok(()),
        Err(e) => bail!("{e}"),
    }
}

/// Builds the host's test guest (`tests/guest`) and returns the path of its `.wasm`.
pub fn test_guest_wasm() -> Result<PathBuf> {
    let target = repo_root().join("target/guest");
    let target_s = target.to_str().context("non-UTF-8 path")?.to_string();
    cargo_once(&[
        "build",
        "--quiet",
        "--release",
        "--target",
        "wasm32-wasip1",
        "--manifest-path",
        "tests/guest/Cargo.toml",
        "--target-dir",
        &target_s,
    ])?;
    Ok(target.join("wasm32-wasip1/release/proxy_host_guest.wasm"))
}

/// Builds the filter as the Makefile does (`cargo build --profile wasm --target wasm32-wasip1
/// -p edgescore-filter`, then the post-link step that drops the callbacks it does not
/// implement, `filter/trim`) and returns `target/wasm32-wasip1/wasm/edgescore_filter.wasm`.
/// Uses the workspace target directory (`CARGO_TARGET_DIR` is not consulted).
pub fn filter_wasm() -> Result<PathBuf> {
    cargo_once(&[
        "build",
        "--quiet",
        "--profile",
        "wasm",
        "--target",
        "wasm32-wasip1",
        "-p",
        "edgescore-filter",
    ])?;
    let wasm = repo_root().join("target/wasm32-wasip1/wasm/edgescore_filter.wasm");
    static TRIMMED: OnceLock<Result<(), String>> = OnceLock::new();
    let trimmed = TRIMMED.get_or_init(|| {
        edgescore_filter_trim::trim_file(&wasm, &repo_root().join("filter/callbacks.txt")).map(drop).map_err(|e| e.to_string())
    });
    match trimmed {
        Ok(()) => Ok(wasm),
        Err(e) => bail!("{e}"),
    }
}

/// Builds the evaluator alone as a wasm module (benches/score_guest) as the shape matrix does
/// (`--profile wasm`) and returns the path of its `.wasm`.
pub fn score_guest_wasm() -> Result<PathBuf> {
    cargo_once(&["build", "--quiet", "--profile", "wasm", "--target", "wasm32-wasip1", "-p", "edgescore-score-guest"])?;
    Ok(repo_root().join("target/wasm32-wasip1/wasm/edgescore_score_guest.wasm"))
}
