//! How close the compiled artifact must come to the IR's reference reading
//! (`edgescore_compile::ir::ModelIr::try_reference`, the one reference evaluator).

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
