//! What the lockstep walk reads besides the row, derived from the validated artifact at load
//! (like the bitvectors, not part of the format): the nodes addressed by byte offset, where
//! each lockstep group starts, and the category bitsets behind a word of zeros. All are work
//! that depends on the model alone, done once instead of on every row.

use super::LANES;
use crate::artifact::layout::{node, Node, TreeSpec};

/// The size of a node: the walk's byte offsets step by it.
pub(crate) const NODE_BYTES: usize = core::mem::size_of::<Node>();

/// Node `index`'s byte offset in the walk's nodes, which start with one node of padding.
/// Wrapping in u32 on purpose: a leaf's `left` is its index − 1, and node 0's −1 must land on
/// the padding at offset 0 (see [`Walk::build`]); `MAX_NODES` keeps every real node's offset
/// within a u32, so nothing else wraps, on wasm32 (32-bit usize) as natively.
#[inline(always)]
pub(crate) const fn node_offset(index: u32) -> usize {
    index.wrapping_add(1).wrapping_mul(NODE_BYTES as u32) as usize
}

/// Where a lockstep group of up to [`LANES`] trees starts. Worked out per row, this cost ~60
/// instructions a group of 8 natively (eight roots to offsets, the deepest depth, the first
/// check's level from the deepest tree's node count): 6 % of a row of 10 depth-6 trees.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GroupStart {
    /// Each tree's root as a byte offset into the walk's nodes; lanes past the group's trees
    /// repeat its last root.
    pub roots: [u32; LANES],
    /// Levels from the roots to the group's deepest leaf.
    pub steps: u32,
    /// The level of the first check whether every tree has reached its leaf (see
    /// `TreeEnsemble::walk_group`), at most `steps`.
    pub first_check: u32,
}

/// The walk's copy of the nodes and its group starts (see the module's comment).
#[derive(Clone, Debug, Default)]
pub(crate) struct Walk {
    /// One node of padding, then node `i` at byte offset `node_offset(i)`, its `left`
    /// rewritten as that child's byte offset. A step is then a load at an offset and a select
    /// between `left` and `left + NODE_BYTES`; with indices it also multiplied by 12 and
    /// zero-extended, and in wasm `i32.mul` (see `TreeEnsemble::step`). The padding is for
    /// leaves, which step to themselves through `left` = their index − 1: node 0's is −1
    /// (wrapping), and its offset 0.
    pub nodes: Vec<Node>,
    /// One per whole group of [`split_groups`], then one for the rest if there is any.
    pub groups: Vec<GroupStart>,
    /// A word of zeros, then the artifact's CAT_WORDS: set `s`'s bitset starts at index
    /// `word_offset + 1`. A set test on a value outside the set's range reads word 0 and so
    /// finds no bit, without a branch (see `TreeEnsemble::in_set`).
    pub cat_words: Vec<u32>,
}

impl Walk {
    /// From the validated `nodes`, walked trees (`NODES` layout) and category bitsets
    /// (CAT_WORDS) of the same artifact.
    pub fn build(nodes: &[Node], walked: &[TreeSpec], cat_words: &[u32]) -> Walk {
        let padding = Node { payload: 0, feature: 0, flags: node::LEAF, left: 0 };
        // `node_offset` computes in u32, so the cast back is exact.
        let nodes = core::iter::once(padding).chain(nodes.iter().map(|&n| Node { left: node_offset(n.left) as u32, ..n })).collect();
        let (full, rest) = split_groups(walked);
        let groups = full.chunks_exact(LANES).chain([rest]).filter(|g| !g.is_empty()).map(group_start).collect();
        let cat_words = core::iter::once(0).chain(cat_words.iter().copied()).collect();
        Walk { nodes, groups, cat_words }
    }
}

/// The walked trees as the walk groups them: whole groups of `LANES`, then the rest (fewer than
/// `LANES`, the shallowest: the writer sorts deepest first), possibly empty. The one place the
/// grouping is decided: `Walk::build` makes a start for each whole group and for a non-empty
/// rest, in this order, and `TreeEnsemble::walk_lockstep` walks them in it (the rest together
/// with the last whole group).
#[inline(always)]
pub(crate) fn split_groups(walked: &[TreeSpec]) -> (&[TreeSpec], &[TreeSpec]) {
    walked.split_at(walked.len() / LANES * LANES)
}

fn group_start(group: &[TreeSpec]) -> GroupStart {
    // Lanes past the group's trees walk its last tree again (see `TreeEnsemble::walk_lockstep`).
    let mut roots = [0; LANES];
    for (k, root) in roots.iter_mut().enumerate() {
        *root = group.get(k).or(group.last()).map_or(0, |tree| node_offset(tree.root) as u32);
    }
    let steps = group.iter().map(|t| t.depth as u32).max().unwrap_or(0);
    // A NODES tree of n nodes has (n + 1) / 2 leaves; a balanced tree of that many leaves is
    // ceil(log2(leaves)) deep: the first check comes one level after that. group[0] is the
    // deepest (the writer's order; an artifact ordered otherwise only checks at a less useful
    // level).
    let leaves = group[0].end.saturating_sub(group[0].root).div_ceil(2).max(1);
    let check_at = (u32::BITS - (leaves - 1).leading_zeros()) + 1;
    GroupStart { roots, steps, first_check: steps.min(check_at) }
}
