//! The page: sections for the summary, shape, schema, importance, thresholds and scores, each
//! chart a `<figure class="chart" data-chart="…">`. maud escapes every interpolated string, so
//! a feature named `<script>` is text on the page, never markup.

use super::shape::FeatureKind;
use super::svg::{self, number, Bar, Column};
use super::{Gain, ModelReport, OutputScores, ScoreDistribution, QUANTILES};
use maud::{html, Markup, PreEscaped, DOCTYPE};

const STYLE: &str = "
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; color: #1d2430; margin: 0; background: #f6f7f9; }
main { max-width: 1160px; margin: 0 auto; padding: 24px; }
h1 { font-size: 26px; margin: 0 0 4px; } h1 small { color: #5b6575; font-weight: 400; }
h2 { font-size: 18px; margin: 0 0 12px; }
section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: 16px 20px; margin: 16px 0; }
.subtitle { color: #5b6575; margin: 0; }
dl.facts { display: grid; grid-template-columns: repeat(4, 1fr); gap: 8px 24px; margin: 0; }
dl.facts div { min-width: 0; } dt { color: #5b6575; font-size: 12px; } dd { margin: 0; overflow-wrap: anywhere; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; } figcaption { font-weight: 600; margin-bottom: 4px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 10px 3px 0; border-bottom: 1px solid #eef0f3; vertical-align: middle; }
th { font-size: 12px; color: #5b6575; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #5b6575; font-style: italic; }
.kind-hashed { color: #8a4b00; } .kind-categorical { color: #6a3d9a; }
svg text { font: 11px system-ui, sans-serif; fill: #3a4252; } svg text.title { font-weight: 600; } svg text.label { font-size: 12px; }
svg .bar { fill: #3b73b9; } svg .bar:hover { fill: #1f4f8f; }
svg .grid { stroke: #e6e9ee; } svg .axis { stroke: #8a93a3; } svg .mark { stroke: #c0392b; stroke-width: 1; shape-rendering: crispEdges; }
.outputs { display: flex; flex-wrap: wrap; gap: 24px; } .outputs table { width: auto; }
";

pub(super) fn page(r: &ModelReport) -> Markup {
    let s = &r.summary;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "edgescore model report: " (s.name) "@" (s.version) }
                style { (PreEscaped(STYLE)) }
            }
            body { main {
                header {
                    h1 { (s.name) " " small { "@" (s.version) } }
                    p.subtitle { (s.source) " · " (s.objective) " · " (s.task) }
                }
                (summary(r))
                (shape(r))
                (schema(r))
                (importance(r))
                (thresholds(r))
                (scores(r.scores.as_ref()))
                (drift(r.summary.drift_reference.as_ref()))
            } }
        }
    }
}

fn summary(r: &ModelReport) -> Markup {
    let s = &r.summary;
    let base: Vec<String> = s.base_score.iter().map(|&b| number(b)).collect();
    let facts: [(&str, String); 12] = [
        ("trees", s.trees.to_string()),
        ("nodes", s.nodes.to_string()),
        ("leaves", format!("{} ({})", s.leaves, s.leaf_kind)),
        ("deepest tree", s.depth_histogram.len().saturating_sub(1).to_string()),
        ("features", s.n_features.to_string()),
        ("features split on", s.features_used.len().to_string()),
        ("outputs", s.n_outputs.to_string()),
        ("base score", base.join(", ")),
        ("CTR features", s.ctr_features.to_string()),
        ("size", format!("{} bytes", s.size_bytes)),
        ("checksum (xxh3-64)", s.checksum.clone()),
        ("source format", s.source.clone()),
    ];
    html! {
        section #summary {
            dl.facts {
                @for (k, v) in &facts {
                    div data-fact=(k) { dt { (k) } dd { (v) } }
                }
            }
        }
    }
}

fn figure(chart: &str, caption: &str, body: Markup) -> Markup {
    html! { figure.chart data-chart=(chart) { figcaption { (caption) } (body) } }
}

fn shape(r: &ModelReport) -> Markup {
    let depth: Vec<Column> = r
        .summary
        .depth_histogram
        .iter()
        .enumerate()
        .map(|(d, &n)| Column { label: d.to_string(), value: n as f64, tip: format!("{n} tree(s) of depth {d}") })
        .collect();
    let leaves: Vec<Column> = r
        .shape
        .leaves_histogram()
        .iter()
        .map(|b| {
            let (lo, last) = (b.lo as usize, b.hi as usize - 1);
            let label = if last == lo { lo.to_string() } else { format!("{lo}–{last}") };
            Column { tip: format!("{} tree(s) with {label} leaves", b.count), label, value: b.count as f64 }
        })
        .collect();
    html! {
        section #shape {
            h2 { "Shape" }
            div.charts {
                (figure("depth", "Trees by depth", svg::columns(&depth, "depth (splits on the longest path)", "trees", true)))
                (figure("leaves", "Trees by number of leaves", svg::columns(&leaves, "leaves per tree", "trees", true)))
            }
        }
    }
}

fn schema(r: &ModelReport) -> Markup {
    let splits = |i: usize| r.summary.features_used.iter().find(|f| f.index == i).map_or(0, |f| f.splits);
    html! {
        section #schema {
            h2 { "Schema" }
            table {
                thead { tr { th.num { "#" } th { "feature" } th { "kind" } th.num { "splits" } th { "what the filter computes" } } }
                tbody {
                    @for f in &r.schema {
                        tr data-feature=(f.name) {
                            td.num { (f.index) }
                            td { code { (f.name) } }
                            @match f.kind {
                                FeatureKind::Numeric => td { "numeric" },
                                FeatureKind::Hashed { buckets } => td.kind-hashed { "hashed categorical, " (buckets) " buckets" },
                                FeatureKind::Categorical { buckets } => td.kind-categorical { "categorical, " (buckets) " codes" },
                            }
                            td.num { (splits(f.index)) }
                            td { @match f.meaning { Some(m) => (m), None => span.note { "not in the filter's feature catalogue" } } }
                        }
                    }
                }
            }
            @if r.summary.ctr_features > 0 {
                p.note { (r.summary.ctr_features) " CatBoost CTR feature(s) are computed from these inputs; splits on them are listed as ctrK(…)." }
            }
        }
    }
}

fn importance(r: &ModelReport) -> Markup {
    let split_bars: Vec<Bar> = r
        .importance
        .iter()
        .map(|f| Bar { label: f.name.clone(), value: f.splits as f64, tip: format!("{} [{}]: {} split(s)", f.name, f.index, f.splits) })
        .collect();
    let mut by_gain: Vec<&super::FeatureImportance> = r.importance.iter().collect();
    by_gain.sort_by(|a, b| b.gain.unwrap_or(0.0).total_cmp(&a.gain.unwrap_or(0.0)).then(a.index.cmp(&b.index)));
    let gain_bars: Vec<Bar> = by_gain
        .iter()
        .map(|f| {
            let total = f.gain.unwrap_or(0.0);
            let mean = total / f.splits.max(1) as f64;
            Bar { label: f.name.clone(), value: total, tip: format!("{} [{}]: total gain {}, {} per split", f.name, f.index, number(total), number(mean)) }
        })
        .collect();
    html! {
        section #importance {
            h2 { "Feature importance" }
            (figure("splits", "Splits per feature", svg::bars(&split_bars, "splits", true)))
            @match &r.gain {
                Gain::Recorded => (figure("gain", "Total gain per feature (as the training library recorded it)", svg::bars(&gain_bars, "total gain", false))),
                Gain::Unavailable(why) => p.note #gain-unavailable { "Gain is not available: " (why) "." },
            }
        }
    }
}

fn thresholds(r: &ModelReport) -> Markup {
    html! {
        section #thresholds {
            h2 { "Thresholds" }
            p.note { "As the filter tests them: every numeric split is x < t in f32 (the compiler rewrites ≤, > and ≥ to that form)." }
            table {
                thead { tr {
                    th { "feature" } th.num { "comparisons" } th.num { "distinct thresholds" } th.num { "min" } th.num { "max" }
                    th { "thresholds, min to max" } th.num { "set splits" }
                } }
                tbody {
                    @for t in &r.thresholds {
                        tr data-feature=(t.name) {
                            td { code { (t.name) } }
                            td.num { (t.comparisons) @if t.infinite > 0 { " (" (t.infinite) " at ±∞)" } }
                            td.num { (t.values.len()) }
                            td.num { @if let Some(v) = t.values.first() { (number(f64::from(*v))) } }
                            td.num { @if let Some(v) = t.values.last() { (number(f64::from(*v))) } }
                            td { @if !t.values.is_empty() { (svg::rug(&t.values)) } }
                            td.num { (t.sets) }
                        }
                    }
                }
            }
        }
    }
}

fn scores(scores: Option<&ScoreDistribution>) -> Markup {
    let Some(d) = scores else {
        return html! {
            section #scores {
                h2 { "Scores" }
                p.note { "Run with --csv ROWS.csv (the rows `edgescore score` reads) to see the score distribution." }
            }
        };
    };
    html! {
        section #scores {
            h2 { "Scores on " code { (d.source) } " (" (d.rows) " rows)" }
            div.outputs { @for (k, o) in d.outputs.iter().enumerate() { (output(k, o)) } }
        }
    }
}

fn output(k: usize, o: &OutputScores) -> Markup {
    let columns: Vec<Column> = o
        .histogram
        .iter()
        .map(|b| Column { label: number(b.lo), value: b.count as f64, tip: format!("{} row(s) in [{}, {})", b.count, number(b.lo), number(b.hi)) })
        .collect();
    html! {
        div.output data-output=(k) {
            (figure(&format!("scores-{k}"), &o.label, svg::columns(&columns, &o.label, "rows", true)))
            table.quantiles {
                thead { tr { th { "quantile" } th.num { "score" } } }
                tbody {
                    @for (q, v) in QUANTILES.iter().zip(&o.quantiles) {
                        tr { td { (quantile_name(*q)) } td.num data-quantile=(q) data-value=(v) { (number(*v)) } }
                    }
                    tr { td { "mean" } td.num data-mean=(o.mean) { (number(o.mean)) } }
                    @if o.non_finite > 0 { tr { td { "not finite" } td.num { (o.non_finite) } } }
                }
            }
        }
    }
}

fn quantile_name(q: f64) -> String {
    if q == 0.0 {
        "min".into()
    } else if q == 1.0 {
        "max".into()
    } else if q == 0.5 {
        "median".into()
    } else {
        format!("p{}", number(q * 100.0))
    }
}

/// The drift reference: per input and per output, each bin's share of the reference rows
/// (what the filter's drift metrics are compared with).
fn drift(reference: Option<&crate::inspect::DriftReport>) -> Markup {
    let Some(d) = reference else {
        return html! {
            section #drift {
                h2 { "Reference distributions" }
                p.note { "No drift reference: compile with --reference ROWS.csv (the training rows, or a sample) for the filter's drift metrics." }
            }
        };
    };
    html! {
        section #drift {
            h2 { "Reference distributions" }
            p.note { "Each bin's share of the reference rows the model was compiled with: the filter counts live traffic into the same bins (edgescore_drift_bin) and Prometheus compares the two (PSI)." }
            div.outputs {
                @for (k, f) in d.features.iter().chain(&d.outputs).enumerate() { (drift_series(k, f)) }
            }
        }
    }
}

fn drift_series(k: usize, f: &crate::inspect::DriftSeriesReport) -> Markup {
    let n = f.edges.len();
    let columns: Vec<Column> = f
        .shares
        .iter()
        .enumerate()
        .map(|(b, &share)| {
            let range = if b == n + 1 {
                "missing".to_string()
            } else {
                let lo = if b == 0 { "−∞".to_string() } else { number(f.edges[b - 1] as f64) };
                let hi = if b == n { "∞".to_string() } else { number(f.edges[b] as f64) };
                format!("[{lo}, {hi})")
            };
            let label = if b == n + 1 { "NaN".to_string() } else if b == 0 { "<".to_string() + &number(f.edges.first().map_or(f64::INFINITY, |&e| e as f64)) } else { number(f.edges[b - 1] as f64) };
            Column { label, value: share as f64, tip: format!("{range}: {:.2} % of the reference rows", share as f64 * 100.0) }
        })
        .collect();
    html! {
        div.output data-drift=(k) data-series=(f.name) {
            (figure(&format!("drift-{k}"), &f.name, svg::columns(&columns, &f.name, "share", false)))
        }
    }
}
