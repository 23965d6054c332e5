//! `edgescore-filter-trim MODULE.wasm [KEEP_LIST]`: the post-link step `make build` runs on the
//! filter (see the library's docs). The keep list defaults to `filter/callbacks.txt`.

use anyhow::Context;
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let module = PathBuf::from(args.next().context("usage: edgescore-filter-trim MODULE.wasm [KEEP_LIST]")?);
    let keep = args.next().map_or_else(|| PathBuf::from("filter/callbacks.txt"), PathBuf::from);
    let t = edgescore_filter_trim::trim_file(&module, &keep).with_context(|| format!("trimming {}", module.display()))?;
    if t.removed.is_empty() {
        println!("{}: already trimmed ({} bytes)", module.display(), t.bytes_after);
    } else {
        println!("{}: removed {} unused callback export(s) ({}), {} -> {} bytes", module.display(), t.removed.len(), t.removed.join(", "), t.bytes_before, t.bytes_after);
    }
    Ok(())
}
