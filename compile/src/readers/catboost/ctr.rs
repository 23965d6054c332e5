//! CatBoost online CTR features (`features_info.ctrs` + `ctr_data`) → [`CtrDef`]s.
//!
//! Semantics (CatBoost 1.2.x `static_ctr_provider.cpp`, `TModelCtr::Calc`, and the applier
//! CatBoost itself exports with `save_model(format="python")`):
//! - A CTR's projection is hashed with `CalcHash` over its categorical features' hashes, then
//!   its binarized float features (`x > border`), then its one-hot flags (`hash == value`)
//!   (`edgescore_core::ensemble::ctr::projection_key`).
//! - The key is looked up in the table `ctr_data[identifier].hash_map`: `hash_stride` numbers
//!   per entry, the key first (`u64::MAX` marks an empty slot of CatBoost's open-addressing
//!   table), then the counters.
//! - The value is `Calc(a, b) = ((a + prior_num) / (b + prior_denom) + shift) * scale` in f32,
//!   with (a, b) per type: Borders (2 classes) `(n1, n0 + n1)`, Borders (k classes) the
//!   classes above `target_border_idx` against all; Buckets `(n[target_border_idx], Σ n)`;
//!   Counter / FeatureFreq `(n, counter_denominator)`; target-mean types `(sum, count)`. A key
//!   not in the table is worth `Calc(0, 0)` (Counter: `Calc(0, counter_denominator)`).
//!
//! The compiler evaluates `Calc` for every table entry here, in f32 as CatBoost does, so the
//! evaluator only hashes and looks up.

use super::error::{malformed, unsupported};
use crate::ir::{ctr_part, CtrDef, CtrPart};
use crate::readers::error::ReadError;
use rayon::prelude::*;
use serde::Deserialize;
use std::collections::HashMap;

#[derive(Deserialize)]
pub(super) struct CtrJson {
    #[serde(default)]
    pub(super) borders: Vec<f64>,
    pub(super) ctr_type: String,
    pub(super) elements: Vec<Element>,
    pub(super) identifier: String,
    #[serde(default)]
    pub(super) prior_numerator: f64,
    #[serde(default = "one")]
    pub(super) prior_denomerator: f64,
    #[serde(default)]
    pub(super) scale: Option<f64>,
    #[serde(default)]
    pub(super) shift: f64,
    #[serde(default)]
    pub(super) target_border_idx: i64,
}

fn one() -> f64 {
    1.0
}

#[derive(Deserialize)]
pub(super) struct Element {
    pub(super) combination_element: String,
    #[serde(default)]
    pub(super) cat_feature_index: Option<u32>,
    #[serde(default)]
    pub(super) float_feature_index: Option<u32>,
    #[serde(default)]
    pub(super) border: Option<f64>,
    #[serde(default)]
    pub(super) value: Option<i64>,
}

#[derive(Deserialize)]
pub(super) struct Table {
    #[serde(default)]
    pub(super) counter_denominator: i64,
    #[serde(deserialize_with = "json_entries")]
    pub(super) hash_map: Entries,
    pub(super) hash_stride: usize,
}

/// A table's numbers as CatBoost's JSON export writes them (`hash_stride` cells per entry, of
/// any kind, checked where they are used), or as a `.cbm` file stores them: a key and
/// `hash_stride - 1` counters as 4-byte words (an i32, or the f32 sum of a target-mean table),
/// empty buckets left out. A `Cell` is 16 bytes and a real model's tables hold millions of
/// numbers: packing them saved 820 of the 5,500 page faults of a `.cbm` compile.
pub(super) enum Entries {
    Json(Vec<Cell>),
    Packed { keys: Vec<u64>, counters: Vec<u32> },
}

fn json_entries<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Entries, D::Error> {
    Vec::<Cell>::deserialize(d).map(Entries::Json)
}

impl Entries {
    /// Whether the numbers form whole entries of `stride`.
    fn whole(&self, stride: usize) -> bool {
        match self {
            Entries::Json(cells) => cells.len().is_multiple_of(stride),
            Entries::Packed { keys, counters } => counters.len() == keys.len() * (stride - 1),
        }
    }

    fn describe(&self) -> String {
        match self {
            Entries::Json(cells) => format!("{} numbers", cells.len()),
            Entries::Packed { keys, counters } => format!("{} keys and {} counters", keys.len(), counters.len()),
        }
    }
}

/// One entry: its key, then counters 1.. (`int(k)`, `sum()`), numbered as in the JSON's row.
/// A trait, not an enum: the value loop is compiled once per representation, and a `.cbm`
/// table's (plain 4-byte words) has no checks left in it.
trait Row {
    fn key(&self) -> Option<u64>;
    fn int(&self, k: usize) -> Option<i32>;
    /// A target-mean table's sum (counter 1).
    fn sum(&self) -> Option<f64>;
    fn show(&self, k: usize) -> String;
}

struct JsonRow<'a>(&'a [Cell]);

impl Row for JsonRow<'_> {
    fn key(&self) -> Option<u64> {
        self.0[0].key()
    }
    fn int(&self, k: usize) -> Option<i32> {
        self.0[k].int()
    }
    fn sum(&self) -> Option<f64> {
        self.0[1].float()
    }
    fn show(&self, k: usize) -> String {
        self.0[k].to_string()
    }
}

struct PackedRow<'a>(u64, &'a [u32]);

impl Row for PackedRow<'_> {
    fn key(&self) -> Option<u64> {
        Some(self.0)
    }
    fn int(&self, k: usize) -> Option<i32> {
        Some(self.1[k - 1] as i32)
    }
    fn sum(&self) -> Option<f64> {
        Some(f32::from_bits(self.1[0]) as f64)
    }
    fn show(&self, k: usize) -> String {
        if k == 0 { format!("\"{}\"", self.0) } else { (self.1[k - 1] as i32).to_string() }
    }
}

/// One number of a `hash_map`: CatBoost's JSON writes the 64-bit keys as decimal strings
/// (they exceed JSON's exact integers) and the counters as numbers.
#[derive(Clone, Copy, Debug)]
pub(super) enum Cell {
    Key(u64),
    Int(i64),
    Float(f64),
    /// A string that is not a u64, or a number of the wrong kind: reported where it is used.
    Bad,
}

impl Cell {
    fn key(self) -> Option<u64> {
        match self {
            Cell::Key(k) => Some(k),
            Cell::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    fn int(self) -> Option<i32> {
        match self {
            Cell::Int(v) => i32::try_from(v).ok(),
            _ => None,
        }
    }

    fn float(self) -> Option<f64> {
        match self {
            Cell::Int(v) => Some(v as f64),
            Cell::Float(v) => Some(v),
            _ => None,
        }
    }
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cell::Key(k) => write!(f, "\"{k}\""),
            Cell::Int(v) => write!(f, "{v}"),
            Cell::Float(v) => write!(f, "{v}"),
            Cell::Bad => f.write_str("(not a number)"),
        }
    }
}

impl<'de> Deserialize<'de> for Cell {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Cell;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or a decimal string")
            }
            fn visit_str<E>(self, v: &str) -> Result<Cell, E> {
                Ok(v.parse().map_or(Cell::Bad, Cell::Key))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Cell, E> {
                Ok(Cell::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Cell, E> {
                Ok(i64::try_from(v).map_or(Cell::Key(v), Cell::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Cell, E> {
                Ok(Cell::Float(v))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Cell, E> {
                Ok(Cell::Bad)
            }
            fn visit_unit<E>(self) -> Result<Cell, E> {
                Ok(Cell::Bad)
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// Where the reader finds the inputs a projection names.
pub(super) struct Inputs<'a> {
    /// CatBoost categorical feature index → flat input index.
    pub cat_flat: &'a HashMap<u32, u32>,
    /// CatBoost float feature index → (flat input index, NaN counts as above every border).
    pub float_flat: &'a (dyn Fn(u32) -> Option<(u32, bool)> + Sync),
}

/// A CTR feature and the borders its splits use, in `features_info.ctrs` order.
pub(super) struct Ctr {
    pub def: CtrDef,
    pub borders: Vec<f32>,
}

/// CTRs are read on every core (a model's tables can hold millions of entries); the first
/// error in `ctrs` order is reported.
pub(super) fn read(ctrs: &[CtrJson], data: &HashMap<String, Table>, inputs: &Inputs) -> Result<Vec<Ctr>, ReadError> {
    let read: Vec<Result<Ctr, ReadError>> = ctrs.par_iter().enumerate().map(|(i, c)| read_one(i, c, data, inputs)).collect();
    read.into_iter().collect()
}

fn read_one(i: usize, c: &CtrJson, data: &HashMap<String, Table>, inputs: &Inputs) -> Result<Ctr, ReadError> {
    let err = |detail: String| malformed(format!("CTR {i} ({}): {detail}", c.ctr_type));
    // CalcHashes order: categorical features, then float splits, then one-hot flags.
    let (mut cats, mut floats, mut one_hot) = (Vec::new(), Vec::new(), Vec::new());
    for e in &c.elements {
        match e.combination_element.as_str() {
            "cat_feature_value" | "cat_feature_exact_value" => {
                let idx = e.cat_feature_index.ok_or_else(|| err("element without cat_feature_index".into()))?;
                let feature = *inputs.cat_flat.get(&idx).ok_or_else(|| err(format!("unknown categorical feature {idx}")))?;
                if e.combination_element == "cat_feature_value" {
                    cats.push(CtrPart { kind: ctr_part::CATEGORY, feature, value: 0, reserved: 0 });
                } else {
                    let value = e.value.ok_or_else(|| err("one-hot element without value".into()))?;
                    one_hot.push(CtrPart { kind: ctr_part::ONE_HOT, feature, value: value as u32, reserved: 0 });
                }
            }
            "float_feature" => {
                let idx = e.float_feature_index.ok_or_else(|| err("element without float_feature_index".into()))?;
                let (feature, nan_true) = (inputs.float_flat)(idx).ok_or_else(|| err(format!("unknown float feature {idx}")))?;
                let border = e.border.filter(|b| !b.is_nan()).ok_or_else(|| err("float element without a border".into()))? as f32;
                let kind = if nan_true { ctr_part::ABOVE_NAN_TRUE } else { ctr_part::ABOVE };
                floats.push(CtrPart { kind, feature, value: border.to_bits(), reserved: 0 });
            }
            other => {
                return Err(unsupported(format!("CTR projection element `{other}` (CTR {i})"), None));
            }
        }
    }
    let parts: Vec<CtrPart> = cats.into_iter().chain(floats).chain(one_hot).collect();
    if parts.is_empty() {
        return Err(err("empty projection".into()));
    }
    let table = data.get(&c.identifier).ok_or_else(|| err(format!("no ctr_data entry {:?}", c.identifier)))?;
    let stride = table.hash_stride;
    if !(2..=1 << 16).contains(&stride) || !table.hash_map.whole(stride) {
        return Err(err(format!("hash_map of {} with hash_stride {stride}", table.hash_map.describe())));
    }
    let f = |v: f64| v as f32;
    let classes = stride - 1;
    let target_border = usize::try_from(c.target_border_idx).map_err(|_| err(format!("target_border_idx {}", c.target_border_idx)))?;
    let kind = match c.ctr_type.as_str() {
        "Borders" if classes == 2 => Kind::TwoClassBorders,
        "Borders" => Kind::Borders,
        "Buckets" => Kind::Buckets,
        "Counter" | "FeatureFreq" => Kind::Counter,
        "BinarizedTargetMeanValue" | "FloatTargetMeanValue" => Kind::Mean,
        other => return Err(unsupported(format!("CTR type `{other}` (CTR {i})"), None)),
    };
    match kind {
        Kind::TwoClassBorders | Kind::Borders | Kind::Buckets if target_border >= classes => {
            return Err(err(format!("target_border_idx {target_border} with {classes} target classes")));
        }
        Kind::Counter if stride != 2 => return Err(err(format!("counter table with hash_stride {stride}"))),
        Kind::Mean if stride != 3 => return Err(err(format!("target-mean table with hash_stride {stride}"))),
        _ => {}
    }
    let rule = Rule {
        kind,
        classes,
        target_border,
        denominator: table.counter_denominator as f32,
        prior_num: f(c.prior_numerator),
        prior_denom: f(c.prior_denomerator),
        shift: f(c.shift),
        scale: f(c.scale.unwrap_or(1.0)),
    };
    let empty_value = match kind {
        Kind::Counter => rule.calc(0.0, rule.denominator),
        _ => rule.calc(0.0, 0.0),
    };
    let mut entries = match &table.hash_map {
        Entries::Json(cells) => rule.values(cells.chunks(stride).map(JsonRow), &err)?,
        Entries::Packed { keys, counters } => rule.values(keys.iter().zip(counters.chunks(stride - 1)).map(|(&k, c)| PackedRow(k, c)), &err)?,
    };
    entries.sort_unstable_by_key(|e| e.0);
    if entries.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(err("duplicate keys in hash_map".into()));
    }
    if !empty_value.is_finite() {
        return Err(err(format!("CTR value of an unseen key {empty_value} is not finite")));
    }
    let borders = c.borders.iter().map(|&b| b as f32).collect();
    Ok(Ctr { def: CtrDef { parts, table: entries, empty_value }, borders })
}

/// Which counters a CTR type divides (see the module comment).
#[derive(Clone, Copy)]
enum Kind {
    TwoClassBorders,
    Borders,
    Buckets,
    Counter,
    Mean,
}

/// How one CTR turns a table entry into its value.
struct Rule {
    kind: Kind,
    classes: usize,
    target_border: usize,
    denominator: f32,
    prior_num: f32,
    prior_denom: f32,
    shift: f32,
    scale: f32,
}

impl Rule {
    /// `TModelCtr::Calc`, in f32.
    fn calc(&self, a: f32, b: f32) -> f32 {
        ((a + self.prior_num) / (b + self.prior_denom) + self.shift) * self.scale
    }

    /// (key, value) of every entry but CatBoost's empty slots, in table order.
    fn values<R: Row>(&self, rows: impl Iterator<Item = R>, err: &impl Fn(String) -> ReadError) -> Result<Vec<(u64, f32)>, ReadError> {
        let mut entries = Vec::with_capacity(rows.size_hint().0);
        for (e, row) in rows.enumerate() {
            let key = row.key().ok_or_else(|| err(format!("entry {e}: key {} is not a 64-bit hash", row.show(0))))?;
            if key == u64::MAX {
                continue;
            }
            let int = |k: usize| row.int(k).ok_or_else(|| err(format!("entry {e}: counter {} is not an int", row.show(k))));
            let sum = |from: usize, to: usize| (from..to).try_fold(0i32, |total, k| Ok::<_, ReadError>(total.wrapping_add(int(1 + k)?)));
            let value = match self.kind {
                Kind::TwoClassBorders => {
                    let (n0, n1) = (int(1)?, int(2)?);
                    self.calc(n1 as f32, n0.wrapping_add(n1) as f32)
                }
                Kind::Borders => {
                    let (total, good) = (sum(0, self.target_border + 1)?, sum(self.target_border + 1, self.classes)?);
                    self.calc(good as f32, total.wrapping_add(good) as f32)
                }
                Kind::Buckets => {
                    let total = sum(0, self.classes)?;
                    self.calc(int(1 + self.target_border)? as f32, total as f32)
                }
                Kind::Counter => self.calc(int(1)? as f32, self.denominator),
                Kind::Mean => {
                    let sum = row.sum().ok_or_else(|| err(format!("entry {e}: sum {} is not a number", row.show(1))))? as f32;
                    self.calc(sum, int(2)? as f32)
                }
            };
            if !value.is_finite() {
                return Err(err(format!("entry {e}: CTR value {value} is not finite")));
            }
            entries.push((key, value));
        }
        Ok(entries)
    }
}
