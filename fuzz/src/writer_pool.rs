//! The writer hands each tree to rayon's global pool (`par_iter`) and takes it back. Under a
//! fuzzer that is a hand-off per input and two pool threads spinning beside the one libFuzzer
//! runs on, about a tenth of a core more for nothing: the inputs are one model each.

/// Makes the global pool one thread, the caller's, so that the writer runs inline on it.
/// Call once, before the first input (a target's `init`); a pool already built stays.
pub fn run_writer_inline() {
    let _ = rayon::ThreadPoolBuilder::new().num_threads(1).use_current_thread().build_global();
}
