//! The `.esm` byte layout: every struct the file holds, as `#[repr(C)]` plain-old-data read in
//! place with `bytemuck`. `docs/artifact-format.md` describes the same layout for humans; keep
//! the two in step.
//!
//! All integers and floats are little-endian. The evaluator relies on the host being
//! little-endian too (x86_64, aarch64 and wasm32 all are); `Model::load` refuses
//! to load on a big-endian host rather than reading garbage.

use bytemuck::{Pod, Zeroable};

pub const MAGIC: [u8; 8] = *b"ESMODEL\0";
/// The newest format this build writes and reads. Version 2 adds vector-leaf trees, linear
/// leaves (LINEAR_LEAVES, LINEAR_TERMS), CatBoost CTR features (CTR_FEATURES, CTR_PARTS,
/// CTR_KEYS, CTR_VALUES) and the step link; version 1 is version 2 without those six
/// sections. The writer emits the lowest version that holds the model, so a model without the
/// new leaf kinds still loads in filters built before them (a rolling upgrade of a fleet fed by
/// one registry).
///
/// Version 3 adds oblivious trees (`TreeSpec::layout == tree_layout::OBLIVIOUS`, header flag
/// `HAS_OBLIVIOUS`): CatBoost's trees, stored as their levels and a leaf table instead of
/// expanded into 2^d − 1 split nodes.
///
/// Version 4 adds NaN-low columns (header flag `NAN_LOW_COLUMNS`): a node whose missing
/// values go to its yes side may test its feature with NaN read as −∞, so that rows with a
/// missing value need no NaN test in the walk.
///
/// Version 5 adds zero-as-missing columns (header flag `ZERO_MISSING_COLUMNS`): LightGBM's
/// zero-as-missing tests read their input with "missing" (zero or NaN) already sent to their
/// side, so that such models take the walk without NaN or zero tests.
///
/// Version 6 adds three optional sections: NODE_VALUES (header flag `HAS_NODE_VALUES`: what
/// per-request reasons and `edgescore explain` need) and the drift reference, DRIFT_EDGES and
/// DRIFT_SHARES (header flag `HAS_DRIFT_REFERENCE`, see [`DriftSeries`]). The writer emits format 6 only for a model with one of them.
///
/// Version 7 adds one optional section, UA_FINGERPRINTS (header flag `HAS_UA_FINGERPRINTS`,
/// see [`UaFingerprint`]): the table `tls_ua_consistent` reads. The writer emits format 7 only
/// for a model with a table.
pub const FORMAT_VERSION: u32 = 7;
/// The oldest format version this build reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
/// Every section starts at a multiple of this many bytes.
pub const SECTION_ALIGN: usize = 16;
/// At most this many features (the node's feature field has 16 bits).
pub const MAX_FEATURES: u32 = 1 << 16;
/// At most this many leaves (a leaf's index lives in the payload of a quiet NaN).
pub const MAX_LEAVES: u32 = 1 << 22;
/// At most this many nodes: the evaluator walks a copy of them addressed by u32 byte offsets,
/// 12 bytes a node after one of padding (`ensemble::walk::Walk::nodes`). Some 357 million
/// nodes; an artifact that big would be over 4 GiB.
pub const MAX_NODES: u32 = u32::MAX / 12 - 1;
/// Deepest tree the evaluator accepts (LightGBM's and XGBoost's practical limits are far below).
pub const MAX_DEPTH: u32 = 256;
/// Deepest oblivious tree (its leaf table has 2^depth entries; CatBoost's limit is 16).
pub const MAX_OBLIVIOUS_DEPTH: u32 = 20;

/// Header flags: which node tests the model uses, so the evaluator can run the
/// narrowest loop that covers them.
pub mod flags {
    /// Some node is an `IN_SET` or `MEMBER` test.
    pub const HAS_CATEGORICAL: u32 = 1 << 0;
    /// Some node is an `EQ`, `NE` or `LT_ZERO_MISSING` test.
    pub const HAS_RARE_TESTS: u32 = 1 << 1;
    /// Some tree has vector leaves (`TreeSpec::output == VECTOR_OUTPUT`). Format 2.
    pub const HAS_VECTOR_LEAVES: u32 = 1 << 2;
    /// Leaves are linear functions of the features (LINEAR_LEAVES holds one entry per leaf).
    /// Format 2.
    pub const HAS_LINEAR_LEAVES: u32 = 1 << 3;
    /// Leaf kinds that need the general leaf step in the evaluator.
    pub const RICH_LEAVES: u32 = HAS_VECTOR_LEAVES | HAS_LINEAR_LEAVES;
    /// Some splits test CatBoost CTR features, computed per row from the CTR sections. Format 2.
    pub const HAS_CTRS: u32 = 1 << 4;
    /// What only format 2 may declare.
    pub const FORMAT_2: u32 = RICH_LEAVES | HAS_CTRS;
    /// Some trees are oblivious (`tree_layout::OBLIVIOUS`). Format 3.
    pub const HAS_OBLIVIOUS: u32 = 1 << 5;
    /// What only format 3 may declare.
    pub const FORMAT_3: u32 = HAS_OBLIVIOUS;
    /// Split features `n_features + n_ctr + f` (f < n_features) are input `f` with NaN read as
    /// −∞ and −∞ as −f32::MAX (see [`super::nan_low_start`]). Format 4.
    pub const NAN_LOW_COLUMNS: u32 = 1 << 6;
    /// What only format 4 may declare.
    pub const FORMAT_4: u32 = NAN_LOW_COLUMNS;
    /// Split features from `zero_low_start` on are the zero-as-missing columns of the inputs
    /// (see [`super::zero_low_start`]). Format 5.
    pub const ZERO_MISSING_COLUMNS: u32 = 1 << 7;
    /// What only format 5 may declare.
    pub const FORMAT_5: u32 = ZERO_MISSING_COLUMNS;
    /// The NODE_VALUES section holds the leaves' covers (see [`super::NodeValuesHeader`]).
    /// Format 6.
    pub const HAS_NODE_VALUES: u32 = 1 << 8;
    /// The DRIFT_EDGES and DRIFT_SHARES sections hold the training data's reference
    /// distribution. Format 6.
    pub const HAS_DRIFT_REFERENCE: u32 = 1 << 9;
    /// What only format 6 may declare.
    pub const FORMAT_6: u32 = HAS_NODE_VALUES | HAS_DRIFT_REFERENCE;
    /// The UA_FINGERPRINTS section holds the model's table of user-agent families' JA4s (see
    /// [`super::UaFingerprint`]). Format 7.
    pub const HAS_UA_FINGERPRINTS: u32 = 1 << 10;
    /// What only format 7 may declare.
    pub const FORMAT_7: u32 = HAS_UA_FINGERPRINTS;
    pub const ALL: u32 = HAS_CATEGORICAL | HAS_RARE_TESTS | FORMAT_2 | FORMAT_3 | FORMAT_4 | FORMAT_5 | FORMAT_6 | FORMAT_7;
    /// The flags a file of format `version` may declare.
    pub fn known(version: u32) -> u32 {
        match version {
            0 | 1 => ALL & !FORMAT_2 & !FORMAT_3 & !FORMAT_4 & !FORMAT_5 & !FORMAT_6 & !FORMAT_7,
            2 => ALL & !FORMAT_3 & !FORMAT_4 & !FORMAT_5 & !FORMAT_6 & !FORMAT_7,
            3 => ALL & !FORMAT_4 & !FORMAT_5 & !FORMAT_6 & !FORMAT_7,
            4 => ALL & !FORMAT_5 & !FORMAT_6 & !FORMAT_7,
            5 => ALL & !FORMAT_6 & !FORMAT_7,
            6 => ALL & !FORMAT_7,
            _ => ALL,
        }
    }
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Header {
    pub magic: [u8; 8],
    pub format_version: u32,
    pub flags: u32,
    pub file_len: u64,
    /// xxh3-64 of the whole file with these eight bytes taken as zero.
    pub checksum: u64,
    pub section_count: u32,
    pub reserved: [u32; 7],
}
pub const HEADER_LEN: usize = core::mem::size_of::<Header>();
/// Byte offset of `Header::checksum`.
pub const CHECKSUM_OFFSET: usize = 24;

/// One row of the section table, which follows the header.
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct SectionEntry {
    pub kind: u32,
    pub reserved: u32,
    pub offset: u64,
    pub len: u64,
}

/// Section kinds, in the order they appear in the table and in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum SectionKind {
    Meta = 1,
    Strings = 2,
    Features = 3,
    Base = 4,
    Trees = 5,
    Nodes = 6,
    Leaves = 7,
    CatSplits = 8,
    CatWords = 9,
    LinearLeaves = 10,
    LinearTerms = 11,
    CtrFeatures = 12,
    CtrParts = 13,
    CtrKeys = 14,
    CtrValues = 15,
    NodeValues = 16,
    DriftEdges = 17,
    DriftShares = 18,
    UaFingerprints = 19,
}
/// Format 1 holds the first nine, formats 2 to 5 the first fifteen, format 6 the first
/// eighteen, format 7 all nineteen, in this order.
pub const SECTION_KINDS: [SectionKind; 19] = [
    SectionKind::Meta,
    SectionKind::Strings,
    SectionKind::Features,
    SectionKind::Base,
    SectionKind::Trees,
    SectionKind::Nodes,
    SectionKind::Leaves,
    SectionKind::CatSplits,
    SectionKind::CatWords,
    SectionKind::LinearLeaves,
    SectionKind::LinearTerms,
    SectionKind::CtrFeatures,
    SectionKind::CtrParts,
    SectionKind::CtrKeys,
    SectionKind::CtrValues,
    SectionKind::NodeValues,
    SectionKind::DriftEdges,
    SectionKind::DriftShares,
    SectionKind::UaFingerprints,
];
/// Sections in a file of format `version` (1 to [`FORMAT_VERSION`]).
pub fn section_count(version: u32) -> usize {
    if version >= 7 {
        19
    } else if version >= 6 {
        18
    } else if version >= 2 {
        15
    } else {
        9
    }
}

impl SectionKind {
    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Meta => "META",
            SectionKind::Strings => "STRINGS",
            SectionKind::Features => "FEATURES",
            SectionKind::Base => "BASE",
            SectionKind::Trees => "TREES",
            SectionKind::Nodes => "NODES",
            SectionKind::Leaves => "LEAVES",
            SectionKind::CatSplits => "CAT_SPLITS",
            SectionKind::CatWords => "CAT_WORDS",
            SectionKind::LinearLeaves => "LINEAR_LEAVES",
            SectionKind::LinearTerms => "LINEAR_TERMS",
            SectionKind::CtrFeatures => "CTR_FEATURES",
            SectionKind::CtrParts => "CTR_PARTS",
            SectionKind::CtrKeys => "CTR_KEYS",
            SectionKind::CtrValues => "CTR_VALUES",
            SectionKind::NodeValues => "NODE_VALUES",
            SectionKind::DriftEdges => "DRIFT_EDGES",
            SectionKind::DriftShares => "DRIFT_SHARES",
            SectionKind::UaFingerprints => "UA_FINGERPRINTS",
        }
    }
}

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Meta {
    /// `meta::SourceFormat` as u32.
    pub source: u32,
    /// `meta::Task` as u32.
    pub task: u32,
    /// 0 identity, 1 sigmoid (scale in `link_param`), 2 softmax, 3 exp, 4 step (format 2).
    pub link: u32,
    /// 0 sum, 1 average (divisor in `aggregate_divisor`).
    pub aggregate: u32,
    pub link_param: f64,
    pub aggregate_divisor: f64,
    pub n_features: u32,
    pub n_outputs: u32,
    pub n_trees: u32,
    pub n_nodes: u32,
    pub n_leaves: u32,
    pub n_cat_splits: u32,
    pub n_cat_words: u32,
    pub max_depth: u32,
}

pub mod link {
    pub const IDENTITY: u32 = 0;
    pub const SIGMOID: u32 = 1;
    pub const SOFTMAX: u32 = 2;
    pub const EXP: u32 = 3;
    pub const STEP: u32 = 4;
}
pub mod aggregate {
    pub const SUM: u32 = 0;
    pub const AVERAGE: u32 = 1;
}

/// The STRINGS section: `count: u32`, then `count` end offsets (u32, relative to the start of
/// the string bytes), then the UTF-8 bytes. Entries: model name, version, objective, then one
/// name per feature.
pub const STRINGS_FIXED: usize = 3;

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct FeatureSpec {
    /// 0 numeric, 1 categorical.
    pub kind: u32,
    /// Categorical: number of category codes/buckets; numeric: 0.
    pub buckets: u32,
}
pub const FEATURE_NUMERIC: u32 = 0;
pub const FEATURE_CATEGORICAL: u32 = 1;

#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
#[repr(C)]
pub struct TreeSpec {
    /// Index of the root in NODES; the tree owns nodes `root..end`.
    pub root: u32,
    pub end: u32,
    /// Which output its leaves add to, or [`VECTOR_OUTPUT`]: each leaf then indexes the first
    /// of `n_outputs` consecutive LEAVES values, one per output (XGBoost's
    /// `multi_output_tree`).
    pub output: u32,
    /// Number of splits on the longest root-to-leaf path (0 for a lone leaf).
    pub depth: u16,
    /// [`tree_layout`]: how the tree's nodes are arranged (formats 1 and 2: always `NODES`;
    /// the two bytes were the high half of a u32 depth, always zero).
    pub layout: u16,
}

/// `TreeSpec::layout`. Every `NODES` tree comes first in TREES, then the `OBLIVIOUS` ones, so the evaluator runs each kind in its own loop.
pub mod tree_layout {
    /// Nodes linked by `left`, walked from the root (see [`super::Node`]).
    pub const NODES: u16 = 0;
    /// An oblivious tree of depth d (format 3): nodes `root..root + d` are its levels, split
    /// nodes whose `left` is 0; level k's test (NaN: `MISSING_YES`) gives bit k of the index
    /// into its leaf table; node `root + d` is a leaf node whose payload indexes the first of
    /// the 2^d LEAVES values of that table. Each level's test is independent of the others, so
    /// the d tests of a tree run without a dependent chain of loads.
    pub const OBLIVIOUS: u16 = 1;
}

/// `TreeSpec::output` of a vector-leaf tree.
pub const VECTOR_OUTPUT: u32 = u32::MAX;

/// One tree node, 12 bytes.
///
/// Internal node: the test sends the row to `left` (the "yes" child) or `left + 1` (the "no"
/// child); every comparison has been normalised by the writer to `x < threshold`.
///
/// Leaf: `payload` is a quiet NaN whose low 22 bits index LEAVES, and `left` is its own index
/// minus one (wrapping). Every comparison with NaN is false, so the evaluator's ordinary step
/// `left + !(x < payload)` lands on the leaf itself: a tree that reached its leaf stays there
/// while the other trees of its group keep walking, with no leaf test in the loop.
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
#[repr(C)]
pub struct Node {
    /// Internal: f32 threshold bits, or for `IN_SET` the index into CAT_SPLITS. Leaf: see above.
    pub payload: u32,
    pub feature: u16,
    /// [`node`] flags.
    pub flags: u16,
    pub left: u32,
}

impl Node {
    /// Whether this split must see a NaN in input `feature < n_features` as NaN: any test but
    /// `x < t`, or `x < t` whose NaN goes to the yes side. Every other split sends NaN where
    /// `x < t` does (`NaN < t` is false: the no side); NaN-low columns and CTR features are
    /// never NaN. The writer moves such splits to NaN-low columns where it can; the validator
    /// gives models with none left the walk without NaN tests.
    pub fn sees_nan(&self, n_features: u32) -> bool {
        self.flags & node::LEAF == 0
            && (self.feature as u32) < n_features
            && (self.flags & node::OP_MASK != node::OP_LT || self.flags & node::MISSING_YES != 0)
    }
}

pub mod node {
    pub const LEAF: u16 = 1 << 15;
    /// NaN goes to the yes child (`left`); otherwise to the no child (`left + 1`).
    pub const MISSING_YES: u16 = 1 << 14;
    pub const OP_SHIFT: u16 = 11;
    pub const OP_MASK: u16 = 0b111 << OP_SHIFT;
    /// `x < threshold`.
    pub const OP_LT: u16 = 0;
    /// `trunc(x)` in the CAT_SPLITS set `payload`.
    pub const OP_IN_SET: u16 = 1 << OP_SHIFT;
    /// `x == threshold`.
    pub const OP_EQ: u16 = 2 << OP_SHIFT;
    /// `x != threshold`.
    pub const OP_NE: u16 = 3 << OP_SHIFT;
    /// `x < threshold`, but `|x| <= 1e-35` is missing (LightGBM `missing_type = Zero`).
    pub const OP_LT_ZERO_MISSING: u16 = 4 << OP_SHIFT;
    /// `x` is an integer in the CAT_SPLITS set `payload` (exact equality with one of its
    /// codes, ONNX `BRANCH_MEMBER`): `IN_SET` without truncation. Format 2.
    pub const OP_MEMBER: u16 = 5 << OP_SHIFT;
    /// Bits 0..11 are reserved and must be zero.
    pub const RESERVED: u16 = (1 << OP_SHIFT) - 1;
    /// A leaf's payload: a quiet NaN carrying the leaf index in its low 22 bits.
    pub const LEAF_NAN: u32 = 0x7fc0_0000;
    pub const LEAF_INDEX_MASK: u32 = (1 << 22) - 1;
}

/// LightGBM's `kZeroThreshold`.
pub const ZERO_THRESHOLD: f32 = 1e-35;

/// The longest bitset a categorical set may have: codes below 2^31, as LightGBM's and
/// XGBoost's (32-bit signed) category codes are. The walk converts a value to its code with a
/// clamp that is exact below 2^32 (see `ensemble::category_code`); with this bound every larger
/// value lies past every bitset, as it does in the exact conversion.
pub const MAX_SET_WORDS: u32 = 1 << 26;

#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
#[repr(C)]
pub struct CatSplit {
    /// The set's bitset is CAT_WORDS[word_offset .. word_offset + n_words]; bit `c` is
    /// `words[c / 32] >> (c % 32) & 1`. `n_words <= MAX_SET_WORDS`.
    pub word_offset: u32,
    pub n_words: u32,
    /// Values `x <= invalid_at_or_below` are never in the set.
    pub invalid_at_or_below: f32,
    pub reserved: u32,
}

/// A linear leaf (LightGBM `linear_tree`), one per LEAVES entry when the header has
/// `HAS_LINEAR_LEAVES`: the leaf's value is `constant + sum(coeff * x[feature])` over its terms,
/// added in order in f64, or its LEAVES value (the plain leaf output) when any of those
/// features is NaN. A leaf without terms is worth `constant`.
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
#[repr(C)]
pub struct LinearLeaf {
    pub constant: f64,
    /// Its terms are LINEAR_TERMS[term_offset .. term_offset + n_terms].
    pub term_offset: u32,
    pub n_terms: u32,
}

#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
#[repr(C)]
pub struct LinearTerm {
    pub feature: u32,
    pub reserved: u32,
    pub coeff: f64,
}

/// A model with CTR features or derived columns scores a row copied into a stack buffer: the
/// input features, then the CTR values (split feature `n_features + k` is CTR `k`), then with
/// `NAN_LOW_COLUMNS` one NaN-low column per input, with `ZERO_MISSING_COLUMNS` those and two
/// zero-as-missing columns per input: at most this many values.
pub const MAX_CTR_ROW: u32 = 1024;

/// The first NaN-low column's split-feature index (header flag `NAN_LOW_COLUMNS`): column
/// `nan_low_start + f` holds input `f`, with NaN as −∞ and −∞ as −f32::MAX. A `MISSING_YES`
/// node testing `x < t` on input `f` is the same test on that column for every row when
/// t > −f32::MAX (NaN: −∞ < t, yes), and `x < −∞` (only NaN goes yes) is `column < −f32::MAX`:
/// the writer moves such nodes there, so that no test needs to see NaN.
pub fn nan_low_start(n_features: u32, n_ctr_features: u32) -> u32 {
    n_features + n_ctr_features
}

/// The first zero-as-missing column's split-feature index (header flag
/// `ZERO_MISSING_COLUMNS`; the NaN-low columns come first, read or not). Input `f` is
/// "missing" when it is NaN or `|x| <= ZERO_THRESHOLD`. Column `zero_low_start + f` holds it
/// with missing as −∞ and −∞ as −f32::MAX; column `zero_low_start + n_features + f` with
/// missing as +∞. An `LT_ZERO_MISSING` node testing `x < t` on input `f` is then the plain
/// `x < t` on the first column when its missing values go yes (t > −f32::MAX; `x < −∞` is
/// `column < −f32::MAX`), on the second when they go no: the writer moves such nodes there
/// as `LT`, so that no test needs to see zero or NaN.
pub fn zero_low_start(n_features: u32, n_ctr_features: u32) -> u32 {
    nan_low_start(n_features, n_ctr_features) + n_features
}

/// How many values a row of the inputs, the CTR features and the columns `flags` asks for
/// holds (the split features a node may test).
pub fn row_len(n_features: u32, n_ctr_features: u32, header_flags: u32) -> u32 {
    let columns = if header_flags & flags::ZERO_MISSING_COLUMNS != 0 {
        3
    } else if header_flags & flags::NAN_LOW_COLUMNS != 0 {
        1
    } else {
        0
    };
    n_features + n_ctr_features + columns * n_features
}

/// A CatBoost online CTR feature: the row's projection (its CTR_PARTS, hashed in order with
/// CatBoost's `CalcHash`) is looked up among CTR_KEYS[key_offset .. key_offset + n_keys]
/// (ascending); found at `i`, the feature is CTR_VALUES[key_offset + i], else `empty_value`.
/// The values are CatBoost's `TModelCtr::Calc` of each key's counters, computed by the compiler
/// in f32 exactly as CatBoost computes them.
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
#[repr(C)]
pub struct CtrFeature {
    pub part_offset: u32,
    pub n_parts: u32,
    pub key_offset: u32,
    pub n_keys: u32,
    pub empty_value: f32,
    pub reserved: u32,
}

/// One element of a CTR's projection. Parts are hashed categorical features first, then
/// binarized float features, then one-hot flags (CatBoost's `CalcHashes` order).
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
#[repr(C)]
pub struct CtrPart {
    /// [`ctr_part`] kind.
    pub kind: u32,
    /// Input feature index.
    pub feature: u32,
    /// `ABOVE*`: the border's f32 bits; `ONE_HOT`: the category hash.
    pub value: u32,
    pub reserved: u32,
}

pub mod ctr_part {
    /// The category's CatBoost hash, sign-extended from 32 bits.
    pub const CATEGORY: u32 = 0;
    /// `x > border` (NaN: false).
    pub const ABOVE: u32 = 1;
    /// `x > border` (NaN: true; CatBoost `nan_value_treatment: AsTrue`).
    pub const ABOVE_NAN_TRUE: u32 = 2;
    /// The category's hash equals `value`.
    pub const ONE_HOT: u32 = 3;
}

/// One series of the drift reference (format 6, `HAS_DRIFT_REFERENCE`): an input feature's
/// value bins, or an output's score bins. DRIFT_EDGES holds `n_features + n_outputs` of these
/// (the inputs in feature order, then the outputs), then every series' edges as f32, series
/// after series. A series with `n_edges` edges has `n_edges + 2` bins: value bin `k` holds
/// `edges[k - 1] <= x < edges[k]` (bin 0 everything below the first edge, bin `n_edges`
/// everything from the last on), and the last bin holds NaN (missing). DRIFT_SHARES holds each
/// bin's share of the reference rows as f32, series after series, in the same order.
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq)]
#[repr(C)]
pub struct DriftSeries {
    /// The first of its edges, counted from the first edge in DRIFT_EDGES.
    pub first_edge: u32,
    pub n_edges: u32,
}

/// At most this many edges per drift series (so at most 66 bins, the missing one included).
pub const MAX_DRIFT_EDGES: u32 = 64;
/// How far a series' shares may sum from 1 (f32 rounding of up to 66 shares).
pub const DRIFT_SHARE_TOLERANCE: f32 = 1e-3;
/// The NODE_VALUES section (header flag `HAS_NODE_VALUES`): this header, then one f32 cover
/// per LEAVES value (a vector leaf's cover repeated for each of its values), finite and >= 0,
/// every tree's total > 0. A node's cover is the sum of its leaves' covers, its expected value
/// their cover-weighted mean (`ensemble::explain`): what per-request reasons (path
/// attribution) and TreeSHAP need, derived at load.
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
#[repr(C)]
pub struct NodeValuesHeader {
    /// `meta::CoverKind` as u32: what the covers count.
    pub kind: u32,
    pub reserved: u32,
}

/// One entry of the UA_FINGERPRINTS section (format 7, header flag `HAS_UA_FINGERPRINTS`): a
/// user-agent family (a name `features::ua::family` gives) and a JA4 its real clients present,
/// whole (36 bytes) or a prefix of one followed by `*`; both zero-padded. Entries are sorted by
/// (family, pattern), without duplicates, so one family's entries are contiguous and the table
/// has one byte form. `features::ua_fingerprints` says what is valid and how it matches.
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C)]
pub struct UaFingerprint {
    pub family: [u8; UA_FAMILY_LEN],
    pub pattern: [u8; UA_PATTERN_LEN],
}
pub const UA_FAMILY_LEN: usize = 24;
pub const UA_PATTERN_LEN: usize = 40;
/// At most this many entries (256 KiB): a table is a few per browser family.
pub const MAX_UA_FINGERPRINTS: usize = 4096;

impl UaFingerprint {
    /// `None` if either does not fit its zero-padded field (or holds a zero byte).
    pub fn new(family: &[u8], pattern: &[u8]) -> Option<UaFingerprint> {
        let fits = |s: &[u8], len: usize| s.len() <= len && !s.contains(&0);
        if !fits(family, UA_FAMILY_LEN) || !fits(pattern, UA_PATTERN_LEN) {
            return None;
        }
        let mut e = UaFingerprint::zeroed();
        e.family[..family.len()].copy_from_slice(family);
        e.pattern[..pattern.len()].copy_from_slice(pattern);
        Some(e)
    }

    /// The family name, without its padding.
    pub fn family(&self) -> &[u8] {
        unpadded(&self.family)
    }

    /// The pattern, without its padding.
    pub fn pattern(&self) -> &[u8] {
        unpadded(&self.pattern)
    }

    /// Whether every byte after the name and the pattern is zero (one byte form per entry).
    pub fn padded_with_zeros(&self) -> bool {
        self.family[self.family().len()..].iter().chain(&self.pattern[self.pattern().len()..]).all(|&b| b == 0)
    }
}

fn unpadded(field: &[u8]) -> &[u8] {
    &field[..field.iter().position(|&b| b == 0).unwrap_or(field.len())]
}
