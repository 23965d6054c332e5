//! An independent, bounds-checked reading of an artifact the validator ACCEPTED, used as the
//! oracle for the evaluator (which indexes with `get_unchecked`):
//! - every path from every root must stay inside its tree and reach a leaf in exactly the
//!   declared depth, every index the evaluator dereferences must be in range
//!   (`check_safety`); a violation means the validator let through an artifact the
//!   evaluator cannot walk safely;
//! - margins computed here (checked indexing, the layout's documented semantics) must match
//!   `TreeEnsemble::margins` (up to summation reordering);
//! - the public accessors and strings must agree with the bytes.
//!
//! Everything panics with a message starting `ORACLE:` so crashes are easy to triage.

use bytemuck::{pod_read_unaligned, Pod};
use edgescore_core::artifact::layout::*;
use edgescore_core::{Model, ModelSet, ScoreError};

use crate::reference::close;

// The node's fields, widened: the only place the oracle touches `Node`'s field types.
pub fn n_flags(n: &Node) -> u32 {
    n.flags as u32
}
pub fn n_feature(n: &Node) -> u32 {
    n.feature as u32
}
const LEAF: u32 = node::LEAF as u32;
const MISSING_YES: u32 = node::MISSING_YES as u32;
const OP_MASK: u32 = node::OP_MASK as u32;
const OP_LT: u32 = node::OP_LT as u32;
const OP_IN_SET: u32 = node::OP_IN_SET as u32;
const OP_EQ: u32 = node::OP_EQ as u32;
const OP_NE: u32 = node::OP_NE as u32;
const OP_LT_ZERO_MISSING: u32 = node::OP_LT_ZERO_MISSING as u32;
const OP_MEMBER: u32 = node::OP_MEMBER as u32;

pub struct Art {
    pub header: Header,
    pub meta: Meta,
    pub strings: Vec<u8>,
    pub features: Vec<FeatureSpec>,
    pub base: Vec<f64>,
    pub trees: Vec<TreeSpec>,
    pub nodes: Vec<Node>,
    pub leaves: Vec<f64>,
    pub cat_splits: Vec<CatSplit>,
    pub cat_words: Vec<u32>,
    // Format 2 (empty in format 1).
    pub linear_leaves: Vec<LinearLeaf>,
    pub linear_terms: Vec<LinearTerm>,
    pub ctr_features: Vec<CtrFeature>,
    pub ctr_parts: Vec<CtrPart>,
    pub ctr_keys: Vec<u64>,
    pub ctr_values: Vec<f32>,
}

fn pods<T: Pod>(raw: &[u8], what: &str) -> Vec<T> {
    let size = core::mem::size_of::<T>();
    assert!(raw.len() % size == 0, "ORACLE: accepted section {what} of {} bytes, not a multiple of {size}", raw.len());
    raw.chunks_exact(size).map(pod_read_unaligned).collect()
}

/// Reads the section table without trusting it: 9 entries for format 1, 15 for formats 2 to
/// 5, 18 for format 6, 19 for format 7, the missing ones empty. Returns `None` if the bytes do
/// not even hold a table (only used on bytes the validator accepted, where that is itself a
/// bug).
pub fn section_entries(bytes: &[u8]) -> Option<[SectionEntry; 19]> {
    let version = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    let count = match version {
        7.. => 19,
        6 => 18,
        2..=5 => 15,
        _ => 9,
    };
    let mut entries = [SectionEntry { kind: 0, reserved: 0, offset: 0, len: 0 }; 19];
    for (i, e) in entries.iter_mut().enumerate().take(count) {
        let at = HEADER_LEN + i * core::mem::size_of::<SectionEntry>();
        *e = pod_read_unaligned(bytes.get(at..at + core::mem::size_of::<SectionEntry>())?);
    }
    Some(entries)
}

pub fn section_bytes<'a>(bytes: &'a [u8], e: &SectionEntry) -> Option<&'a [u8]> {
    let start = usize::try_from(e.offset).ok()?;
    let end = start.checked_add(usize::try_from(e.len).ok()?)?;
    bytes.get(start..end)
}

/// What an averaging model divides its trees' sum by (1 for a sum).
fn averaging_divisor(meta: &Meta) -> f64 {
    if meta.aggregate == aggregate::AVERAGE { meta.aggregate_divisor } else { 1.0 }
}

impl Art {
    pub fn parse_accepted(bytes: &[u8]) -> Art {
        let header: Header = pod_read_unaligned(bytes.get(..HEADER_LEN).expect("ORACLE: accepted artifact shorter than the header"));
        let entries = section_entries(bytes).expect("ORACLE: accepted artifact without a full section table");
        let sec = |k: usize| section_bytes(bytes, &entries[k]).unwrap_or_else(|| panic!("ORACLE: accepted section {k} lies outside the file"));
        let metas: Vec<Meta> = pods(sec(0), "META");
        assert_eq!(metas.len(), 1, "ORACLE: accepted META section is not one Meta");
        let art = Art {
            header,
            meta: metas[0],
            strings: sec(1).to_vec(),
            features: pods(sec(2), "FEATURES"),
            base: pods(sec(3), "BASE"),
            trees: pods(sec(4), "TREES"),
            nodes: pods(sec(5), "NODES"),
            leaves: pods(sec(6), "LEAVES"),
            cat_splits: pods(sec(7), "CAT_SPLITS"),
            cat_words: pods(sec(8), "CAT_WORDS"),
            linear_leaves: pods(sec(9), "LINEAR_LEAVES"),
            linear_terms: pods(sec(10), "LINEAR_TERMS"),
            ctr_features: pods(sec(11), "CTR_FEATURES"),
            ctr_parts: pods(sec(12), "CTR_PARTS"),
            ctr_keys: pods(sec(13), "CTR_KEYS"),
            ctr_values: pods(sec(14), "CTR_VALUES"),
        };
        let m = &art.meta;
        assert_eq!(art.features.len(), m.n_features as usize, "ORACLE: feature count");
        assert_eq!(art.base.len(), m.n_outputs as usize, "ORACLE: output count");
        assert_eq!(art.trees.len(), m.n_trees as usize, "ORACLE: tree count");
        assert_eq!(art.nodes.len(), m.n_nodes as usize, "ORACLE: node count");
        assert_eq!(art.leaves.len(), m.n_leaves as usize, "ORACLE: leaf count");
        assert!(m.n_features >= 1 && m.n_outputs >= 1 && m.n_outputs as usize <= edgescore_core::MAX_OUTPUTS, "ORACLE: meta counts out of range accepted");
        if header.format_version < 2 {
            assert!(header.flags & flags::FORMAT_2 == 0 && m.link <= link::EXP, "ORACLE: format 1 with format-2 features accepted");
        }
        assert!(header.format_version >= 4 || header.flags & flags::FORMAT_4 == 0, "ORACLE: NaN-low columns before format 4 accepted");
        assert!(header.format_version >= 5 || header.flags & flags::FORMAT_5 == 0, "ORACLE: zero-as-missing columns before format 5 accepted");
        let linear = header.flags & flags::HAS_LINEAR_LEAVES != 0;
        assert_eq!(art.linear_leaves.len(), if linear { art.leaves.len() } else { 0 }, "ORACLE: LINEAR_LEAVES length");
        assert!(linear || art.linear_terms.is_empty(), "ORACLE: LINEAR_TERMS without the flag");
        let ctrs = header.flags & flags::HAS_CTRS != 0;
        assert_eq!(!art.ctr_features.is_empty(), ctrs, "ORACLE: CTR features and the HAS_CTRS flag disagree");
        assert_eq!(art.ctr_keys.len(), art.ctr_values.len(), "ORACLE: CTR keys and values differ in number");
        art
    }

    /// How many columns per input follow the CTR features: (format 4) a NaN-low column,
    /// (format 5) that and two zero-as-missing columns.
    fn columns(&self) -> u32 {
        if self.header.flags & flags::ZERO_MISSING_COLUMNS != 0 {
            3
        } else if self.header.flags & flags::NAN_LOW_COLUMNS != 0 {
            1
        } else {
            0
        }
    }

    /// Inputs, CTR features, then the columns: how many features a split may test.
    fn split_features(&self) -> u32 {
        self.meta.n_features + self.ctr_features.len() as u32 + self.columns() * self.meta.n_features
    }

    /// The input a split feature reads, if it is an input or a column of one.
    fn input_of(&self, f: u32) -> Option<usize> {
        let (nf, low_start) = (self.meta.n_features, self.meta.n_features + self.ctr_features.len() as u32);
        if f < nf {
            Some(f as usize)
        } else if f >= low_start && self.columns() > 0 {
            Some(((f - low_start) % nf) as usize)
        } else {
            None
        }
    }

    /// The row the trees walk: the inputs, then each CTR feature's value, looked up here with
    /// a checked linear scan (the evaluator binary-searches). The key folding is the one
    /// definition of CatBoost's hashing (`edgescore_core::ensemble::ctr`).
    fn extended_row(&self, x: &[f32]) -> Vec<f32> {
        let nf = self.meta.n_features as usize;
        let mut row = x[..nf].to_vec();
        for (k, c) in self.ctr_features.iter().enumerate() {
            let parts = self.ctr_parts.get(c.part_offset as usize..(c.part_offset + c.n_parts) as usize).unwrap_or_else(|| panic!("ORACLE: CTR {k} parts out of range"));
            let key = edgescore_core::ensemble::ctr::projection_key(parts, &x[..nf]);
            let range = c.key_offset as usize..(c.key_offset + c.n_keys) as usize;
            let keys = self.ctr_keys.get(range.clone()).unwrap_or_else(|| panic!("ORACLE: CTR {k} keys out of range"));
            let value = keys.iter().position(|&k| k == key).map_or(c.empty_value, |i| self.ctr_values[range.start + i]);
            row.push(value);
        }
        if self.columns() > 0 {
            row.extend(x[..nf].iter().map(|&v| if v.is_nan() { f32::NEG_INFINITY } else if v == f32::NEG_INFINITY { -f32::MAX } else { v }));
        }
        if self.columns() > 2 {
            let missing = |v: f32| v.is_nan() || (-ZERO_THRESHOLD..=ZERO_THRESHOLD).contains(&v);
            row.extend(x[..nf].iter().map(|&v| if missing(v) { f32::NEG_INFINITY } else if v == f32::NEG_INFINITY { -f32::MAX } else { v }));
            row.extend(x[..nf].iter().map(|&v| if missing(v) { f32::INFINITY } else { v }));
        }
        row
    }

    /// A scalar leaf's value: plain, or linear with LightGBM's NaN fallback.
    fn leaf_value(&self, li: usize, x: &[f32]) -> f64 {
        let Some(l) = self.linear_leaves.get(li) else { return self.leaves[li] };
        let mut v = l.constant;
        for t in &self.linear_terms[l.term_offset as usize..(l.term_offset + l.n_terms) as usize] {
            let f = x[t.feature as usize];
            if f.is_nan() {
                return self.leaves[li];
            }
            v += f as f64 * t.coeff;
        }
        v
    }

    /// Entry `i` of the string table, parsed independently.
    pub fn string(&self, i: usize) -> &str {
        let s = &self.strings;
        let word = |k: usize| u32::from_le_bytes(s.get(4 * k..4 * k + 4).expect("ORACLE: strings table truncated").try_into().unwrap()) as usize;
        let count = word(0);
        assert!(i < count, "ORACLE: string {i} of {count}");
        let data = s.get(4 + 4 * count..).expect("ORACLE: strings offsets past the end");
        let start = if i == 0 { 0 } else { word(i) };
        let end = word(i + 1);
        let raw = data.get(start..end).unwrap_or_else(|| panic!("ORACLE: string {i} range {start}..{end} outside {} bytes", data.len()));
        core::str::from_utf8(raw).expect("ORACLE: accepted string is not UTF-8")
    }

    /// The evaluator's preconditions, checked on every path of every tree.
    pub fn check_safety(&self) {
        let m = &self.meta;
        let mut budget = 1usize << 18;
        let mut max_depth = 0;
        // Whether an oblivious tree has been seen (node trees must all come before).
        let mut oblivious_seen = false;
        for (t, spec) in self.trees.iter().enumerate() {
            let vector = spec.output == VECTOR_OUTPUT;
            assert!(spec.output < m.n_outputs || (vector && self.header.flags & flags::HAS_VECTOR_LEAVES != 0), "ORACLE: tree {t} output {} >= {}", spec.output, m.n_outputs);
            let width = if vector { m.n_outputs as usize } else { 1 };
            assert!(spec.root < spec.end && spec.end as usize <= self.nodes.len(), "ORACLE: tree {t} node range {}..{} (n_nodes {})", spec.root, spec.end, self.nodes.len());
            assert!(spec.depth as u32 <= MAX_DEPTH, "ORACLE: tree {t} depth {}", spec.depth);
            max_depth = max_depth.max(spec.depth as u32);
            if spec.layout == tree_layout::OBLIVIOUS {
                self.check_oblivious(t, spec, &mut oblivious_seen);
                continue;
            }
            assert!(spec.layout == tree_layout::NODES, "ORACLE: tree {t} unknown layout {} accepted", spec.layout);
            assert!(!oblivious_seen, "ORACLE: node tree {t} after an oblivious tree accepted");
            // Depth-first over (node, steps taken); each node has one parent in a valid tree,
            // so this visits each node once; the budget only guards a buggy DAG.
            let mut stack = vec![(spec.root, 0u32)];
            while let Some((at, steps)) = stack.pop() {
                if budget == 0 {
                    return;
                }
                budget -= 1;
                assert!(at >= spec.root && at < spec.end, "ORACLE: tree {t} walks to node {at} outside {}..{}", spec.root, spec.end);
                let n = self.nodes[at as usize];
                let ff = n_flags(&n);
                if ff & LEAF != 0 {
                    // The evaluator does not test for leaves: it steps to `left + !(x < payload)`
                    // and relies on the payload being NaN (comparison false) and `left + 1`
                    // (wrapping) being the leaf itself; MISSING_YES must be clear for NaN rows.
                    assert_eq!(n.left.wrapping_add(1), at, "ORACLE: tree {t} leaf {at} does not step to itself");
                    assert!(f32::from_bits(n.payload).is_nan(), "ORACLE: tree {t} leaf {at} payload {:#x} is not NaN", n.payload);
                    assert!(ff & MISSING_YES == 0 && ff & OP_MASK == OP_LT, "ORACLE: leaf {at} flags {ff:#x}");
                    let li = (n.payload & node::LEAF_INDEX_MASK) as usize;
                    assert!(li + width <= self.leaves.len(), "ORACLE: tree {t} leaf {at} index {li} (+{width}) > {} leaves", self.leaves.len());
                    if let Some(l) = self.linear_leaves.get(li) {
                        let end = l.term_offset as u64 + l.n_terms as u64;
                        assert!(end <= self.linear_terms.len() as u64, "ORACLE: leaf {li} linear terms past LINEAR_TERMS");
                        for term in &self.linear_terms[l.term_offset as usize..end as usize] {
                            assert!(term.feature < m.n_features, "ORACLE: linear term on feature {}", term.feature);
                        }
                    }
                    // The evaluator reads x[feature] for leaves too.
                    assert!(n_feature(&n) < m.n_features, "ORACLE: leaf {at} feature {}", n_feature(&n));
                    continue;
                }
                assert!(!f32::from_bits(n.payload).is_nan() || matches!(ff & OP_MASK, OP_IN_SET | OP_MEMBER), "ORACLE: internal node {at} with NaN threshold would act as a leaf");
                assert!(steps < spec.depth as u32, "ORACLE: tree {t}: node {at} is internal after {steps} steps but the declared depth is {}", spec.depth);
                assert!(n_feature(&n) < self.split_features(), "ORACLE: node {at} feature {} >= {}", n_feature(&n), self.split_features());
                match ff & OP_MASK {
                    OP_LT => {}
                    OP_IN_SET | OP_MEMBER => {
                        assert!(ff & OP_MASK == OP_IN_SET || self.header.format_version >= 2, "ORACLE: MEMBER in a format-1 file");
                        assert!(self.header.flags & flags::HAS_CATEGORICAL != 0, "ORACLE: IN_SET node {at} without HAS_CATEGORICAL");
                        let c = self.cat_splits.get(n.payload as usize).unwrap_or_else(|| panic!("ORACLE: node {at} cat split {} out of range", n.payload));
                        assert!(c.word_offset as u64 + c.n_words as u64 <= self.cat_words.len() as u64, "ORACLE: cat split {} bitset past CAT_WORDS", n.payload);
                    }
                    OP_EQ | OP_NE | OP_LT_ZERO_MISSING => {
                        assert!(self.header.flags & flags::HAS_RARE_TESTS != 0, "ORACLE: rare-test node {at} without HAS_RARE_TESTS");
                    }
                    op => panic!("ORACLE: node {at} unknown op {op:#x} accepted"),
                }
                let left = n.left as u64;
                assert!(left > at as u64 && left + 1 < spec.end as u64, "ORACLE: node {at} children {left},{} outside tree {}..{}", left + 1, spec.root, spec.end);
                stack.push((n.left, steps + 1));
                stack.push((n.left + 1, steps + 1));
            }
        }
        assert!(max_depth <= MAX_DEPTH);
        for (i, c) in self.cat_splits.iter().enumerate() {
            assert!(c.word_offset as u64 + c.n_words as u64 <= self.cat_words.len() as u64, "ORACLE: cat split {i} bitset past CAT_WORDS");
        }
        let derived = !self.ctr_features.is_empty() || self.columns() > 0;
        assert!(!derived || self.split_features() <= MAX_CTR_ROW, "ORACLE: derived row longer than MAX_CTR_ROW");
        for (k, c) in self.ctr_features.iter().enumerate() {
            assert!(c.part_offset as u64 + c.n_parts as u64 <= self.ctr_parts.len() as u64, "ORACLE: CTR {k} parts past CTR_PARTS");
            assert!(c.key_offset as u64 + c.n_keys as u64 <= self.ctr_keys.len() as u64, "ORACLE: CTR {k} keys past CTR_KEYS");
        }
        for p in &self.ctr_parts {
            assert!(p.feature < m.n_features && p.kind <= ctr_part::ONE_HOT, "ORACLE: CTR part {p:?} accepted");
        }
    }

    /// An oblivious tree: `depth` levels the evaluator tests without following `left`, then
    /// one leaf node starting 2^depth leaves, all inside the tree's range and the file.
    fn check_oblivious(&self, t: usize, spec: &TreeSpec, seen: &mut bool) {
        *seen = true;
        assert!(self.header.format_version >= 3 && self.header.flags & flags::HAS_OBLIVIOUS != 0, "ORACLE: oblivious tree {t} in format {} / flags {:#x}", self.header.format_version, self.header.flags);
        assert!(spec.output < self.meta.n_outputs, "ORACLE: oblivious tree {t} output {}", spec.output);
        assert!(self.header.flags & flags::RICH_LEAVES == 0, "ORACLE: oblivious tree {t} in a model with rich leaves");
        let depth = spec.depth as usize;
        assert!(depth as u32 <= MAX_OBLIVIOUS_DEPTH, "ORACLE: oblivious tree {t} depth {depth}");
        assert_eq!(spec.end as usize, spec.root as usize + depth + 1, "ORACLE: oblivious tree {t} node range");
        assert!(spec.end as usize <= self.nodes.len(), "ORACLE: oblivious tree {t} past NODES");
        for at in spec.root as usize..spec.root as usize + depth {
            let n = self.nodes[at];
            let ff = n_flags(&n);
            assert!(ff & LEAF == 0, "ORACLE: oblivious tree {t} level {at} is a leaf");
            assert!(n_feature(&n) < self.split_features(), "ORACLE: oblivious level {at} feature {}", n_feature(&n));
            match ff & OP_MASK {
                OP_LT | OP_EQ | OP_NE | OP_LT_ZERO_MISSING => assert!(!f32::from_bits(n.payload).is_nan(), "ORACLE: oblivious level {at} NaN threshold"),
                OP_IN_SET | OP_MEMBER => {
                    let c = self.cat_splits.get(n.payload as usize).unwrap_or_else(|| panic!("ORACLE: oblivious level {at} cat split {} out of range", n.payload));
                    assert!(c.word_offset as u64 + c.n_words as u64 <= self.cat_words.len() as u64, "ORACLE: cat split bitset past CAT_WORDS");
                }
                op => panic!("ORACLE: oblivious level {at} unknown op {op:#x} accepted"),
            }
        }
        let leaf = self.nodes[spec.end as usize - 1];
        assert!(n_flags(&leaf) & LEAF != 0, "ORACLE: oblivious tree {t} does not end in a leaf node");
        let first = (leaf.payload & node::LEAF_INDEX_MASK) as usize;
        assert!(first + (1 << depth) <= self.leaves.len(), "ORACLE: oblivious tree {t} leaves {first}+2^{depth} past {}", self.leaves.len());
    }

    fn test(&self, n: &Node, v: f32) -> bool {
        let ff = n_flags(n);
        let missing_yes = ff & MISSING_YES != 0;
        if v.is_nan() {
            return missing_yes;
        }
        let t = f32::from_bits(n.payload);
        match ff & OP_MASK {
            OP_LT => v < t,
            OP_EQ => v == t,
            OP_NE => v != t,
            OP_LT_ZERO_MISSING => {
                if v.abs() <= ZERO_THRESHOLD {
                    missing_yes
                } else {
                    v < t
                }
            }
            OP_IN_SET | OP_MEMBER => {
                if ff & OP_MASK == OP_MEMBER && v != v.trunc() {
                    return false;
                }
                let c = &self.cat_splits[n.payload as usize];
                if !(v > c.invalid_at_or_below) || v >= 4294967296.0 {
                    return false;
                }
                let code = v.trunc().max(0.0) as u64; // v > -1 here unless the bound is lower
                let word = code / 32;
                word < c.n_words as u64 && self.cat_words[(c.word_offset as u64 + word) as usize] >> (code % 32) & 1 == 1
            }
            _ => unreachable!(),
        }
    }

    /// Margins with checked indexing: (margins, magnitudes for the comparison tolerance).
    pub fn margins(&self, x: &[f32]) -> (Vec<f64>, Vec<f64>) {
        let row = self.extended_row(x);
        let x = &row[..];
        let n = self.meta.n_outputs as usize;
        let mut acc = vec![0f64; n];
        let mut mag = vec![0f64; n];
        for spec in &self.trees {
            if spec.layout == tree_layout::OBLIVIOUS {
                let root = spec.root as usize;
                let depth = spec.depth as usize;
                let mut index = 0;
                for k in 0..depth {
                    let nd = &self.nodes[root + k];
                    index |= usize::from(self.test(nd, x[n_feature(nd) as usize])) << k;
                }
                let v = self.leaves[(self.nodes[root + depth].payload & node::LEAF_INDEX_MASK) as usize + index];
                acc[spec.output as usize] += v;
                mag[spec.output as usize] += v.abs();
                continue;
            }
            let mut at = spec.root as usize;
            for step in 0.. {
                assert!(step <= self.nodes.len(), "ORACLE: walk does not end");
                let nd = &self.nodes[at];
                if n_flags(nd) & LEAF != 0 {
                    let li = (nd.payload & node::LEAF_INDEX_MASK) as usize;
                    if spec.output == VECTOR_OUTPUT {
                        for o in 0..n {
                            acc[o] += self.leaves[li + o];
                            mag[o] += self.leaves[li + o].abs();
                        }
                    } else {
                        let v = self.leaf_value(li, x);
                        acc[spec.output as usize] += v;
                        mag[spec.output as usize] += v.abs();
                    }
                    break;
                }
                let v = x[n_feature(nd) as usize];
                at = nd.left as usize + usize::from(!self.test(nd, v));
            }
        }
        let div = averaging_divisor(&self.meta);
        let margins = acc.iter().zip(&self.base).map(|(a, b)| if div == 1.0 { a + b } else { a / div + b }).collect();
        let mags = mag.iter().zip(&self.base).map(|(a, b)| a / div + b.abs()).collect();
        (margins, mags)
    }

    /// Per feature, values that sit on or next to the model's split points.
    pub fn interesting_values(&self) -> Vec<Vec<f32>> {
        let mut per = vec![Vec::new(); self.meta.n_features as usize];
        for n in self.nodes.iter().take(4096) {
            let ff = n_flags(n);
            if ff & LEAF != 0 {
                continue;
            }
            let Some(list) = self.input_of(n_feature(n)).and_then(|f| per.get_mut(f)) else { continue };
            if list.len() > 64 {
                continue;
            }
            if matches!(ff & OP_MASK, OP_IN_SET | OP_MEMBER) {
                if let Some(c) = self.cat_splits.get(n.payload as usize) {
                    list.extend([c.invalid_at_or_below, c.invalid_at_or_below.next_up(), c.n_words as f32 * 32.0, c.n_words as f32 * 32.0 - 0.5]);
                    for w in 0..c.n_words.min(4) {
                        let word = self.cat_words.get((c.word_offset + w) as usize).copied().unwrap_or(0);
                        if let Some(b) = (0..32).find(|b| word >> b & 1 == 1) {
                            let code = (w * 32 + b) as f32;
                            list.extend([code, code + 0.5, code - 0.5]);
                        }
                    }
                }
            } else {
                let t = f32::from_bits(n.payload);
                list.extend([t, t.next_up(), t.next_down()]);
            }
        }
        per
    }
}

/// Small deterministic generator for row values.
pub struct Rng(pub u64);
impl Rng {
    pub fn from_bytes(data: &[u8]) -> Rng {
        let mut h = 0x9E37_79B9_7F4A_7C15u64;
        for chunk in data.chunks(8).take(64) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x100_0000_01B3).rotate_left(29);
        }
        Rng(h | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const AWKWARD: [f32; 14] = [
    0.0,
    -0.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    1e-36,
    -1e-36,
    1e-35,
    f32::MAX,
    f32::MIN,
    -1.0,
    -0.5,
    0.5,
    4294967040.0,
    4294967296.0,
];

/// Rows to score: constant rows (all NaN, zeros, infinities, the zero-as-missing band), rows of
/// values taken from `data` as f32, and rows mixing split points and awkward values.
pub fn rows(n_features: usize, interesting: &[Vec<f32>], data: &[u8], rng: &mut Rng) -> Vec<Vec<f32>> {
    let mut rows: Vec<Vec<f32>> = [f32::NAN, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-36, 1.0].iter().map(|&v| vec![v; n_features]).collect();
    let from_data: Vec<f32> = data.chunks_exact(4).take(n_features).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    if !from_data.is_empty() {
        rows.push((0..n_features).map(|i| from_data[i % from_data.len()]).collect());
    }
    for _ in 0..10 {
        rows.push(
            (0..n_features)
                .map(|f| {
                    let list = interesting.get(f).map(Vec::as_slice).unwrap_or(&[]);
                    match rng.below(10) {
                        0 => f32::NAN,
                        1 | 2 => AWKWARD[rng.below(AWKWARD.len())],
                        3 => rng.below(70) as f32,
                        4 if !from_data.is_empty() => from_data[rng.below(from_data.len())],
                        _ if !list.is_empty() => list[rng.below(list.len())],
                        _ => (rng.below(64) as f32 - 32.0) / 8.0,
                    }
                })
                .collect(),
        );
    }
    rows
}

/// The link's output range, when the margins are finite. (Softmax needs every margin finite:
/// finite leaves can still sum to ±inf, and then softmax is NaN for all outputs.)
fn link_ok(link_kind: u32, margins: &[f64], o: usize, out: f64) -> bool {
    let margin = margins[o];
    if !margin.is_finite() || (link_kind == link::SOFTMAX && margins.iter().any(|m| !m.is_finite())) {
        return true;
    }
    match link_kind {
        link::SIGMOID | link::SOFTMAX => (0.0..=1.0).contains(&out),
        link::EXP => out >= 0.0,
        link::STEP => out == 0.0 || out == 1.0,
        _ => out.to_bits() == margin.to_bits(),
    }
}

/// Everything the fuzz targets do with a model that loaded. Panics (ORACLE:) on a mismatch.
pub fn exercise(model: &Model, data: &[u8]) {
    let e = model.ensemble();
    let bytes = model.as_bytes();
    let art = Art::parse_accepted(bytes);
    art.check_safety();

    // Accessors agree with the bytes.
    assert_eq!(e.n_features(), art.meta.n_features as usize);
    assert_eq!(e.n_outputs(), art.meta.n_outputs as usize);
    assert_eq!(e.trees(), &art.trees[..], "ORACLE: trees()");
    assert_eq!(e.nodes(), &art.nodes[..], "ORACLE: nodes()");
    assert_eq!(e.cat_splits(), &art.cat_splits[..], "ORACLE: cat_splits()");
    assert_eq!(e.base_score().len(), art.base.len());
    assert_eq!(e.size_bytes(), bytes.len());
    assert_eq!(e.header_flags(), art.header.flags);
    assert_eq!(e.checksum(), art.header.checksum);
    let _ = (e.task(), e.source(), e.meta(), e.features());

    // Strings: the evaluator's reading equals an independent one.
    assert_eq!(e.name(), art.string(0), "ORACLE: name");
    assert_eq!(e.version(), art.string(1), "ORACLE: version");
    assert_eq!(e.objective(), art.string(2), "ORACLE: objective");
    for i in 0..e.n_features() {
        assert_eq!(e.feature_name(i), art.string(STRINGS_FIXED + i), "ORACLE: feature_name({i})");
    }

    // One copy always walks, another takes QuickScorer's bitvectors on every row they can
    // score (where the model qualifies), so the two are compared on every row.
    let walk_only = model.clone().without_bitvectors();
    let view = walk_only.ensemble();
    let forced = model.clone().with_bitvectors_on_every_row();
    let scan = forced.ensemble();

    let nf = e.n_features();
    let no = e.n_outputs();
    let mut rng = Rng::from_bytes(data);
    let interesting = art.interesting_values();
    let mut margins = vec![0f64; no];
    let mut margins2 = vec![0f64; no];
    let mut margins3 = vec![0f64; no];
    let mut probs = vec![0f64; no];
    let mut probs32 = vec![0f32; no + 1];
    for x in rows(nf, &interesting, data, &mut rng) {
        e.margins(&x, &mut margins).expect("margins");
        view.margins(&x, &mut margins2).expect("margins (view)");
        scan.margins(&x, &mut margins3).expect("margins (bitvectors)");
        e.score_f64(&x, &mut probs).expect("score_f64");
        e.score(&x, &mut probs32).expect("score");
        let (want, mag) = art.margins(&x);
        for o in 0..no {
            assert_eq!(margins[o].to_bits(), margins2[o].to_bits(), "ORACLE: the model and its copy without bitvectors disagree");
            assert_eq!(margins3[o].to_bits(), margins2[o].to_bits(), "ORACLE: bitvectors and the walk disagree (row {x:?})");
            assert!(close(margins[o], want[o], mag[o]), "ORACLE: output {o}: evaluator margin {} != checked walk {} (row {x:?})", margins[o], want[o]);
            assert!(link_ok(art.meta.link, &margins, o, probs[o]), "ORACLE: link {} maps margin {} to {}", art.meta.link, margins[o], probs[o]);
            assert_eq!(probs32[o].to_bits(), (probs[o] as f32).to_bits(), "ORACLE: score != score_f64 as f32");
        }
    }

    explanations(model, &art, nf, no, data);
    drift_tally(model, nf, no, data);
    ua_table(model, data);

    // Error paths: short feature vectors / output buffers are refused, longer ones accepted.
    let x = vec![0.5f32; nf + 3];
    assert_eq!(e.margins(&x[..nf - 1], &mut margins), Err(ScoreError::Features { got: nf - 1, need: nf }));
    assert_eq!(e.score(&x, &mut probs32[..no - 1]), Err(ScoreError::Outputs { got: no - 1, need: no }));
    e.score(&x, &mut probs32).expect("longer feature vector");

    // The same model in a ModelSet whose shared vector lists its features in reverse order
    // (plus one unknown slot); scoring gathers by name. (Mapping names is quadratic in the
    // feature count, in ModelSet::push too: skip huge mutated feature tables.)
    if nf > 512 {
        return;
    }
    let mut names: Vec<String> = (0..nf).rev().map(|i| e.feature_name(i).to_string()).collect();
    names.push("\u{0}unused".into());
    let mut set = ModelSet::new(names.clone());
    let idx = set.push(bytes).expect("ORACLE: ModelSet refused a model that loads");
    let shared: Vec<f32> = (0..names.len()).map(|j| if j % 3 == 0 { f32::NAN } else { j as f32 * 0.75 - 1.0 }).collect();
    let gathered: Vec<f32> = (0..nf).map(|i| shared[names.iter().position(|n| n == e.feature_name(i)).unwrap()]).collect();
    let mut a = vec![0f32; no];
    let mut b = vec![0f32; no];
    set.score(idx, &shared, &mut a).expect("ModelSet::score");
    e.score(&gathered, &mut b).expect("score gathered");
    assert_eq!(a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), "ORACLE: ModelSet gather");
    assert_eq!(set.len(), 1);
    let _ = set.ensemble(idx).name();
}

/// A model with node values: path attribution's tables build, and every row's credits add up
/// to its margin (the expected value included), where the margin and the credits are finite.
fn explanations(model: &Model, art: &Art, nf: usize, no: usize, data: &[u8]) {
    if model.ensemble().header_flags() & flags::HAS_NODE_VALUES == 0 {
        return;
    }
    let explained = model.clone().with_explainer();
    let e = explained.ensemble();
    let Some(explainer) = e.explainer() else { panic!("ORACLE: a model with node values that loads has no explainer") };
    // Credits are differences of node expected values along a path (weighted means of a
    // subtree's leaves, as large as its largest leaf, over an averaging model's divisor), which
    // may cancel: their sum's rounding is relative to those terms, not to its result.
    let depth = e.trees().iter().map(|t| t.depth as f64).fold(1.0, f64::max);
    let meta = e.meta();
    let divisor = averaging_divisor(meta);
    let largest_leaf = e.leaf_values().iter().map(|v| v.abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let mut credits = vec![0f64; e.explain_len()];
    let mut margins = vec![0f64; no];
    let mut rng = Rng::from_bytes(data);
    for x in rows(nf, &art.interesting_values(), data, &mut rng).into_iter().take(16) {
        e.explain(&x, &mut credits).expect("explain");
        e.margins(&x, &mut margins).expect("margins");
        let (_, mag) = art.margins(&x);
        // A linear leaf's value adds its `coeff * x` terms to its constant in the scorer's order,
        // and its credits keep them apart: what the sum loses to rounding is relative to the
        // largest of those terms (a constant of -4 beside terms of ±2.7e39 is lost in the value).
        let largest_term = (0..e.leaf_values().len())
            .filter_map(|i| e.linear_leaf(i))
            .flat_map(|(_, terms)| terms.iter().map(|t| (t.coeff * f64::from(x[t.feature as usize])).abs()))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        for o in 0..no {
            let own = &credits[o * (nf + 1)..(o + 1) * (nf + 1)];
            let sum: f64 = own.iter().sum();
            let terms = mag[o].max(explainer.expected()[o].abs()).max((largest_leaf + largest_term) * e.trees().len() as f64 / divisor) * 2.0 * depth;
            let scale: f64 = own.iter().map(|c| c.abs()).sum::<f64>().max(margins[o].abs()).max(terms).max(1.0);
            if !(sum.is_finite() && margins[o].is_finite() && scale.is_finite()) {
                continue;
            }
            assert!((sum - margins[o]).abs() <= 1e-9 * scale, "ORACLE: output {o}: credits add up to {sum}, the margin is {} (row {x:?})", margins[o]);
        }
    }
    assert_eq!(e.explain(&vec![0.5; nf.saturating_sub(1)], &mut credits).is_err(), nf > 0, "ORACLE: explain of a short row");
}

/// The UA fingerprint table (format 7), read without trusting the validator: the view's
/// entries are the section's bytes, present exactly with the flag, each entry valid by the
/// reference's definition, in strictly ascending order; and the core's lookup answers as the
/// reference's for JA4s made from the entries and the input.
fn ua_table(model: &Model, data: &[u8]) {
    use crate::feature_reference::ua_consistency::valid_entry;
    let e = model.ensemble();
    let bytes = model.as_bytes();
    let entries = section_entries(bytes).expect("ORACLE: section table");
    let raw = section_bytes(bytes, &entries[18]).expect("ORACLE: UA_FINGERPRINTS outside the file");
    assert_eq!(bytemuck::cast_slice::<UaFingerprint, u8>(e.ua_fingerprints()), raw, "ORACLE: ua_fingerprints()");
    assert_eq!(raw.is_empty(), e.header_flags() & flags::HAS_UA_FINGERPRINTS == 0, "ORACLE: UA_FINGERPRINTS and its flag disagree");
    let table: Vec<(Vec<u8>, Vec<u8>)> = raw
        .chunks(64)
        .map(|c| {
            assert_eq!(c.len(), 64, "ORACLE: a UA_FINGERPRINTS entry cut short");
            let field = |f: &[u8]| {
                let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
                assert!(f[end..].iter().all(|&b| b == 0), "ORACLE: a UA_FINGERPRINTS field with bytes after its padding");
                f[..end].to_vec()
            };
            (field(&c[..24]), field(&c[24..]))
        })
        .collect();
    assert!(table.len() <= MAX_UA_FINGERPRINTS, "ORACLE: {} UA_FINGERPRINTS entries", table.len());
    assert!(raw.chunks(64).zip(raw.chunks(64).skip(1)).all(|(a, b)| a < b), "ORACLE: UA_FINGERPRINTS not strictly ascending");
    for (f, p) in &table {
        assert!(valid_entry(f, p), "ORACLE: accepted UA fingerprint entry ({:?}, {:?})", String::from_utf8_lossy(f), String::from_utf8_lossy(p));
    }
    if table.is_empty() {
        return;
    }
    let core = edgescore_core::features::ua_fingerprints::UaTable::new(e.ua_fingerprints());
    let mut ja4s: Vec<Vec<u8>> = table.iter().map(|(_, p)| p.strip_suffix(b"*").unwrap_or(p).to_vec()).collect();
    ja4s.push(b"t13d1516h2_8daaf6152771_d8a2da3f94cd".to_vec());
    ja4s.push(data.iter().take(36).copied().collect());
    let families: Vec<&[u8]> = table.iter().map(|(f, _)| f.as_slice()).chain([&b"firefox"[..], b"", b"chrom"]).collect();
    for family in &families {
        for ja4 in &ja4s {
            let own: Vec<&Vec<u8>> = table.iter().filter(|(f, _)| f == family).map(|(_, p)| p).collect();
            let want = (!own.is_empty()).then(|| own.iter().any(|p| match p.strip_suffix(b"*") {
                Some(prefix) => ja4.starts_with(prefix),
                None => ja4 == *p,
            }));
            assert_eq!(core.consistent(family, ja4), want, "ORACLE: UaTable::consistent({:?}, {:?})", String::from_utf8_lossy(family), String::from_utf8_lossy(ja4));
        }
    }
}

/// A model with a drift reference: a tally counts every row in exactly one bin per series, the
/// one `drift::bin` names.
fn drift_tally(model: &Model, nf: usize, no: usize, data: &[u8]) {
    let e = model.ensemble();
    let Some(reference) = e.drift_reference() else { return };
    let mut tally = edgescore_core::drift::Tally::default();
    let slots: Vec<u32> = (0..nf as u32).collect();
    tally.add_model(0, "fuzz", e, &slots, 0);
    let mut rng = Rng::from_bytes(data);
    let interesting: Vec<Vec<f32>> = (0..nf).map(|i| reference.feature(i).edges.to_vec()).collect();
    let mut scores = vec![0f32; no];
    let mut n_rows = 0u64;
    for x in rows(nf, &interesting, data, &mut rng).into_iter().take(16) {
        e.score(&x, &mut scores).expect("score");
        for i in 0..nf {
            let bins = reference.feature(i);
            assert!(edgescore_core::drift::bin(bins.edges, x[i]) < bins.shares.len(), "ORACLE: a bin past the reference's shares");
        }
        tally.count(&x, &scores[..1]);
        n_rows += 1;
    }
    // Bins in series order: each input's, then the score's; one count per row in each series.
    let widths: Vec<usize> = (0..nf).map(|i| reference.feature(i).shares.len()).chain([reference.output(0).shares.len()]).collect();
    let mut counts = vec![0u64; tally.bins().len()];
    tally.drain(|i, _, n| counts[i] += n);
    assert_eq!(widths.iter().sum::<usize>(), counts.len(), "ORACLE: drift bins");
    let mut at = 0;
    for (k, w) in widths.into_iter().enumerate() {
        assert_eq!(counts[at..at + w].iter().sum::<u64>(), n_rows, "ORACLE: drift series {k} counted {:?} for {n_rows} rows", &counts[at..at + w]);
        at += w;
    }
}
