//! Structure-aware mutations of a valid artifact, then optional fix-ups (file length, header
//! flags, tree depths, leaf numbering) and a re-sealed checksum, so that mutated artifacts get
//! past the cheap checks and into the validator's structural ones — and sometimes through it,
//! to the evaluator.

use arbitrary::Arbitrary;
use bytemuck::pod_read_unaligned;
use edgescore_core::artifact::layout::*;

use crate::oracle::{n_flags, section_entries};

// Node byte offsets: payload u32 at 0, feature u16 at 4, flags u16 at 6, left u32 at 8.
const N_FEATURE: usize = 4;
const N_FLAGS: usize = 6;
const N_LEFT: usize = 8;
const LEAF: u32 = node::LEAF as u32;
const OP_MASK: u32 = node::OP_MASK as u32;

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum U32Val {
    Delta(i8),
    Zero,
    One,
    Max,
    Bit(u8),
    Raw(u32),
    Xor(u32),
}

impl U32Val {
    fn apply(self, cur: u32) -> u32 {
        match self {
            U32Val::Delta(d) => cur.wrapping_add(d as i32 as u32),
            U32Val::Zero => 0,
            U32Val::One => 1,
            U32Val::Max => u32::MAX,
            U32Val::Bit(b) => cur ^ (1 << (b % 32)),
            U32Val::Raw(v) => v,
            U32Val::Xor(v) => cur ^ v,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum FloatVal {
    Nan,
    NegNan,
    Inf,
    NegInf,
    Zero,
    NegZero,
    Max,
    Subnormal,
    Half,
    Raw(u64),
}

impl FloatVal {
    fn f64(self) -> f64 {
        match self {
            FloatVal::Nan => f64::NAN,
            FloatVal::NegNan => -f64::NAN,
            FloatVal::Inf => f64::INFINITY,
            FloatVal::NegInf => f64::NEG_INFINITY,
            FloatVal::Zero => 0.0,
            FloatVal::NegZero => -0.0,
            FloatVal::Max => f64::MAX,
            FloatVal::Subnormal => f64::from_bits(1),
            FloatVal::Half => 0.5,
            FloatVal::Raw(b) => f64::from_bits(b),
        }
    }
    fn f32_bits(self) -> u32 {
        match self {
            FloatVal::Max => f32::MAX.to_bits(),
            FloatVal::Subnormal => 1,
            FloatVal::Raw(b) => b as u32,
            v => (v.f64() as f32).to_bits(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum NodeVal {
    Payload(U32Val),
    Threshold(FloatVal),
    Flags(U32Val),
    /// Toggle one bit of the 16-bit flags (reserved, op, missing, leaf).
    FlagBit(u8),
    /// Set the op field (0..7).
    Op(u8),
    /// Feature index relative to n_features: n_features - 2 + k % 4.
    Feature(u8),
    /// Feature index relative to the end of the row the trees walk (inputs, CTR features,
    /// NaN-low and zero-as-missing columns): row_len - 2 + k % 4.
    FeatureRowEnd(u8),
    /// Raw 16-bit feature index.
    FeatureRaw(u16),
    Left(U32Val),
    /// left = own index + k (k may be 0 or negative: cycles).
    LeftRel(i8),
    /// A leaf pointing to itself with the given payload.
    MakeLeaf(u8),
    /// An `x < t` split with children at own index + k.
    MakeSplit(u8),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Mutation {
    Byte { at: u32, value: u8 },
    Xor { at: u32, mask: u8 },
    FileWord { at: u32, v: U32Val },
    /// Word `field` of the 64-byte header (magic, version, flags, file_len, checksum, count, reserved).
    Header { field: u8, v: U32Val },
    /// Word `field` of section entry `section` (kind, reserved, offset lo/hi, len lo/hi).
    Entry { section: u8, field: u8, v: U32Val },
    /// Word `field` of META.
    Meta { field: u8, v: U32Val },
    MetaFloat { divisor: bool, f: FloatVal },
    SectionWord { section: u8, at: u32, v: U32Val },
    SectionF64 { section: u8, at: u32, f: FloatVal },
    Node { node: u32, v: NodeVal },
    Tree { tree: u32, field: u8, v: U32Val },
    CatSplit { split: u32, field: u8, v: U32Val },
    CatLowerBound { split: u32, f: FloatVal },
    StringByte { at: u32, value: u8 },
    CopyElem { section: u8, from: u32, to: u32 },
    SwapElem { section: u8, a: u32, b: u32 },
    Resize { delta: i16 },
    Insert { at: u32, n: u8 },
    /// Change one section's element count coherently: its META count and its table length
    /// (so the section-length checks pass and the cross-checks behind them are reached).
    Count { section: u8, delta: i8 },
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Fixups {
    pub keep_len: bool,
    pub fix_flags: bool,
    pub fix_depth: bool,
    pub fix_leaves: bool,
}

const ELEM: [usize; 19] = [
    core::mem::size_of::<Meta>(),
    4,
    core::mem::size_of::<FeatureSpec>(),
    8,
    core::mem::size_of::<TreeSpec>(),
    core::mem::size_of::<Node>(),
    8,
    core::mem::size_of::<CatSplit>(),
    4,
    core::mem::size_of::<LinearLeaf>(),
    core::mem::size_of::<LinearTerm>(),
    core::mem::size_of::<CtrFeature>(),
    core::mem::size_of::<CtrPart>(),
    8,
    4,
    // NODE_VALUES, DRIFT_EDGES, DRIFT_SHARES: words.
    4,
    4,
    4,
    core::mem::size_of::<UaFingerprint>(),
];

/// The (valid) artifact's section table, taken before mutating.
pub struct Layout {
    pub entries: [SectionEntry; 19],
}

impl Layout {
    pub fn of(bytes: &[u8]) -> Option<Layout> {
        Some(Layout { entries: section_entries(bytes)? })
    }
    fn count(&self, k: usize) -> usize {
        self.entries[k].len as usize / ELEM[k]
    }
    /// File offset of element `idx % count` of section `k`.
    fn elem(&self, k: usize, idx: u32) -> Option<usize> {
        let n = self.count(k);
        (n > 0).then(|| self.entries[k].offset as usize + (idx as usize % n) * ELEM[k])
    }
    fn sec_word(&self, k: usize, at: u32) -> Option<usize> {
        let len = self.entries[k].len as usize;
        (len >= 4).then(|| self.entries[k].offset as usize + (at as usize % (len / 4)) * 4)
    }
}

fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}
fn get_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}
fn put_u16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = at.checked_add(2).and_then(|end| b.get_mut(at..end)) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = at.checked_add(4).and_then(|end| b.get_mut(at..end)) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}
fn put_f64(b: &mut [u8], at: usize, v: f64) {
    if let Some(s) = at.checked_add(8).and_then(|end| b.get_mut(at..end)) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}
fn upd(b: &mut [u8], at: Option<usize>, v: U32Val) {
    if let Some(at) = at {
        if let Some(cur) = get_u32(b, at) {
            put_u32(b, at, v.apply(cur));
        }
    }
}

pub fn apply(b: &mut Vec<u8>, l: &Layout, m: Mutation) {
    let len = b.len();
    match m {
        Mutation::Byte { at, value } if len > 0 => b[at as usize % len] = value,
        Mutation::Xor { at, mask } if len > 0 => b[at as usize % len] ^= mask,
        Mutation::FileWord { at, v } if len >= 4 => upd(b, Some((at as usize % (len / 4)) * 4), v),
        Mutation::Header { field, v } => upd(b, Some((field as usize % (HEADER_LEN / 4)) * 4), v),
        Mutation::Entry { section, field, v } => {
            let at = HEADER_LEN + (section as usize % 19) * core::mem::size_of::<SectionEntry>() + (field as usize % 6) * 4;
            upd(b, Some(at), v)
        }
        Mutation::Meta { field, v } => upd(b, Some(l.entries[0].offset as usize + (field as usize % (ELEM[0] / 4)) * 4), v),
        Mutation::MetaFloat { divisor, f } => put_f64(b, l.entries[0].offset as usize + if divisor { 24 } else { 16 }, f.f64()),
        Mutation::SectionWord { section, at, v } => upd(b, l.sec_word(section as usize % 19, at), v),
        Mutation::SectionF64 { section, at, f } => {
            let k = section as usize % 19;
            if let Some(w) = l.sec_word(k, at) {
                put_f64(b, w & !7, f.f64());
            }
        }
        Mutation::Node { node, v } => {
            let Some(at) = l.elem(5, node) else { return };
            let idx = ((at - l.entries[5].offset as usize) / ELEM[5]) as u32;
            let n_features = get_u32(b, l.entries[0].offset as usize + 32).unwrap_or(1);
            let ff = get_u16(b, at + N_FLAGS).unwrap_or(0) as u32;
            match v {
                NodeVal::Payload(v) => upd(b, Some(at), v),
                NodeVal::Threshold(f) => put_u32(b, at, f.f32_bits()),
                NodeVal::Flags(v) => upd(b, Some(at + 4), v),
                NodeVal::FlagBit(k) => put_u16(b, at + N_FLAGS, (ff ^ (1 << (k % 16))) as u16),
                NodeVal::Op(op) => put_u16(b, at + N_FLAGS, ((ff & !OP_MASK) | ((op as u32 % 8) << node::OP_SHIFT)) as u16),
                NodeVal::Feature(k) => {
                    let f = (n_features as i64 - 2 + k as i64 % 4).clamp(0, u16::MAX as i64) as u16;
                    put_u16(b, at + N_FEATURE, f)
                }
                NodeVal::FeatureRowEnd(k) => {
                    // `row_len` adds in u32 over counts the validator has bounded: a mutated
                    // META count past them falls back to the inputs' end.
                    let n_ctrs = l.count(11) as u32;
                    let bounded = n_features <= MAX_FEATURES && n_ctrs <= MAX_CTR_ROW;
                    let end = if bounded { row_len(n_features, n_ctrs, get_u32(b, 12).unwrap_or(0)) } else { n_features };
                    let f = (end as i64 - 2 + k as i64 % 4).clamp(0, u16::MAX as i64) as u16;
                    put_u16(b, at + N_FEATURE, f)
                }
                NodeVal::FeatureRaw(f) => put_u16(b, at + N_FEATURE, f),
                NodeVal::Left(v) => upd(b, Some(at + N_LEFT), v),
                NodeVal::LeftRel(k) => put_u32(b, at + N_LEFT, idx.wrapping_add(k as i32 as u32)),
                NodeVal::MakeLeaf(p) => {
                    put_u32(b, at, node::LEAF_NAN | p as u32);
                    put_u16(b, at + N_FEATURE, 0);
                    put_u16(b, at + N_FLAGS, node::LEAF);
                    put_u32(b, at + N_LEFT, idx.wrapping_sub(1));
                }
                NodeVal::MakeSplit(k) => {
                    put_u32(b, at, 0.5f32.to_bits());
                    put_u16(b, at + N_FEATURE, 0);
                    put_u16(b, at + N_FLAGS, 0);
                    put_u32(b, at + N_LEFT, idx.wrapping_add(k as u32 % 8));
                }
            }
        }
        Mutation::Tree { tree, field, v } => upd(b, l.elem(4, tree).map(|at| at + (field as usize % 4) * 4), v),
        Mutation::CatSplit { split, field, v } => upd(b, l.elem(7, split).map(|at| at + (field as usize % 4) * 4), v),
        Mutation::CatLowerBound { split, f } => {
            if let Some(at) = l.elem(7, split) {
                put_u32(b, at + 8, f.f32_bits());
            }
        }
        Mutation::StringByte { at, value } => {
            let e = &l.entries[1];
            if e.len > 0 {
                let i = e.offset as usize + at as usize % e.len as usize;
                if let Some(x) = b.get_mut(i) {
                    *x = value;
                }
            }
        }
        Mutation::CopyElem { section, from, to } => {
            let k = section as usize % 19;
            if let (Some(f), Some(t)) = (l.elem(k, from), l.elem(k, to)) {
                if f + ELEM[k] <= len && t + ELEM[k] <= len {
                    b.copy_within(f..f + ELEM[k], t);
                }
            }
        }
        Mutation::SwapElem { section, a, b: c } => {
            let k = section as usize % 19;
            if let (Some(x), Some(y)) = (l.elem(k, a), l.elem(k, c)) {
                if x != y && x + ELEM[k] <= len && y + ELEM[k] <= len {
                    let tmp = b[x..x + ELEM[k]].to_vec();
                    b.copy_within(y..y + ELEM[k], x);
                    b[y..y + ELEM[k]].copy_from_slice(&tmp);
                }
            }
        }
        Mutation::Resize { delta } => {
            let n = (len as i64 + delta as i64).clamp(0, len as i64 + 4096) as usize;
            b.resize(n, 0);
        }
        Mutation::Insert { at, n } if len > 0 => {
            let at = at as usize % len;
            b.splice(at..at, std::iter::repeat_n(0u8, n as usize));
        }
        Mutation::Count { section, delta } => {
            // FEATURES..CAT_WORDS (2..=8) ↔ META n_features..n_cat_words (bytes 32..=56).
            let k = 2 + section as usize % 7;
            let count_at = l.entries[0].offset as usize + 32 + (k - 2) * 4;
            let Some(cur) = get_u32(b, count_at) else { return };
            let new = (cur as i64 + delta as i64).max(0) as u32;
            put_u32(b, count_at, new);
            let len_at = HEADER_LEN + k * core::mem::size_of::<SectionEntry>() + 16;
            if let Some(s) = b.get_mut(len_at..len_at + 8) {
                s.copy_from_slice(&(new as u64 * ELEM[k] as u64).to_le_bytes());
            }
        }
        _ => {}
    }
}

/// Header flags as the node tests require them (over the original NODES range).
fn fix_flags(b: &mut [u8], l: &Layout) {
    let mut used = 0;
    for i in 0..l.count(5) {
        let at = l.entries[5].offset as usize + i * ELEM[5];
        let Some(ff) = get_u16(b, at + N_FLAGS) else { return };
        if ff & node::LEAF != 0 {
            continue;
        }
        used |= match ff & node::OP_MASK {
            node::OP_LT => 0,
            node::OP_IN_SET | node::OP_MEMBER => flags::HAS_CATEGORICAL,
            _ => flags::HAS_RARE_TESTS,
        };
    }
    // Keep the leaf-kind, CTR, tree-layout and column flags: they describe sections and the
    // row the trees walk, not node tests.
    let kept = get_u32(b, 12).unwrap_or(0) & (flags::FORMAT_2 | flags::FORMAT_3 | flags::FORMAT_4 | flags::FORMAT_5);
    put_u32(b, 12, used | kept);
}

/// Leaf payloads renumbered 0.. in node order, leaves stepping to themselves; an oblivious
/// tree's leaf node counts for its 2^depth leaves.
fn fix_leaves(b: &mut [u8], l: &Layout) {
    let mut next = 0u32;
    let mut tree = 0usize;
    for i in 0..l.count(5) {
        // The tree that owns node i, if the TREES section still says so.
        let mut spec: Option<TreeSpec> = None;
        while tree < l.count(4) {
            let at = l.entries[4].offset as usize + tree * ELEM[4];
            let Some(raw) = b.get(at..at + ELEM[4]) else { break };
            let s: TreeSpec = pod_read_unaligned(raw);
            if (s.end as usize) <= i {
                tree += 1;
                continue;
            }
            spec = Some(s);
            break;
        }
        let at = l.entries[5].offset as usize + i * ELEM[5];
        let Some(ff) = get_u16(b, at + N_FLAGS) else { return };
        if ff & node::LEAF != 0 {
            put_u32(b, at, node::LEAF_NAN | (next & node::LEAF_INDEX_MASK));
            put_u32(b, at + N_LEFT, (i as u32).wrapping_sub(1));
            next += match spec {
                Some(s) if s.layout == tree_layout::OBLIVIOUS => 1u32.checked_shl(s.depth as u32).unwrap_or(1),
                _ => 1,
            };
        }
    }
}

/// Each tree's declared depth (and META's max_depth) recomputed from its nodes, following
/// only in-range, forward child links (whatever the validator will then say about the rest).
fn fix_depth(b: &mut [u8], l: &Layout) {
    let n_nodes = l.count(5);
    let node_at = |b: &[u8], i: usize| -> Option<Node> {
        let at = l.entries[5].offset as usize + i * ELEM[5];
        Some(pod_read_unaligned(b.get(at..at + ELEM[5])?))
    };
    let mut max_depth = 0;
    for t in 0..l.count(4) {
        let at = l.entries[4].offset as usize + t * ELEM[4];
        let Some(raw) = b.get(at..at + ELEM[4]) else { return };
        let spec: TreeSpec = pod_read_unaligned(raw);
        let (root, end) = (spec.root as usize, (spec.end as usize).min(n_nodes));
        if spec.layout == tree_layout::OBLIVIOUS {
            // An oblivious tree's depth is its number of levels, not a path length.
            max_depth = max_depth.max(spec.depth as u32);
            continue;
        }
        if root >= end || end - root > 1 << 16 {
            continue;
        }
        let mut depth = vec![0u32; end - root];
        let mut tree_depth = 0;
        for i in root..end {
            let Some(n) = node_at(b, i) else { break };
            let d = depth[i - root];
            if n_flags(&n) & LEAF != 0 {
                tree_depth = tree_depth.max(d);
                continue;
            }
            let left = n.left as usize;
            if left > i && left + 1 < end {
                depth[left - root] = d + 1;
                depth[left + 1 - root] = d + 1;
            }
        }
        put_u16(b, at + 12, tree_depth as u16);
        max_depth = max_depth.max(tree_depth);
    }
    put_u32(b, l.entries[0].offset as usize + 60, max_depth);
}

/// Applies the fix-ups, then writes `file_len` (unless kept) and the checksum.
pub fn seal(b: &mut [u8], l: &Layout, fx: Fixups) {
    if fx.fix_leaves {
        fix_leaves(b, l);
    }
    if fx.fix_depth {
        fix_depth(b, l);
    }
    if fx.fix_flags {
        fix_flags(b, l);
    }
    if !fx.keep_len && b.len() >= 24 {
        let len = b.len() as u64;
        b[16..24].copy_from_slice(&len.to_le_bytes());
    }
    reseal(b);
}

/// Rewrites the checksum field so the checksum check passes.
pub fn reseal(b: &mut [u8]) {
    if b.len() >= CHECKSUM_OFFSET + 8 {
        let sum = edgescore_core::artifact::checksum(b);
        b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 8].copy_from_slice(&sum.to_le_bytes());
    }
}
