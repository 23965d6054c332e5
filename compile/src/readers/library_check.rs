//! The readers' check against a training library's own predictions (tests only), on the one
//! fixture corpus: `tests/models/<prefix>_<name>/` holds `model.<ext>`, `rows.csv` (f32 rows)
//! and `expected.csv` (per row, the library's margins then its outputs), written by the library
//! itself (`tests/fixtures/ (python -m tests.fixtures)`); models a reader must refuse are `<prefix>_<name>_refuse/`.

use crate::readers::error::ReadError;
use crate::ir::{Aggregate, ModelIr};
use std::path::PathBuf;

/// A fixture directory of one source format.
pub struct Library {
    /// The library's name in messages.
    pub format: &'static str,
    /// The fixture directories' prefix (`lgb_reader`).
    pub prefix: &'static str,
    /// The model file's extension (`txt`, `json`).
    pub extension: &'static str,
    pub read: fn(&[u8]) -> Result<ModelIr, ReadError>,
    /// Whether the library's raw score of an averaging model (random forest) is the plain sum,
    /// i.e. the averaged margin times the divisor (LightGBM's).
    pub raw_is_sum: bool,
}

impl Library {
    /// The path of a fixture file named as the readers' tests name them: `<name>.<ext>` (the
    /// model), `<name>.rows.csv`, `<name>.expected.csv`, `<name>.refuse.<ext>`.
    pub fn data(&self, file: &str) -> PathBuf {
        let (name, rest) = file.split_once('.').unwrap_or((file, ""));
        let (dir, file) = match rest {
            "rows.csv" | "expected.csv" => (format!("{}_{name}", self.prefix), rest.to_string()),
            _ => match rest.strip_prefix("refuse.") {
                Some(ext) => (format!("{}_{name}_refuse", self.prefix), format!("model.{ext}")),
                None => (format!("{}_{name}", self.prefix), format!("model.{rest}")),
            },
        };
        // compile/ → the repository root → tests/models.
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/models").join(dir).join(file)
    }

    pub fn read_file(&self, name: &str) -> Result<ModelIr, ReadError> {
        (self.read)(&std::fs::read(self.data(name)).unwrap())
    }

    fn parse_csv<T: std::str::FromStr>(&self, name: &str) -> Vec<Vec<T>>
    where
        T::Err: std::fmt::Debug,
    {
        std::fs::read_to_string(self.data(name)).unwrap().lines().map(|l| l.split(',').map(|v| v.parse::<T>().unwrap()).collect()).collect()
    }

    /// Reads `<name>.<extension>` and scores every stored row by the IR's reference reading
    /// against the library's margins and outputs (1e-5, relative above 1).
    pub fn check(&self, name: &str) -> ModelIr {
        let close = |a: f64, e: f64| (a - e).abs() <= 1e-5 * e.abs().max(1.0);
        let ir = self.read_file(&format!("{name}.{}", self.extension)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let rows: Vec<Vec<f32>> = self.parse_csv(&format!("{name}.rows.csv"));
        let expected: Vec<Vec<f64>> = self.parse_csv(&format!("{name}.expected.csv"));
        assert_eq!(rows.len(), expected.len());
        assert!(rows.len() > 20, "{name}: too few rows");
        let n = ir.n_outputs();
        let raw_factor = match ir.aggregate {
            Aggregate::Average { divisor } if self.raw_is_sum => divisor,
            _ => 1.0,
        };
        let lib = self.format;
        for (i, (row, exp)) in rows.iter().zip(&expected).enumerate() {
            assert_eq!(row.len(), ir.features.len(), "{name} row {i}");
            assert_eq!(exp.len(), 2 * n, "{name} row {i}");
            let (margins, out) = (ir.margins(row), ir.outputs(row));
            for o in 0..n {
                let m = margins[o] * raw_factor;
                assert!(close(m, exp[o]), "{name} row {i} {row:?}: margin {o} = {m} but {lib} says {}", exp[o]);
                assert!(close(out[o], exp[n + o]), "{name} row {i} {row:?}: output {o} = {} but {lib} says {}", out[o], exp[n + o]);
            }
        }
        ir
    }

    /// Damaged copies of the model file `file`, read one by one: the reader may refuse them
    /// but must not panic.
    pub fn read_damaged(&self, file: &str, d: Damage) {
        let base = std::fs::read(self.data(file)).unwrap();
        let mut seed = d.seed;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for len in (0..base.len()).step_by(d.prefix_step) {
            let _ = (self.read)(&base[..len]);
        }
        for _ in 0..d.rounds {
            let mut bytes = base.clone();
            for _ in 0..1 + next() % d.max_edits {
                let i = (next() % bytes.len() as u64) as usize;
                bytes[i] = d.noise[(next() % d.noise.len() as u64) as usize];
            }
            let _ = (self.read)(&bytes);
        }
    }
}

/// The message of a read that must fail.
pub fn message(r: Result<ModelIr, ReadError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

/// How [`Library::read_damaged`] damages a file: every `prefix_step`-th prefix of it, then
/// `rounds` copies with 1..=`max_edits` bytes replaced by bytes of `noise`, at places drawn
/// from an xorshift stream seeded with `seed`.
pub struct Damage {
    pub prefix_step: usize,
    pub rounds: usize,
    pub max_edits: u64,
    pub noise: &'static [u8],
    pub seed: u64,
}
