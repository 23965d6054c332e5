//! Golden rows: inputs scored at publish time, re-scored by every reader.

use super::{GoldenRow, MAX_GOLDEN_ROWS};
use crate::artifact::layout::node;
use crate::TreeEnsemble;

/// Scores `rows` (in the model's feature order, `None` = missing) into golden rows. Each row
/// is cut or padded with missing values to the model's feature count.
pub fn golden_rows(e: &TreeEnsemble<'_>, rows: &[Vec<Option<f32>>]) -> Vec<GoldenRow> {
    let n = e.n_features();
    let mut out = vec![0f32; e.n_outputs()];
    rows.iter()
        .map(|row| {
            let x: Vec<Option<f32>> = (0..n).map(|i| row.get(i).copied().flatten().filter(|v| !v.is_nan())).collect();
            let dense: Vec<f32> = x.iter().map(|v| v.unwrap_or(f32::NAN)).collect();
            e.score(&dense, &mut out).expect("row and output sized to the model");
            GoldenRow { x, y: out.clone() }
        })
        .collect()
}

/// Re-scores one golden row: `Err` says how it differs (input or output count, or the first
/// output that is not bitwise equal; NaN equals NaN).
pub fn row_matches(e: &TreeEnsemble<'_>, row: &GoldenRow) -> Result<(), String> {
    if row.x.len() != e.n_features() {
        return Err(format!("{} inputs, the model has {} features", row.x.len(), e.n_features()));
    }
    if row.y.len() != e.n_outputs() {
        return Err(format!("{} outputs, the model has {}", row.y.len(), e.n_outputs()));
    }
    let dense: Vec<f32> = row.x.iter().map(|v| v.unwrap_or(f32::NAN)).collect();
    let mut out = vec![0f32; e.n_outputs()];
    e.score(&dense, &mut out).map_err(|err| err.to_string())?;
    for (k, (&got, &want)) in out.iter().zip(&row.y).enumerate() {
        if got.to_bits() != want.to_bits() && !(got.is_nan() && want.is_nan()) {
            return Err(format!("output {k} scores {got:?}, the manifest says {want:?}"));
        }
    }
    Ok(())
}

/// Golden inputs derived from the artifact itself, deterministically: a row of all-missing
/// values, then rows that put each feature just below or at one of the values its tests
/// compare with (thresholds, equality values, category codes in a set), so the rows take
/// real branches; the last also leaves every third feature missing. At most
/// [`MAX_GOLDEN_ROWS`] rows, no two alike.
pub fn default_golden_inputs(e: &TreeEnsemble<'_>) -> Vec<Vec<Option<f32>>> {
    let n = e.n_features();
    let mut cuts: Vec<Vec<f32>> = vec![Vec::new(); n];
    for nd in e.nodes() {
        if nd.flags & node::LEAF != 0 {
            continue;
        }
        let f = e.tested_feature(nd.feature);
        // Splits on CTR features (past the inputs) test values computed from the inputs.
        if f >= n {
            continue;
        }
        if matches!(nd.flags & node::OP_MASK, node::OP_IN_SET | node::OP_MEMBER) {
            let split = e.cat_splits[nd.payload as usize];
            let words = &e.cat_words[split.word_offset as usize..][..split.n_words as usize];
            for (w, bits) in words.iter().enumerate() {
                for b in 0..32 {
                    if bits >> b & 1 == 1 {
                        cuts[f].push((w * 32 + b) as f32);
                    }
                }
            }
        } else {
            cuts[f].push(f32::from_bits(nd.payload));
        }
    }
    for c in &mut cuts {
        c.retain(|v| v.is_finite());
        c.sort_by(f32::total_cmp);
        c.dedup_by(|a, b| a.to_bits() == b.to_bits());
    }
    let mut rows: Vec<Vec<Option<f32>>> = vec![vec![None; n]];
    let threshold_rows = MAX_GOLDEN_ROWS - 1;
    for r in 0..threshold_rows {
        let row: Vec<Option<f32>> = (0..n)
            .map(|f| {
                if r + 1 == threshold_rows && f % 3 == 2 {
                    return None;
                }
                let c = &cuts[f];
                if c.is_empty() {
                    return Some(0.0);
                }
                // A fixed mix of (row, feature): spreads the picks over the feature's cuts.
                let h = (r as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (f as u64 + 1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
                let h = h ^ (h >> 29);
                let t = c[(h % c.len() as u64) as usize];
                Some(if (h >> 40) & 1 == 1 { t.next_down() } else { t })
            })
            .collect();
        if !rows.iter().any(|o| same(o, &row)) {
            rows.push(row);
        }
    }
    rows
}

fn same(a: &[Option<f32>], b: &[Option<f32>]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.map(f32::to_bits) == y.map(f32::to_bits))
}
