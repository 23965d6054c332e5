//! Bytes → [`TreeEnsemble`]: every check that makes evaluation safe, done once at load.
//! After this the evaluator indexes without bounds checks, so each invariant it relies on is
//! enforced here (the list is in `docs/artifact-format.md`).

use super::bitvectors::Bitvectors;
use super::explain::Explainer;
use super::walk::Walk;
use super::TreeEnsemble;
use crate::artifact::layout::*;
use crate::artifact::{checksum, ArtifactError as E};
use bytemuck::{pod_read_unaligned, Pod};
use std::sync::Arc;

/// An owned, validated artifact: an 8-byte-aligned copy of the bytes (buffers handed over by a
/// host or read from disk are `Vec<u8>`, aligned to 1), what validation learned, and the
/// evaluator's view of them, built once here. The view borrows the owned parts, so the two
/// live in one self-referential cell: [`Model::ensemble`] is then a field read, not the
/// ~300 instructions of slicing and cast checks a view per call costs on every request. The cell
/// is shared: a clone (one per Envoy worker's scorer, at every model update) is a reference
/// count, not a copy of the bytes, the walk and the bitvectors.
#[derive(Clone)]
pub struct Model {
    cell: Arc<Cell>,
}

/// What the view borrows.
#[derive(Clone)]
struct Owned {
    words: Vec<u64>,
    len: usize,
    parts: Parts,
    /// What the lockstep walk reads besides the row (see `walk.rs`).
    walk: Walk,
    bitvectors: Option<Bitvectors>,
    /// Path attribution's tables (`explain.rs`), once [`Model::with_explainer`] built them.
    explainer: Option<Explainer>,
}

impl Owned {
    fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}

self_cell::self_cell!(
    struct Cell {
        owner: Owned,
        #[covariant]
        dependent: TreeEnsemble,
    }
);

/// What validation learned: section ranges and the header facts the evaluator needs.
#[derive(Clone)]
pub(crate) struct Parts {
    meta: Meta,
    flags: u32,
    checksum: u64,
    /// Trees `..n_walked` are `NODES` trees, the rest `OBLIVIOUS`.
    n_walked: usize,
    /// Whether a row with a NaN input needs the NaN-aware walk (see [`nan_tests`]).
    nan_walk: bool,
    ranges: [core::ops::Range<usize>; 19],
    /// Where DRIFT_EDGES' series table ends and its edges begin (0 without a drift reference).
    drift_split: usize,
}

impl Model {
    /// Copies and validates `bytes`.
    pub fn load(bytes: &[u8]) -> Result<Model, E> {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        let len = bytes.len();
        let aligned = &bytemuck::cast_slice::<u64, u8>(&words)[..len];
        let parts = validate(aligned)?;
        let r = |k: usize| &aligned[parts.ranges[k].clone()];
        let trees: &[TreeSpec] = bytemuck::cast_slice(r(4));
        let walk = Walk::build(bytemuck::cast_slice(r(5)), &trees[..parts.n_walked], bytemuck::cast_slice(r(8)));
        let bitvectors = Bitvectors::build(&view(aligned, &parts, &walk, None, None), false);
        Ok(Model::from_owned(Owned { words, len, parts, walk, bitvectors, explainer: None }))
    }

    fn from_owned(owned: Owned) -> Model {
        Model { cell: Arc::new(Cell::new(owned, |o| view(o.as_bytes(), &o.parts, &o.walk, o.bitvectors.as_ref(), o.explainer.as_ref()))) }
    }

    /// The owned parts, copied if another clone shares them.
    fn into_owned(self) -> Owned {
        Arc::try_unwrap(self.cell).map_or_else(|shared| shared.borrow_owner().clone(), Cell::into_owner)
    }

    /// This model with QuickScorer's bitvectors on every row they can score, whatever the
    /// cost model says: for tests and the fuzz oracle, which compare them with the walk.
    #[doc(hidden)]
    pub fn with_bitvectors_on_every_row(self) -> Model {
        let mut o = self.into_owned();
        o.bitvectors = Bitvectors::build(&view(o.as_bytes(), &o.parts, &o.walk, None, None), true);
        Model::from_owned(o)
    }

    /// This model without QuickScorer's bitvectors: every row takes the lockstep walk. For
    /// tests and the fuzz oracle, which compare the two.
    #[doc(hidden)]
    pub fn without_bitvectors(self) -> Model {
        let mut o = self.into_owned();
        o.bitvectors = None;
        Model::from_owned(o)
    }

    /// This model with path attribution's tables (`explain.rs`: node expected values, each
    /// leaf's credits), which `TreeEnsemble::explain` and its kin need, built from its node
    /// values; unchanged without them (or with them built already). Not part of `load`: only
    /// a model that will be explained pays for them (`Explainer::bytes`).
    pub fn with_explainer(self) -> Model {
        let o = self.cell.borrow_owner();
        if o.explainer.is_some() || o.parts.flags & flags::HAS_NODE_VALUES == 0 {
            return self;
        }
        let mut o = self.into_owned();
        // Validation checked the section; `build` fails only on what it refused.
        let explainer = Explainer::build(&view(o.as_bytes(), &o.parts, &o.walk, None, None), &o.as_bytes()[o.parts.ranges[15].clone()]);
        o.explainer = explainer;
        Model::from_owned(o)
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.cell.borrow_owner().as_bytes()
    }

    /// The evaluator's view of the bytes.
    pub fn ensemble(&self) -> &TreeEnsemble<'_> {
        self.cell.borrow_dependent()
    }
}

/// Slices validated bytes into the evaluator's view. Only called with `parts` that `validate`
/// returned for these very bytes, so every cast lines up.
fn view<'a>(bytes: &'a [u8], p: &Parts, walk: &'a Walk, bitvectors: Option<&'a Bitvectors>, explainer: Option<&'a Explainer>) -> TreeEnsemble<'a> {
    let r = |k: usize| &bytes[p.ranges[k].clone()];
    let node_values = r(15);
    let head = core::mem::size_of::<NodeValuesHeader>().min(node_values.len());
    let cover_kind = if node_values.len() >= core::mem::size_of::<NodeValuesHeader>() {
        crate::artifact::CoverKind::from_u32(pod_read_unaligned::<NodeValuesHeader>(&node_values[..head]).kind)
    } else {
        None
    };
    TreeEnsemble {
        meta: p.meta,
        flags: p.flags,
        checksum: p.checksum,
        n_walked: p.n_walked,
        nan_walk: p.nan_walk,
        bitvectors,
        len: bytes.len(),
        strings: r(1),
        features: bytemuck::cast_slice(r(2)),
        base: bytemuck::cast_slice(r(3)),
        trees: bytemuck::cast_slice(r(4)),
        nodes: bytemuck::cast_slice(r(5)),
        walk_nodes: &walk.nodes,
        walk_groups: &walk.groups,
        walk_cat_words: &walk.cat_words,
        leaves: bytemuck::cast_slice(r(6)),
        cat_splits: bytemuck::cast_slice(r(7)),
        cat_words: bytemuck::cast_slice(r(8)),
        linear_leaves: bytemuck::cast_slice(r(9)),
        linear_terms: bytemuck::cast_slice(r(10)),
        ctr_features: bytemuck::cast_slice(r(11)),
        ctr_parts: bytemuck::cast_slice(r(12)),
        ctr_keys: bytemuck::cast_slice(r(13)),
        ctr_values: bytemuck::cast_slice(r(14)),
        drift_series: bytemuck::cast_slice(&r(16)[..p.drift_split]),
        drift_edges: bytemuck::cast_slice(&r(16)[p.drift_split..]),
        drift_shares: bytemuck::cast_slice(r(17)),
        ua_fingerprints: bytemuck::cast_slice(r(18)),
        explainer,
        cover_kind,
        covers: bytemuck::cast_slice(&node_values[head..]),
    }
}

fn section<'a, T: Pod>(bytes: &'a [u8], e: &SectionEntry, kind: SectionKind, count: u64) -> Result<&'a [T], E> {
    let size = core::mem::size_of::<T>() as u64;
    let expected = count.checked_mul(size).ok_or(E::SectionLength { section: kind.name(), len: e.len, expected: u64::MAX })?;
    if e.len != expected {
        return Err(E::SectionLength { section: kind.name(), len: e.len, expected });
    }
    let raw = &bytes[e.offset as usize..(e.offset + e.len) as usize];
    // Offsets are 16-aligned and the buffer 8-aligned, so this cast cannot fail for types of
    // alignment <= 8; map the impossible case to an error rather than a panic anyway.
    bytemuck::try_cast_slice(raw).map_err(|_| E::Misaligned)
}

fn validate(bytes: &[u8]) -> Result<Parts, E> {
    {
        if cfg!(target_endian = "big") {
            return Err(E::BigEndianHost);
        }
        if bytes.len() < HEADER_LEN {
            return Err(E::TooShort { len: bytes.len(), need: HEADER_LEN });
        }
        let header: Header = pod_read_unaligned(&bytes[..HEADER_LEN]);
        if header.magic != MAGIC {
            return Err(E::BadMagic);
        }
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&header.format_version) {
            return Err(E::UnsupportedVersion { found: header.format_version, supported: FORMAT_VERSION });
        }
        if header.file_len != bytes.len() as u64 {
            return Err(E::LengthMismatch { declared: header.file_len, actual: bytes.len() });
        }
        let computed = checksum(bytes);
        if computed != header.checksum {
            return Err(E::ChecksumMismatch { stored: header.checksum, computed });
        }
        if !(bytes.as_ptr() as usize).is_multiple_of(8) {
            return Err(E::Misaligned);
        }
        let known = flags::known(header.format_version);
        if header.flags & !known != 0 {
            return Err(E::UnknownFlags(header.flags & !known));
        }
        if header.reserved != [0; 7] {
            return Err(E::ReservedNotZero("header.reserved"));
        }
        let entries = section_table(bytes, &header)?;
        let meta: Meta = {
            let e = &entries[0];
            if e.len != core::mem::size_of::<Meta>() as u64 {
                return Err(E::SectionLength { section: "META", len: e.len, expected: core::mem::size_of::<Meta>() as u64 });
            }
            pod_read_unaligned(&bytes[e.offset as usize..(e.offset + e.len) as usize])
        };
        check_meta(&meta)?;
        if meta.link > link::EXP && header.format_version < 2 {
            return Err(E::Meta("unknown link function"));
        }
        let strings = &bytes[entries[1].offset as usize..(entries[1].offset + entries[1].len) as usize];
        check_strings(strings, meta.n_features)?;
        let features: &[FeatureSpec] = section(bytes, &entries[2], SectionKind::Features, meta.n_features as u64)?;
        let base: &[f64] = section(bytes, &entries[3], SectionKind::Base, meta.n_outputs as u64)?;
        let trees: &[TreeSpec] = section(bytes, &entries[4], SectionKind::Trees, meta.n_trees as u64)?;
        let nodes: &[Node] = section(bytes, &entries[5], SectionKind::Nodes, meta.n_nodes as u64)?;
        let leaves: &[f64] = section(bytes, &entries[6], SectionKind::Leaves, meta.n_leaves as u64)?;
        let cat_splits: &[CatSplit] = section(bytes, &entries[7], SectionKind::CatSplits, meta.n_cat_splits as u64)?;
        let cat_words: &[u32] = section(bytes, &entries[8], SectionKind::CatWords, meta.n_cat_words as u64)?;
        let linear = header.flags & flags::HAS_LINEAR_LEAVES != 0;
        let n_linear = if linear { meta.n_leaves as u64 } else { 0 };
        let linear_leaves: &[LinearLeaf] = section(bytes, &entries[9], SectionKind::LinearLeaves, n_linear)?;
        let n_terms = entries[10].len / core::mem::size_of::<LinearTerm>() as u64;
        let linear_terms: &[LinearTerm] = section(bytes, &entries[10], SectionKind::LinearTerms, if linear { n_terms } else { 0 })?;
        check_linear(&meta, linear_leaves, linear_terms)?;
        let ctrs = header.flags & flags::HAS_CTRS != 0;
        let count = |k: usize, size: usize| if ctrs { entries[k].len / size as u64 } else { 0 };
        let ctr_features: &[CtrFeature] = section(bytes, &entries[11], SectionKind::CtrFeatures, count(11, 24))?;
        let ctr_parts: &[CtrPart] = section(bytes, &entries[12], SectionKind::CtrParts, count(12, 16))?;
        let ctr_keys: &[u64] = section(bytes, &entries[13], SectionKind::CtrKeys, count(13, 8))?;
        let ctr_values: &[f32] = section(bytes, &entries[14], SectionKind::CtrValues, ctr_keys.len() as u64)?;
        check_ctrs(&meta, ctrs, ctr_features, ctr_parts, ctr_keys, ctr_values)?;
        let n_ctr = ctr_features.len() as u32;
        let columns = flags::NAN_LOW_COLUMNS | flags::ZERO_MISSING_COLUMNS;
        // Splits may test the inputs, the CTR features and the columns, in that order
        // (check_meta and check_ctrs bound both counts: the length fits a u32).
        let split_features = row_len(meta.n_features, n_ctr, header.flags);
        if header.flags & columns != 0 && split_features > MAX_CTR_ROW {
            return Err(E::Meta("inputs, CTR features and derived columns exceed the row limit"));
        }

        for (i, f) in features.iter().enumerate() {
            let ok = match f.kind {
                FEATURE_NUMERIC => f.buckets == 0,
                FEATURE_CATEGORICAL => f.buckets >= 1,
                _ => return Err(E::Feature { feature: i, reason: "unknown feature kind" }),
            };
            if !ok {
                return Err(E::Feature { feature: i, reason: "bucket count does not fit the feature kind" });
            }
        }
        if let Some(i) = base.iter().position(|v| !v.is_finite()) {
            return Err(E::NotFinite { what: "base score", index: i });
        }
        if let Some(i) = leaves.iter().position(|v| !v.is_finite()) {
            return Err(E::NotFinite { what: "leaf value", index: i });
        }
        for (i, c) in cat_splits.iter().enumerate() {
            if c.reserved != 0 {
                return Err(E::ReservedNotZero("cat_split.reserved"));
            }
            if c.n_words > MAX_SET_WORDS {
                return Err(E::CatSplit { split: i, reason: "bitset longer than MAX_SET_WORDS (codes of 2^31 and above)" });
            }
            if c.word_offset as u64 + c.n_words as u64 > cat_words.len() as u64 {
                return Err(E::CatSplit { split: i, reason: "bitset extends past CAT_WORDS" });
            }
            if c.invalid_at_or_below.is_nan() {
                return Err(E::CatSplit { split: i, reason: "NaN lower bound" });
            }
        }
        let (used, n_walked) = check_trees(&meta, header.format_version, split_features, trees, nodes)?;
        check_node_values(&meta, header.flags & flags::HAS_NODE_VALUES != 0, bytes, &entries[15], trees, nodes)?;
        let (low_start, zero_start) = (nan_low_start(meta.n_features, n_ctr), zero_low_start(meta.n_features, n_ctr));
        let reads = |from: u32, to: u32| nodes.iter().any(|n| n.flags & node::LEAF == 0 && (from..to).contains(&(n.feature as u32)));
        let nan_walk = nodes.iter().any(|n| n.sees_nan(meta.n_features));
        let used = used
            | if linear { flags::HAS_LINEAR_LEAVES } else { 0 }
            | if ctrs { flags::HAS_CTRS } else { 0 }
            | if reads(low_start, zero_start) { flags::NAN_LOW_COLUMNS } else { 0 }
            | if reads(zero_start, u32::MAX) { flags::ZERO_MISSING_COLUMNS } else { 0 }
            // The format-6 sections were checked against their flags above and below.
            | header.flags & flags::HAS_NODE_VALUES;
        if used & flags::RICH_LEAVES == flags::RICH_LEAVES {
            return Err(E::Meta("vector leaves and linear leaves in one model"));
        }
        if used & flags::HAS_OBLIVIOUS != 0 && used & flags::RICH_LEAVES != 0 {
            return Err(E::Meta("oblivious trees with vector or linear leaves"));
        }
        let drift = header.flags & flags::HAS_DRIFT_REFERENCE != 0;
        let drift_split = check_drift(bytes, &meta, drift, &entries[16], &entries[17])?;
        let used = used | if drift { flags::HAS_DRIFT_REFERENCE } else { 0 };
        let ua_table = header.flags & flags::HAS_UA_FINGERPRINTS != 0;
        check_ua_fingerprints(bytes, ua_table, &entries[18])?;
        let used = used | if ua_table { flags::HAS_UA_FINGERPRINTS } else { 0 };
        if used != header.flags {
            return Err(E::FlagsMismatch { declared: header.flags, used });
        }
        let _ = strings;
        Ok(Parts {
            meta,
            flags: header.flags,
            checksum: header.checksum,
            n_walked,
            nan_walk,
            drift_split,
            ranges: entries.map(|e| e.offset as usize..(e.offset + e.len) as usize),
        })
    }
}

/// The section table; the sections an older format lacks come back empty.
fn section_table(bytes: &[u8], header: &Header) -> Result<[SectionEntry; 19], E> {
    let count = section_count(header.format_version);
    if header.section_count as usize != count {
        return Err(E::SectionTable("wrong number of sections"));
    }
    let entry_len = core::mem::size_of::<SectionEntry>();
    let table_end = HEADER_LEN + count * entry_len;
    if bytes.len() < table_end {
        return Err(E::SectionTable("truncated"));
    }
    let mut entries = [SectionEntry { kind: 0, reserved: 0, offset: 0, len: 0 }; 19];
    let mut previous_end = table_end as u64;
    for (i, kind) in SECTION_KINDS[..count].iter().enumerate() {
        let at = HEADER_LEN + i * entry_len;
        let e: SectionEntry = pod_read_unaligned(&bytes[at..at + entry_len]);
        if e.kind != *kind as u32 {
            return Err(E::SectionTable("sections out of order or of unknown kind"));
        }
        if e.reserved != 0 {
            return Err(E::ReservedNotZero("section.reserved"));
        }
        if !e.offset.is_multiple_of(SECTION_ALIGN as u64) {
            return Err(E::SectionTable("section offset not 16-byte aligned"));
        }
        if e.offset < previous_end {
            return Err(E::SectionTable("sections overlap"));
        }
        let end = e.offset.checked_add(e.len).ok_or(E::SectionTable("section length overflows"))?;
        if end > bytes.len() as u64 {
            return Err(E::SectionTable("section extends past the end of the file (truncated?)"));
        }
        previous_end = end;
        entries[i] = e;
    }
    Ok(entries)
}

fn check_meta(m: &Meta) -> Result<(), E> {
    if !(1..=3).contains(&m.task) {
        return Err(E::Meta("unknown task"));
    }
    if !(1..=4).contains(&m.source) {
        return Err(E::Meta("unknown source format"));
    }
    if m.link > link::STEP {
        return Err(E::Meta("unknown link function"));
    }
    if m.aggregate > aggregate::AVERAGE {
        return Err(E::Meta("unknown aggregation"));
    }
    if !m.link_param.is_finite() {
        return Err(E::Meta("link parameter is not finite"));
    }
    if !(m.aggregate_divisor.is_finite() && m.aggregate_divisor > 0.0) {
        return Err(E::Meta("averaging divisor is not a positive finite number"));
    }
    if m.n_features == 0 || m.n_features > MAX_FEATURES {
        return Err(E::Meta("feature count out of range"));
    }
    if m.n_outputs == 0 || m.n_outputs as usize > crate::MAX_OUTPUTS {
        return Err(E::Meta("output count out of range"));
    }
    if m.n_nodes > MAX_NODES {
        return Err(E::Meta("too many nodes"));
    }
    if m.n_leaves > MAX_LEAVES {
        return Err(E::Meta("too many leaves"));
    }
    Ok(())
}

fn check_strings(s: &[u8], n_features: u32) -> Result<(), E> {
    if s.len() < 4 {
        return Err(E::Strings("truncated"));
    }
    let count = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as u64;
    if count != STRINGS_FIXED as u64 + n_features as u64 {
        return Err(E::Strings("entry count does not match the feature count"));
    }
    let data_start = 4 + 4 * count;
    if data_start > s.len() as u64 {
        return Err(E::Strings("truncated offsets"));
    }
    let data = &s[data_start as usize..];
    let mut start = 0usize;
    for i in 0..count as usize {
        let end = u32::from_le_bytes(s[4 + 4 * i..8 + 4 * i].try_into().unwrap_or([0; 4])) as usize;
        if end < start || end > data.len() {
            return Err(E::Strings("offsets out of order or out of range"));
        }
        if core::str::from_utf8(&data[start..end]).is_err() {
            return Err(E::Strings("not UTF-8"));
        }
        start = end;
    }
    if start != data.len() {
        return Err(E::Strings("trailing bytes"));
    }
    Ok(())
}

/// Linear leaves: finite constants, term ranges inside LINEAR_TERMS, terms on real features,
/// finite coefficients.
fn check_linear(meta: &Meta, leaves: &[LinearLeaf], terms: &[LinearTerm]) -> Result<(), E> {
    for (i, l) in leaves.iter().enumerate() {
        if !l.constant.is_finite() {
            return Err(E::NotFinite { what: "linear leaf constant", index: i });
        }
        if l.term_offset as u64 + l.n_terms as u64 > terms.len() as u64 {
            return Err(E::Linear { index: i, reason: "terms extend past LINEAR_TERMS" });
        }
    }
    for (i, t) in terms.iter().enumerate() {
        if t.reserved != 0 {
            return Err(E::ReservedNotZero("linear_term.reserved"));
        }
        if t.feature >= meta.n_features {
            return Err(E::Linear { index: i, reason: "term on a feature out of range" });
        }
        if !t.coeff.is_finite() {
            return Err(E::NotFinite { what: "linear coefficient", index: i });
        }
    }
    Ok(())
}

/// CTR features: declared exactly when the flag is set, parts on input features, key ranges
/// inside CTR_KEYS and ascending (the evaluator binary-searches them), finite values, and a
/// row with the CTR values that fits the evaluator's stack buffer.
fn check_ctrs(meta: &Meta, declared: bool, ctrs: &[CtrFeature], parts: &[CtrPart], keys: &[u64], values: &[f32]) -> Result<(), E> {
    if declared && ctrs.is_empty() {
        return Err(E::Ctr { index: 0, reason: "HAS_CTRS without CTR features" });
    }
    if meta.n_features as u64 + ctrs.len() as u64 > MAX_CTR_ROW as u64 && declared {
        return Err(E::Ctr { index: 0, reason: "inputs and CTR features exceed MAX_CTR_ROW" });
    }
    for (i, p) in parts.iter().enumerate() {
        if p.reserved != 0 {
            return Err(E::ReservedNotZero("ctr_part.reserved"));
        }
        if p.kind > ctr_part::ONE_HOT {
            return Err(E::CtrPart { index: i, reason: "unknown kind" });
        }
        if p.feature >= meta.n_features {
            return Err(E::CtrPart { index: i, reason: "feature out of range" });
        }
        if matches!(p.kind, ctr_part::ABOVE | ctr_part::ABOVE_NAN_TRUE) && f32::from_bits(p.value).is_nan() {
            return Err(E::CtrPart { index: i, reason: "NaN border" });
        }
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(E::NotFinite { what: "CTR value", index: i });
    }
    for (i, c) in ctrs.iter().enumerate() {
        if c.reserved != 0 {
            return Err(E::ReservedNotZero("ctr_feature.reserved"));
        }
        if !c.empty_value.is_finite() {
            return Err(E::NotFinite { what: "CTR empty value", index: i });
        }
        if c.n_parts == 0 || c.part_offset as u64 + c.n_parts as u64 > parts.len() as u64 {
            return Err(E::Ctr { index: i, reason: "parts empty or past CTR_PARTS" });
        }
        let end = c.key_offset as u64 + c.n_keys as u64;
        if end > keys.len() as u64 {
            return Err(E::Ctr { index: i, reason: "keys extend past CTR_KEYS" });
        }
        if keys[c.key_offset as usize..end as usize].windows(2).any(|w| w[0] >= w[1]) {
            return Err(E::Ctr { index: i, reason: "keys not strictly ascending" });
        }
    }
    Ok(())
}

/// The drift reference (DRIFT_EDGES, DRIFT_SHARES): empty without `HAS_DRIFT_REFERENCE`;
/// with it, a series per input and per output whose edges follow each other in order,
/// finite and strictly ascending, at most [`MAX_DRIFT_EDGES`] each, and whose `n_edges + 2`
/// shares are in [0, 1] and sum to 1. Returns the byte length of DRIFT_EDGES' series table.
fn check_drift(bytes: &[u8], meta: &Meta, declared: bool, edges: &SectionEntry, shares: &SectionEntry) -> Result<usize, E> {
    if !declared {
        for (e, kind) in [(edges, SectionKind::DriftEdges), (shares, SectionKind::DriftShares)] {
            if e.len != 0 {
                return Err(E::SectionLength { section: kind.name(), len: e.len, expected: 0 });
            }
        }
        return Ok(0);
    }
    let n_series = meta.n_features as usize + meta.n_outputs as usize;
    let table = n_series * core::mem::size_of::<DriftSeries>();
    let raw = &bytes[edges.offset as usize..(edges.offset + edges.len) as usize];
    if raw.len() < table || !(raw.len() - table).is_multiple_of(4) {
        return Err(E::SectionLength { section: "DRIFT_EDGES", len: edges.len, expected: table as u64 });
    }
    let series: &[DriftSeries] = bytemuck::try_cast_slice(&raw[..table]).map_err(|_| E::Misaligned)?;
    let values: &[f32] = bytemuck::try_cast_slice(&raw[table..]).map_err(|_| E::Misaligned)?;
    let mut next_edge = 0u64;
    let mut n_bins = 0u64;
    for (i, s) in series.iter().enumerate() {
        let err = |reason| E::Drift { series: i, reason };
        if s.first_edge as u64 != next_edge {
            return Err(err("edges do not start where the previous series' ended"));
        }
        if s.n_edges > MAX_DRIFT_EDGES {
            return Err(err("more edges than MAX_DRIFT_EDGES"));
        }
        next_edge += s.n_edges as u64;
        if next_edge > values.len() as u64 {
            return Err(err("edges extend past DRIFT_EDGES"));
        }
        let own = &values[s.first_edge as usize..next_edge as usize];
        if own.iter().any(|e| !e.is_finite()) {
            return Err(err("an edge is not finite"));
        }
        if own.windows(2).any(|w| w[0] >= w[1]) {
            return Err(err("edges not strictly ascending"));
        }
        n_bins += s.n_edges as u64 + 2;
    }
    if next_edge != values.len() as u64 {
        return Err(E::Drift { series: n_series, reason: "edges left over after the last series" });
    }
    let shares: &[f32] = section(bytes, shares, SectionKind::DriftShares, n_bins)?;
    let mut start = 0usize;
    for (i, s) in series.iter().enumerate() {
        let own = &shares[start..start + s.n_edges as usize + 2];
        start += own.len();
        if own.iter().any(|v| !(0.0..=1.0).contains(v)) {
            return Err(E::Drift { series: i, reason: "a share is not in [0, 1]" });
        }
        if (own.iter().sum::<f32>() - 1.0).abs() > DRIFT_SHARE_TOLERANCE {
            return Err(E::Drift { series: i, reason: "shares do not sum to 1" });
        }
    }
    Ok(table)
}

/// UA_FINGERPRINTS: empty without `HAS_UA_FINGERPRINTS`; with it, whole entries, as many as
/// `MAX_UA_FINGERPRINTS` at most, each valid and in order (`features::ua_fingerprints::check`).
fn check_ua_fingerprints(bytes: &[u8], declared: bool, e: &SectionEntry) -> Result<(), E> {
    let kind = SectionKind::UaFingerprints;
    if !declared {
        return if e.len == 0 { Ok(()) } else { Err(E::SectionLength { section: kind.name(), len: e.len, expected: 0 }) };
    }
    let entries: &[UaFingerprint] = section(bytes, e, kind, e.len / core::mem::size_of::<UaFingerprint>() as u64)?;
    crate::features::ua_fingerprints::check(entries).map_err(|(index, reason)| E::UaFingerprints { index, reason })
}

/// NODE_VALUES: empty without `HAS_NODE_VALUES`; with it, its header (a known cover kind) and
/// one finite, non-negative cover per LEAVES value, each tree's leaves covering more than 0.
/// Runs after `check_trees`, so every tree's leaf indices are known to be in range.
fn check_node_values(meta: &Meta, declared: bool, bytes: &[u8], e: &SectionEntry, trees: &[TreeSpec], nodes: &[Node]) -> Result<(), E> {
    if !declared {
        return if e.len == 0 { Ok(()) } else { Err(E::NodeValues("section not empty without HAS_NODE_VALUES")) };
    }
    let head = core::mem::size_of::<NodeValuesHeader>() as u64;
    let expected = head + meta.n_leaves as u64 * 4;
    if e.len != expected {
        return Err(E::SectionLength { section: "NODE_VALUES", len: e.len, expected });
    }
    let raw = &bytes[e.offset as usize..(e.offset + e.len) as usize];
    let header: NodeValuesHeader = pod_read_unaligned(&raw[..head as usize]);
    if crate::artifact::CoverKind::from_u32(header.kind).is_none() {
        return Err(E::NodeValues("unknown cover kind"));
    }
    if header.reserved != 0 {
        return Err(E::ReservedNotZero("node_values.reserved"));
    }
    let covers: &[f32] = bytemuck::try_cast_slice(&raw[head as usize..]).map_err(|_| E::Misaligned)?;
    if let Some(i) = covers.iter().position(|c| !(c.is_finite() && *c >= 0.0)) {
        return Err(E::NotFinite { what: "leaf cover (or negative)", index: i });
    }
    for (t, tree) in trees.iter().enumerate() {
        let total: f64 = leaf_ranges(meta, tree, nodes).map(|r| covers[r].iter().map(|&c| c as f64).sum::<f64>()).sum();
        if total.is_nan() || total <= 0.0 {
            return Err(E::Tree { tree: t, reason: "its leaves' covers sum to 0" });
        }
    }
    Ok(())
}

/// The LEAVES ranges of a validated tree's leaves (an oblivious tree: its whole table).
pub(crate) fn leaf_ranges<'a>(meta: &Meta, tree: &TreeSpec, nodes: &'a [Node]) -> impl Iterator<Item = core::ops::Range<usize>> + 'a {
    let width = if tree.output == VECTOR_OUTPUT { meta.n_outputs as usize } else { 1 };
    let table = if tree.layout == tree_layout::OBLIVIOUS { 1usize << tree.depth } else { width };
    nodes[tree.root as usize..tree.end as usize].iter().filter(|n| n.flags & node::LEAF != 0).map(move |n| {
        let first = (n.payload & node::LEAF_INDEX_MASK) as usize;
        first..first + table
    })
}

/// Checks every tree and node; returns the header flags the node tests and tree kinds require.
/// Splits may test `split_features` features: the inputs, then the CTR features.
/// Returns the flags the trees use and how many `NODES` trees come before the oblivious ones.
fn check_trees(meta: &Meta, version: u32, split_features: u32, trees: &[TreeSpec], nodes: &[Node]) -> Result<(u32, usize), E> {
    let mut used = 0u32;
    let mut n_walked = 0usize;
    let mut next_root = 0u32;
    let mut next_leaf = 0u64;
    let mut max_depth = 0u32;
    // Per-node depth and parent count; reused across trees (allocation happens at load only).
    let mut depth: Vec<u32> = Vec::new();
    let mut parents: Vec<u8> = Vec::new();
    for (t, spec) in trees.iter().enumerate() {
        let tree_err = |reason| E::Tree { tree: t, reason };
        if spec.root != next_root {
            return Err(tree_err("node range does not start where the previous tree ended"));
        }
        if spec.end <= spec.root || spec.end > meta.n_nodes {
            return Err(tree_err("node range out of bounds"));
        }
        let leaf_width = if spec.output == VECTOR_OUTPUT {
            used |= flags::HAS_VECTOR_LEAVES;
            meta.n_outputs as u64
        } else if spec.output < meta.n_outputs {
            1
        } else {
            return Err(tree_err("output index out of range"));
        };
        if spec.depth as u32 > MAX_DEPTH {
            return Err(tree_err("too deep"));
        }
        match spec.layout {
            tree_layout::NODES if n_walked == t => n_walked += 1,
            tree_layout::NODES => return Err(tree_err("a node tree after an oblivious tree")),
            tree_layout::OBLIVIOUS if version >= 3 => {
                if spec.output == VECTOR_OUTPUT {
                    return Err(tree_err("an oblivious tree with vector leaves"));
                }
                used |= flags::HAS_OBLIVIOUS | check_oblivious(t, meta, version, split_features, spec, nodes, &mut next_leaf)?;
                next_root = spec.end;
                max_depth = max_depth.max(spec.depth as u32);
                continue;
            }
            _ => return Err(tree_err("unknown tree layout")),
        }
        next_root = spec.end;
        let n = (spec.end - spec.root) as usize;
        depth.clear();
        depth.resize(n, 0);
        parents.clear();
        parents.resize(n, 0);
        let mut tree_depth = 0u32;
        for local in 0..n {
            let i = spec.root as usize + local;
            let node_err = |reason| E::Node { tree: t, node: i, reason };
            let nd = nodes[i];
            if local > 0 && parents[local] != 1 {
                return Err(node_err("not reachable from the root"));
            }
            if nd.flags & node::LEAF != 0 {
                if nd.left != (i as u32).wrapping_sub(1) {
                    return Err(node_err("leaf does not point to itself"));
                }
                if nd.flags != node::LEAF || nd.feature != 0 {
                    return Err(node_err("leaf carries feature or flag bits"));
                }
                if nd.payload & !node::LEAF_INDEX_MASK != node::LEAF_NAN {
                    return Err(node_err("leaf payload is not a leaf NaN"));
                }
                if (nd.payload & node::LEAF_INDEX_MASK) as u64 != next_leaf {
                    return Err(node_err("leaf index out of sequence (leaf count mismatch)"));
                }
                next_leaf += leaf_width;
                tree_depth = tree_depth.max(depth[local]);
                continue;
            }
            if nd.flags & node::RESERVED != 0 {
                return Err(node_err("reserved flag bits set"));
            }
            used |= check_test(&nd, meta, version, split_features).map_err(node_err)?;
            let left = nd.left as u64;
            if left <= i as u64 {
                return Err(node_err("child index not greater than the node's (cycle)"));
            }
            if left + 1 >= spec.end as u64 {
                return Err(node_err("child index out of range"));
            }
            let l = left as usize - spec.root as usize;
            for c in [l, l + 1] {
                parents[c] = parents[c].saturating_add(1);
                depth[c] = depth[local] + 1;
            }
        }
        if tree_depth != spec.depth as u32 {
            return Err(tree_err("declared depth does not match the tree"));
        }
        max_depth = max_depth.max(tree_depth);
    }
    if next_root != meta.n_nodes {
        return Err(E::Meta("nodes not covered by any tree"));
    }
    if next_leaf != meta.n_leaves as u64 {
        return Err(E::LeafCount { declared: meta.n_leaves, found: next_leaf });
    }
    if max_depth != meta.max_depth {
        return Err(E::Meta("max depth does not match the trees"));
    }
    Ok((used, n_walked))
}

/// A split node's feature and test, in either layout; returns the flag its test needs.
fn check_test(nd: &Node, meta: &Meta, version: u32, split_features: u32) -> Result<u32, &'static str> {
    if nd.feature as u32 >= split_features {
        return Err("feature index out of range");
    }
    let used = match nd.flags & node::OP_MASK {
        node::OP_LT => 0,
        node::OP_IN_SET | node::OP_MEMBER => {
            if nd.flags & node::OP_MASK == node::OP_MEMBER && version < 2 {
                return Err("unknown test");
            }
            if nd.payload >= meta.n_cat_splits {
                return Err("categorical split index out of range");
            }
            return Ok(flags::HAS_CATEGORICAL);
        }
        node::OP_EQ | node::OP_NE | node::OP_LT_ZERO_MISSING => flags::HAS_RARE_TESTS,
        _ => return Err("unknown test"),
    };
    if f32::from_bits(nd.payload).is_nan() {
        return Err("NaN threshold");
    }
    Ok(used)
}

/// An oblivious tree (`tree_layout::OBLIVIOUS`): `depth` split nodes, then one leaf node whose
/// payload starts a table of 2^depth LEAVES values. Returns the test flags its levels use.
fn check_oblivious(t: usize, meta: &Meta, version: u32, split_features: u32, spec: &TreeSpec, nodes: &[Node], next_leaf: &mut u64) -> Result<u32, E> {
    let tree_err = |reason| E::Tree { tree: t, reason };
    let depth = spec.depth as u32;
    if depth > MAX_OBLIVIOUS_DEPTH {
        return Err(tree_err("oblivious tree too deep"));
    }
    if spec.end as u64 != spec.root as u64 + depth as u64 + 1 || spec.end > meta.n_nodes {
        return Err(tree_err("oblivious tree's node range is not its levels and one leaf node"));
    }
    let mut used = 0;
    for (i, &nd) in nodes.iter().enumerate().take(spec.end as usize - 1).skip(spec.root as usize) {
        let node_err = |reason| E::Node { tree: t, node: i, reason };
        if nd.flags & (node::LEAF | node::RESERVED) != 0 || nd.left != 0 {
            return Err(node_err("an oblivious level is not a split node with left = 0"));
        }
        used |= check_test(&nd, meta, version, split_features).map_err(node_err)?;
    }
    let i = spec.end as usize - 1;
    let leaf = nodes[i];
    if leaf.flags != node::LEAF || leaf.feature != 0 || leaf.left != (i as u32).wrapping_sub(1) || leaf.payload & !node::LEAF_INDEX_MASK != node::LEAF_NAN {
        return Err(E::Node { tree: t, node: i, reason: "an oblivious tree's last node is not a leaf" });
    }
    if (leaf.payload & node::LEAF_INDEX_MASK) as u64 != *next_leaf {
        return Err(E::Node { tree: t, node: i, reason: "leaf index out of sequence (leaf count mismatch)" });
    }
    *next_leaf += 1u64 << depth;
    Ok(used)
}
