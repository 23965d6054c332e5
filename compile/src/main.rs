//! `edgescore`: compile trained tree models into `.esm` artifacts, inspect and score them, and
//! publish them to a signed model registry (`docs/registry.md`).

/// mimalloc, not glibc's malloc: a compile is a burst of allocations on every core, and glibc
/// grew its per-thread arenas page by page (`mprotect`, then a fault per page): 5,500 page
/// faults and ~30 % of a CatBoost `.cbm` compile. The gain is mimalloc's transparent huge
/// pages, which can stall in page compaction on a fragmented machine (`MIMALLOC_ALLOW_THP=0`
/// turns them off). `compile` also puts a bump arena in front of it (`allocator.rs`). See
/// benches/compile_time/README.md.
#[global_allocator]
static GLOBAL: allocator::CliAllocator = allocator::CliAllocator;

mod allocator;

use edgescore_compile::registry;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use edgescore_compile::readers::Format;
use edgescore_compile::{features, inspect, report, rows, schema, SourceOptions};
use edgescore_core::Model;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "edgescore", version, about = "Compile, inspect and score edgescore tree-model artifacts")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How a trained model is read: `compile` takes these, and `inspect` of a trained model.
#[derive(Args)]
struct SourceArgs {
    #[arg(long, value_enum, default_value = "auto")]
    format: Format,
    /// Model name recorded in the artifact (default: the file stem).
    #[arg(long)]
    name: Option<String>,
    /// Version string recorded in the artifact.
    #[arg(long)]
    version: Option<String>,
    /// Feature schema (JSON): the filter's feature names in column order and the bucket
    /// count of each hashed categorical. Needed for models the filter will run.
    #[arg(long)]
    schema: Option<PathBuf>,
    /// The table `tls_ua_consistent` reads (JSON: user-agent family → the JA4s, or JA4
    /// prefixes ending in `*`, its real clients present), stored in the artifact (format 7;
    /// docs/security-teams.md, "TLS fingerprints").
    #[arg(long, value_name = "TABLE.json")]
    ua_fingerprints: Option<PathBuf>,
}

impl SourceArgs {
    fn options(&self) -> SourceOptions<'_> {
        SourceOptions {
            format: self.format,
            name: self.name.as_deref(),
            version: self.version.as_deref(),
            schema: self.schema.as_deref(),
            ua_fingerprints: self.ua_fingerprints.as_deref(),
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Compile a trained model (XGBoost JSON, LightGBM text, CatBoost JSON, ONNX; gzip accepted).
    Compile {
        model: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        source: SourceArgs,
        /// The newest artifact format the filters that will load it read (a fleet not yet
        /// upgraded): features of newer formats are left out where they are optional (NaN-low
        /// columns, format 4; zero-as-missing columns, format 5) and refused where the model
        /// needs them.
        #[arg(long, value_name = "VERSION", default_value_t = edgescore_core::artifact::layout::FORMAT_VERSION)]
        max_format: u32,
        /// Print on stderr where the time went: read, lay out, validate, write, rename.
        #[arg(long)]
        timings: bool,
        /// The training rows, or a sample (CSV as `score` reads it): store per input and for
        /// the score the reference distribution the filter's drift metrics are compared with
        /// (format 6; docs/operators.md, "Is my model stale?").
        #[arg(long, value_name = "ROWS.csv")]
        reference: Option<PathBuf>,
        /// Value bins per input and for the score in the drift reference (equal quantiles of
        /// the rows; equal values share a bin), besides the missing bin.
        #[arg(long, requires = "reference", default_value_t = edgescore_compile::drift::DEFAULT_BINS)]
        reference_bins: usize,
        /// Leave out the node values (NODE_VALUES: the leaves' covers, which per-request
        /// reasons and `explain` need): the artifact as small as a model without them.
        #[arg(long)]
        no_node_values: bool,
    },
    /// Compute the filter's feature vectors for recorded requests (JSON lines) as CSV.
    Features {
        /// Feature schema (JSON), or an artifact whose features to compute.
        #[arg(long, required_unless_present = "list")]
        schema: Option<PathBuf>,
        /// The filter's `hash_key` (categorical buckets depend on it).
        #[arg(long, env = "EDGESCORE_HASH_KEY", required_unless_present = "list")]
        hash_key: Option<String>,
        /// Requests, one JSON object per line (`-` = stdin).
        #[arg(long, default_value = "-")]
        requests: PathBuf,
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print the feature catalogue instead.
        #[arg(long)]
        list: bool,
        /// The UA fingerprint table `tls_ua_consistent` reads (as `compile` takes it), for a
        /// schema file; an artifact brings its own.
        #[arg(long, value_name = "TABLE.json")]
        ua_fingerprints: Option<PathBuf>,
    },
    /// Describe an artifact: trees, nodes, depths, features, size, checksum. Given a trained
    /// model instead, compile it in memory first (as `compile` would, nothing written).
    Inspect {
        /// An artifact (.esm), or a trained model in any format `compile` reads.
        model: PathBuf,
        #[arg(long, conflicts_with = "html")]
        json: bool,
        /// Write a self-contained HTML report (charts of shape, importance, thresholds).
        #[arg(long, value_name = "REPORT.html")]
        html: Option<PathBuf>,
        /// Rows to score for the report's score distribution (the CSV `score` reads).
        #[arg(long, requires = "html", value_name = "ROWS.csv")]
        csv: Option<PathBuf>,
        /// For a trained model: read it as `compile` does.
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Explain CSV rows: per row and output, the filter's path attribution (`saabas`) and
    /// exact TreeSHAP values (`treeshap`), a value per feature and the expected value, in
    /// margin space (each line adds up to the margin).
    Explain {
        /// An artifact (.esm) with node values, or a trained model in any format `compile` reads.
        model: PathBuf,
        #[arg(long)]
        csv: PathBuf,
        /// For a trained model: read it as `compile` does.
        #[command(flatten)]
        source: SourceArgs,
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
    /// Generate a publishing key pair: NAME.key (secret, mode 0600) and NAME.pub.
    Keygen {
        /// NAME: writes NAME.key and NAME.pub (refuses to overwrite either).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Publish an artifact to a registry directory: copy it content-addressed, give it the next
    /// version, compute its golden rows and re-sign the manifest atomically.
    Publish {
        artifact: PathBuf,
        /// The registry directory (created if needed); any static HTTP server can serve it.
        #[arg(long)]
        registry: PathBuf,
        /// A secret key (NAME.key from `edgescore keygen`); repeat to sign with several.
        #[arg(long = "key", required = true, value_name = "NAME.key")]
        keys: Vec<PathBuf>,
        /// How long the manifest stays valid (`expires`): `7d`, `36h`, `90m`, seconds. Readers
        /// refuse it afterwards: renew it before (`edgescore renew`, from cron).
        #[arg(long, value_name = "DURATION", default_value = registry::DEFAULT_VALID_FOR, value_parser = registry::parse_duration)]
        valid_for: u64,
        /// Publish as the model's shadow challenger (scored beside the active model, never acts).
        #[arg(long)]
        shadow: bool,
        /// The filter's hash_key (file content, trimmed): its id is recorded so a filter with
        /// another key refuses the model.
        #[arg(long)]
        hash_key_file: Option<PathBuf>,
        /// Golden rows (CSV, header = feature names, empty = missing; at most 8 rows) instead of
        /// rows derived from the model's own thresholds.
        #[arg(long)]
        golden_csv: Option<PathBuf>,
    },
    /// Re-sign the registry's manifest with the same models, the next sequence and a new
    /// expiry, so that readers keep accepting it (run it from cron well before it expires).
    Renew {
        /// The registry directory.
        registry: PathBuf,
        /// A secret key (NAME.key); repeat to sign with several.
        #[arg(long = "key", required = true, value_name = "NAME.key")]
        keys: Vec<PathBuf>,
        /// How long the renewed manifest stays valid: `7d`, `36h`, `90m`, seconds.
        #[arg(long, value_name = "DURATION", default_value = registry::DEFAULT_VALID_FOR, value_parser = registry::parse_duration)]
        valid_for: u64,
    },
    /// Add a signature by another key to the registry's manifest, its content unchanged, for
    /// readers that require several signatures (`registry.threshold`).
    Cosign {
        /// The registry directory.
        registry: PathBuf,
        /// A secret key (NAME.key); repeat to add several signatures.
        #[arg(long = "key", required = true, value_name = "NAME.key")]
        keys: Vec<PathBuf>,
    },
    /// Check a registry offline: the manifest's signatures, expiry and fields, and every
    /// artifact's size, sha256, validation, schema hash and golden rows.
    Verify {
        registry: PathBuf,
        /// A public key (NAME.pub) the manifest may be signed with; repeat for several.
        #[arg(long = "pub", required = true, value_name = "NAME.pub")]
        public_keys: Vec<PathBuf>,
        /// How many distinct keys of --pub must have signed (a reader's registry.threshold).
        #[arg(long, default_value_t = 1)]
        threshold: usize,
        /// The longest validity accepted (a reader's registry.max_validity_s): `31d`, seconds.
        #[arg(long, value_name = "DURATION", default_value_t = edgescore_core::registry::DEFAULT_MAX_VALIDITY_S, value_parser = registry::parse_duration)]
        max_validity: u64,
        /// Also check each model's hash-key id against this hash key (file content, trimmed).
        #[arg(long)]
        hash_key_file: Option<PathBuf>,
        /// Refuse artifacts over this many bytes (as the filter's limit would).
        #[arg(long)]
        max_bytes: Option<u64>,
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

/// How long each part of `write_validated` took (`compile --timings`).
#[derive(Default)]
struct WriteTimes {
    validate: Duration,
    write: Duration,
    rename: Duration,
}

/// `bytes` at `output`, only once they validated as an artifact: written beside it under a
/// temporary name (concurrently with the validation) and renamed over it, so a reader of
/// `output` (a registry directory, a file-watching deployment) never sees a partial or invalid
/// artifact, and a refused compile leaves the previous one in place.
fn write_validated(bytes: &[u8], output: &std::path::Path) -> Result<(Model, WriteTimes)> {
    let timed = |f: &dyn Fn() -> std::io::Result<()>| {
        let t = Instant::now();
        f().map(|()| t.elapsed())
    };
    let validated = || {
        let t = Instant::now();
        Model::load(bytes).map(|m| (m, t.elapsed()))
    };
    if output.symlink_metadata().is_ok_and(|m| !m.is_file()) {
        // `/dev/null`, a FIFO, a symbolic link: renaming over it would replace the device or
        // the link itself rather than write where it points.
        let (model, validate) = validated().context("the compiled artifact failed validation (compiler bug)")?;
        let write = timed(&|| std::fs::write(output, bytes)).with_context(|| format!("cannot write {}", output.display()))?;
        return Ok((model, WriteTimes { validate, write, ..WriteTimes::default() }));
    }
    let name = output.file_name().with_context(|| format!("{} is not a file path", output.display()))?;
    let partial = output.with_file_name(format!(".{}.partial-{}", name.to_string_lossy(), std::process::id()));
    let (loaded, written) = std::thread::scope(|s| {
        let writer = s.spawn(|| timed(&|| std::fs::write(&partial, bytes)));
        (validated(), writer.join().expect("the writing thread does not panic"))
    });
    let result = written.with_context(|| format!("cannot write {}", output.display())).and_then(|write| {
        let (model, validate) = loaded.context("the compiled artifact failed validation (compiler bug)")?;
        let rename = timed(&|| std::fs::rename(&partial, output)).with_context(|| format!("cannot write {}", output.display()))?;
        Ok((model, WriteTimes { validate, write, rename }))
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result
}

/// What a command left out of what it was given, on stderr: the output stays the data.
fn print_notes(notes: &[String]) {
    for note in notes {
        eprintln!("edgescore: note: {note}");
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Compile { model, output, source, max_format, timings, reference, reference_bins, no_node_values } => {
            let start = Instant::now();
            allocator::open_arena();
            let edgescore_compile::Source { mut ir, notes } = edgescore_compile::read_source(&model, &edgescore_compile::read_model_file(&model)?, &source.options())?;
            if no_node_values {
                ir.covers = None;
            }
            let read = start.elapsed();
            let bytes = match &reference {
                Some(rows) => edgescore_compile::compile_with_reference(&ir, max_format, rows, reference_bins),
                None => edgescore_compile::compile_for(&ir, max_format),
            }
            .with_context(|| format!("cannot compile {}", model.display()))?;
            let laid_out = start.elapsed();
            // Freeing a large model's IR node by node took ~5 % of a compile; the process is
            // about to exit, which returns it at once.
            std::mem::forget(ir);
            // Validate what we wrote, exactly as the filter will, while the file is written.
            let (loaded, times) = write_validated(&bytes, &output)?;
            print_notes(&notes);
            let e = loaded.ensemble();
            if timings {
                // "Validated" is the artifact in memory, checked as the filter checks it: what a
                // library's load gives (benches/compile_time compares the two).
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                eprintln!(
                    "timings: read {:.2} ms, lay out {:.2} ms, validate {:.2} ms (beside write {:.2} ms), rename {:.2} ms; validated at {:.2} ms",
                    ms(read),
                    ms(laid_out - read),
                    ms(times.validate),
                    ms(times.write),
                    ms(times.rename),
                    ms(laid_out + times.validate),
                );
            }
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
        Command::Features { list: true, .. } => {
            for (name, kind, meaning) in edgescore_core::features::CATALOGUE {
                println!("{name:<28} {:<12} {meaning}", format!("{kind:?}").to_lowercase());
            }
        }
        Command::Features { schema, hash_key, requests, output, ua_fingerprints, .. } => {
            let path = schema.context("--schema is required")?;
            let (s, table) = if path.extension().is_some_and(|e| e == "esm") {
                if ua_fingerprints.is_some() {
                    anyhow::bail!("{} is an artifact: it carries its own UA fingerprint table (--ua-fingerprints is for a schema file)", path.display());
                }
                let model = load_artifact(&path)?;
                let e = model.ensemble();
                let features = (0..e.n_features())
                    .map(|i| schema::SchemaFeature { name: e.feature_name(i).to_string(), buckets: e.features()[i].buckets })
                    .collect();
                (schema::SchemaFile { features }, e.ua_fingerprints().to_vec())
            } else {
                let table = ua_fingerprints.as_deref().map(edgescore_compile::ua_fingerprints::read).transpose()?.unwrap_or_default();
                (schema::SchemaFile::read(&path)?, table)
            };
            let key = hash_key.context("--hash-key is required")?;
            let input: Box<dyn std::io::BufRead> = if requests.as_os_str() == "-" {
                Box::new(std::io::stdin().lock())
            } else {
                Box::new(std::io::BufReader::new(
                    std::fs::File::open(&requests).with_context(|| format!("cannot read {}", requests.display()))?,
                ))
            };
            let out: Box<dyn Write> = match &output {
                Some(p) => Box::new(std::io::BufWriter::new(std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?)),
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            features::write_table(&s, &table, &key, input, out)?;
        }
        Command::Inspect { model, html: Some(html), csv, source, .. } => {
            let inspected = edgescore_compile::load_for_inspect(&model, &source.options())?;
            print_notes(&inspected.notes);
            let e = inspected.model.ensemble();
            let rows = csv.as_ref().map(|path| rows::read_rows(path, &e)).transpose()?;
            let source = csv.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            let rows = rows.as_ref().map(|rows| report::Rows { source: &source, rows });
            let built = report::build(&e, inspected.origin, rows).with_context(|| format!("cannot report on {}", model.display()))?;
            std::fs::write(&html, report::render_html(&built)).with_context(|| format!("cannot write {}", html.display()))?;
            println!(
                "{} -> {}: {} trees, gain {}, {}",
                model.display(),
                html.display(),
                built.summary.trees,
                if built.gain == report::Gain::Recorded { "from the source" } else { "not available" },
                built.scores.as_ref().map_or("no rows scored".to_string(), |s| format!("{} rows scored", s.rows)),
            );
        }
        Command::Inspect { model, json, html: None, source, .. } => {
            // With reasons' tables, so that the report shows what they cost.
            let inspected = edgescore_compile::load_for_inspect(&model, &source.options())?;
            print_notes(&inspected.notes);
            let model = inspected.model.with_explainer();
            let report = inspect::report(&model.ensemble());
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", inspect::render_text(&report));
            }
        }
        Command::Explain { model, csv, source } => {
            let inspected = edgescore_compile::load_for_inspect(&model, &source.options())?;
            print_notes(&inspected.notes);
            let model = inspected.model.with_explainer();
            let e = model.ensemble();
            let rows = rows::read_rows(&csv, e)?;
            let stdout = std::io::stdout();
            let mut w = std::io::BufWriter::new(stdout.lock());
            edgescore_compile::explain::write_csv(e, &rows, &mut w)?;
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
        Command::Keygen { output } => registry::keygen(&output)?,
        Command::Publish { artifact, registry: dir, keys, valid_for, shadow, hash_key_file, golden_csv } => {
            registry::publish(registry::Publish { artifact, registry: dir, keys, valid_for_s: valid_for, shadow, hash_key_file, golden_csv })?
        }
        Command::Renew { registry: dir, keys, valid_for } => registry::renew(registry::Renew { registry: dir, keys, valid_for_s: valid_for })?,
        Command::Cosign { registry: dir, keys } => registry::cosign(&dir, &keys)?,
        Command::Verify { registry: dir, public_keys, threshold, max_validity, hash_key_file, max_bytes } => {
            let wants = registry::VerifyPolicy { threshold, max_validity_s: max_validity };
            registry::verify(&dir, &public_keys, hash_key_file.as_deref(), max_bytes, wants)?
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser};

    /// clap's own consistency check of the command line (names that `conflicts_with`,
    /// `requires` and `required_unless_present` refer to exist, no duplicate flags).
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// A usage error is clap's: exit 2 with the usage (docs: README.md, docs/registry.md); the
    /// command's own errors exit 1 (`main`).
    #[test]
    fn usage_errors_exit_2() {
        for args in [&["edgescore", "compile", "m.json"][..], &["edgescore", "score", "m.esm", "--bogus"], &["edgescore"]] {
            let e = Cli::try_parse_from(args).err().unwrap_or_else(|| panic!("{args:?} parsed"));
            assert_eq!(e.exit_code(), 2, "{args:?}");
            assert!(e.render().to_string().contains("Usage: edgescore"), "{args:?}: {}", e.render());
        }
    }
}
