//! Reference evaluation straight from the IR's documented semantics (f64 comparisons, no
//! normalisation); the same semantics as `filter/tests/common/mod.rs`, reimplemented here with
//! a step limit so that malformed IR cannot hang or panic the fuzzer.

use edgescore_filter::ir::*;

/// Where one IR tree sends `x`; `None` if the walk leaves the tree or does not end.
pub fn ir_leaf(tree: &Tree, x: &[f32]) -> Option<f64> {
    let mut i = 0usize;
    for _ in 0..=tree.nodes.len() {
        match tree.nodes.get(i)? {
            Node::Leaf { value } => return Some(*value),
            Node::Split { feature, test, missing_yes, yes, no } => {
                let v = *x.get(*feature as usize)?;
                let d = v as f64;
                let go_yes = if v.is_nan() {
                    *missing_yes
                } else {
                    match test {
                        Test::Lt(t) => d < *t,
                        Test::Le(t) => d <= *t,
                        Test::Gt(t) => d > *t,
                        Test::Ge(t) => d >= *t,
                        Test::Eq(t) => d == *t,
                        Test::Ne(t) => d != *t,
                        Test::LeZeroAsMissing(t) => {
                            if v.abs() <= 1e-35 {
                                *missing_yes
                            } else {
                                d <= *t
                            }
                        }
                        Test::InSet { categories, invalid_at_or_below } => {
                            v > *invalid_at_or_below && v < 4294967296.0 && categories.contains(&(v.trunc() as u32))
                        }
                    }
                };
                i = if go_yes { *yes } else { *no } as usize;
            }
        }
    }
    None
}

/// Margins by the reference evaluator, plus per output the magnitude the rounding error of a
/// reordered sum scales with (sum of |leaf| / divisor + |base|). `None` if a walk failed.
pub fn ir_margins(m: &ModelIr, x: &[f32]) -> Option<(Vec<f64>, Vec<f64>)> {
    let n = m.n_outputs();
    let mut acc = vec![0f64; n];
    let mut mag = vec![0f64; n];
    for t in &m.trees {
        let v = ir_leaf(t, x)?;
        acc[t.output as usize] += v;
        mag[t.output as usize] += v.abs();
    }
    let div = match m.aggregate {
        Aggregate::Sum => 1.0,
        Aggregate::Average { divisor } => divisor,
    };
    let margins = acc.iter().zip(&m.base_score).map(|(a, b)| if div == 1.0 { a + b } else { a / div + b }).collect();
    let mags = mag.iter().zip(&m.base_score).map(|(a, b)| a / div + b.abs()).collect();
    Some((margins, mags))
}

/// `got` equals `want` up to reordering of a sum whose terms have total magnitude `mag`
/// (1e-12 relative). When `mag` itself overflowed the comparison says nothing: skip it.
pub fn close(got: f64, want: f64, mag: f64) -> bool {
    if !mag.is_finite() {
        return true;
    }
    if got.to_bits() == want.to_bits() || got == want {
        return true;
    }
    (got - want).abs() <= 1e-12 * mag + f64::MIN_POSITIVE
}
