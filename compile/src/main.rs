//! `edgescore`: compile trained tree models into `.esm` artifacts, inspect and score them.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use edgescore_compile::readers::Format;
use edgescore_compile::{inspect, rows};
use edgescore_filter::Model;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(name = "edgescore", version, about = "Compile, inspect and score edgescore tree-model artifacts")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile a trained model (XGBoost JSON, LightGBM text, CatBoost JSON, ONNX; gzip accepted).
    Compile {
        model: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        #[arg(long, value_enum, default_value = "auto")]
        format: Format,
        /// Model name recorded in the artifact (default: the file stem).
        #[arg(long)]
        name: Option<String>,
        /// Version string recorded in the artifact.
        #[arg(long)]
        version: Option<String>,
    },
    /// Describe an artifact: trees, nodes, depths, features, size, checksum.
    Inspect {
        artifact: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Score CSV rows (header row; empty cell = missing); one output line per row.
    Score {
        artifact: PathBuf,
        #[arg(long)]
        csv: PathBuf,
        /// Print margins instead of probabilities/values.
        #[arg(long)]
        raw: bool,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        // One line: the chain of contexts, outermost first.
        let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("edgescore: error: {}", msg.join(": "));
        std::process::exit(1);
    }
}

fn load_artifact(path: &PathBuf) -> Result<Model> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Model::load(&bytes).with_context(|| format!("{} is not a valid artifact", path.display()))
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Compile { model, output, format, name, version } => {
            let start = Instant::now();
            let mut ir = edgescore_compile::load_model(&model, format)?;
            ir.name = name.unwrap_or_else(|| {
                let stem = model.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                stem.trim_end_matches(".json").trim_end_matches(".txt").to_string()
            });
            if let Some(v) = version {
                ir.version = v;
            }
            let bytes = edgescore_compile::compile(&ir).with_context(|| format!("cannot compile {}", model.display()))?;
            // Validate what we wrote, exactly as the filter will.
            let loaded = Model::load(&bytes).context("the compiled artifact failed validation (compiler bug)")?;
            std::fs::write(&output, &bytes).with_context(|| format!("cannot write {}", output.display()))?;
            let e = loaded.ensemble();
            println!(
                "compiled {} ({:?}, {}) -> {}: {} trees, {} nodes, {} features, {} outputs, {} bytes, checksum {:016x}, {:.1} ms",
                model.display(),
                e.source(),
                e.objective(),
                output.display(),
                e.trees().len(),
                e.nodes().len(),
                e.n_features(),
                e.n_outputs(),
                bytes.len(),
                e.checksum(),
                start.elapsed().as_secs_f64() * 1e3
            );
        }
        Command::Inspect { artifact, json } => {
            let model = load_artifact(&artifact)?;
            let report = inspect::report(&model.ensemble());
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", inspect::render_text(&report));
            }
        }
        Command::Score { artifact, csv, raw } => {
            let model = load_artifact(&artifact)?;
            let e = model.ensemble();
            let rows = rows::read_rows(&csv, &e)?;
            let mut out = vec![0f64; e.n_outputs()];
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            for row in &rows {
                if raw { e.margins(row, &mut out)? } else { e.score_f64(row, &mut out)? }
                let line: Vec<String> = rows::reported(&e, &out, raw).iter().map(|&v| rows::format_value(v)).collect();
                writeln!(w, "{}", line.join(","))?;
            }
        }
    }
    Ok(())
}
