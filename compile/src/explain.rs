//! `edgescore explain`: for each row, the filter's path attribution (`TreeEnsemble::explain`,
//! what the filter's reasons show) and exact TreeSHAP values (Lundberg et al. 2018,
//! Algorithm 2: path-dependent, weighted by the covers of NODE_VALUES), both in margin space.
//!
//! TreeSHAP runs over the artifact's trees: a NODES tree as it is, an oblivious tree as the
//! binary tree it stands for, its last level at the root as CatBoost reads it (the node after
//! k levels holds the leaves its k tests select).
//! A split on a derived column counts as a split on its input, one on a CatBoost CTR feature
//! as a split on that CTR, whose value is then shared equally among its source features. A
//! linear leaf's terms and the difference of its constant from its plain value are credited
//! as path attribution credits them.

use anyhow::{bail, Result};
use edgescore_core::artifact::layout::{node, tree_layout, Node, TreeSpec, VECTOR_OUTPUT};
use edgescore_core::TreeEnsemble;

/// One node of a tree as TreeSHAP walks it.
#[derive(Clone, Debug)]
enum ShapNode {
    Split {
        /// The test, decided per row with `TreeEnsemble::goes_yes`.
        test: Node,
        /// Which feature the split counts as: an input, or `n_features + k` for CTR `k`.
        feature: usize,
        yes: usize,
        no: usize,
        cover: f64,
    },
    Leaf {
        /// LEAVES index of its (first) value.
        index: usize,
        cover: f64,
        /// The feature of the split above it (linear leaves' constant goes there).
        last: Option<usize>,
    },
}

impl ShapNode {
    fn cover(&self) -> f64 {
        match self {
            ShapNode::Split { cover, .. } | ShapNode::Leaf { cover, .. } => *cover,
        }
    }
}

/// A model's trees, laid out for TreeSHAP once.
pub struct Shap<'a> {
    e: &'a TreeEnsemble<'a>,
    trees: Vec<(TreeSpec, Vec<ShapNode>)>,
    divisor: f64,
}

#[derive(Clone, Copy, Debug)]
struct PathElement {
    feature: usize,
    zero: f64,
    one: f64,
    weight: f64,
}

const NO_FEATURE: usize = usize::MAX;

impl<'a> Shap<'a> {
    pub fn new(e: &'a TreeEnsemble<'a>) -> Result<Shap<'a>> {
        let Some((_, covers)) = e.leaf_covers() else {
            bail!("{} has no node values (compiled with --no-node-values, for a format below 6, or from covers an artifact cannot hold): nothing to explain with", e.name())
        };
        let meta = e.meta();
        let divisor = if meta.aggregate == edgescore_core::artifact::layout::aggregate::AVERAGE { meta.aggregate_divisor } else { 1.0 };
        let nodes = e.nodes();
        let feature_of = |n: &Node| e.tested_feature(n.feature);
        let mut trees = Vec::with_capacity(e.trees().len());
        for tree in e.trees() {
            let (root, end) = (tree.root as usize, tree.end as usize);
            let mut out: Vec<ShapNode> = Vec::new();
            if tree.layout == tree_layout::OBLIVIOUS {
                let depth = tree.depth as usize;
                let first = (nodes[root + depth].payload & node::LEAF_INDEX_MASK) as usize;
                // The last level at the root, as CatBoost reads the tree (its SHAP values agree):
                // node (k, b), at `(1 << k) - 1 + b`, tests level d − 1 − k; bit j of b is the
                // test of level d − 1 − j, so leaf b of the last row is table entry `rev(b)`.
                // Its children are (k + 1, b) and (k + 1, b | 1 << k).
                let at = |k: usize, b: usize| (1usize << k) - 1 + b;
                out.resize((1usize << (depth + 1)) - 1, ShapNode::Leaf { index: 0, cover: 0.0, last: None });
                let rev = |b: usize| (0..depth).fold(0usize, |acc, j| acc | ((b >> j) & 1) << (depth - 1 - j));
                for b in 0..1usize << depth {
                    let last = depth.checked_sub(1).map(|_| feature_of(&nodes[root]));
                    let leaf = first + rev(b);
                    out[at(depth, b)] = ShapNode::Leaf { index: leaf, cover: covers[leaf] as f64, last };
                }
                for k in (0..depth).rev() {
                    for b in 0..1usize << k {
                        let (no, yes) = (at(k + 1, b), at(k + 1, b | 1 << k));
                        let cover = out[no].cover() + out[yes].cover();
                        let test = nodes[root + depth - 1 - k];
                        out[at(k, b)] = ShapNode::Split { test, feature: feature_of(&test), yes, no, cover };
                    }
                }
            } else {
                // Children come after their parents: covers bottom-up, node i at i − root.
                out.resize(end - root, ShapNode::Leaf { index: 0, cover: 0.0, last: None });
                let mut last = vec![None; end - root];
                for n in &nodes[root..end] {
                    if n.flags & node::LEAF == 0 {
                        let (yes, no) = (n.left as usize - root, n.left as usize + 1 - root);
                        last[yes] = Some(feature_of(n));
                        last[no] = Some(feature_of(n));
                    }
                }
                for i in (root..end).rev() {
                    let n = nodes[i];
                    out[i - root] = if n.flags & node::LEAF != 0 {
                        let index = (n.payload & node::LEAF_INDEX_MASK) as usize;
                        ShapNode::Leaf { index, cover: covers[index] as f64, last: last[i - root] }
                    } else {
                        let (yes, no) = (n.left as usize - root, n.left as usize + 1 - root);
                        ShapNode::Split { test: n, feature: feature_of(&n), yes, no, cover: out[yes].cover() + out[no].cover() }
                    };
                }
            }
            trees.push((*tree, out));
        }
        Ok(Shap { e, trees, divisor })
    }

    /// TreeSHAP values of `x`, laid out as `TreeEnsemble::explain` lays out its credits (per
    /// output: one per input, then the expected value).
    pub fn values(&self, x: &[f32], out: &mut [f64]) {
        let e = self.e;
        let (nf, n_out) = (e.n_features(), e.n_outputs());
        let n_ctr = e.ctr_features().len();
        let row = e.split_row(x);
        let width = if self.trees.iter().any(|(t, _)| t.output == VECTOR_OUTPUT) { n_out } else { 1 };
        // Per output, per pseudo-feature (inputs, then CTRs).
        let mut phi = vec![0f64; n_out * (nf + n_ctr)];
        let mut expected: Vec<f64> = e.base_score().to_vec();
        let mut leaf_phi = vec![0f64; (nf + n_ctr) * width];
        for (tree, nodes) in &self.trees {
            let outputs: Vec<usize> = if tree.output == VECTOR_OUTPUT { (0..n_out).collect() } else { vec![tree.output as usize] };
            leaf_phi.fill(0.0);
            let mut walk = Walk { e, row: &row, x, nodes, width: outputs.len(), n_pseudo: nf + n_ctr, phi: &mut leaf_phi, bias: vec![0.0; outputs.len()] };
            walk.recurse(0, &[], 1.0, 1.0, NO_FEATURE);
            let bias = walk.bias;
            let mean = self.mean(nodes, 0, outputs.len());
            for (k, &o) in outputs.iter().enumerate() {
                expected[o] += mean[k] / self.divisor;
                for f in 0..nf + n_ctr {
                    phi[o * (nf + n_ctr) + f] += leaf_phi[f * outputs.len() + k] / self.divisor;
                }
                expected[o] += bias[k] / self.divisor;
            }
        }
        out[..n_out * (nf + 1)].fill(0.0);
        for o in 0..n_out {
            let own = &phi[o * (nf + n_ctr)..(o + 1) * (nf + n_ctr)];
            out[o * (nf + 1)..o * (nf + 1) + nf].copy_from_slice(&own[..nf]);
            for k in 0..n_ctr {
                let sources = edgescore_core::ensemble::explain::ctr_sources(e.ctr_parts(k));
                for &s in &sources {
                    out[o * (nf + 1) + s as usize] += own[nf + k] / sources.len() as f64;
                }
            }
            out[o * (nf + 1) + nf] = expected[o];
        }
    }

    /// The cover-weighted mean of the leaves under node `i`.
    fn mean(&self, nodes: &[ShapNode], i: usize, width: usize) -> Vec<f64> {
        match nodes[i] {
            ShapNode::Leaf { index, .. } => self.e.leaf_values()[index..index + width].to_vec(),
            ShapNode::Split { yes, no, cover, .. } => {
                let (a, b) = (self.mean(nodes, yes, width), self.mean(nodes, no, width));
                let (wa, wb) = (nodes[yes].cover(), nodes[no].cover());
                a.iter().zip(&b).map(|(a, b)| if cover > 0.0 { (wa * a + wb * b) / cover } else { (a + b) / 2.0 }).collect()
            }
        }
    }
}

/// One row's walk of one tree.
struct Walk<'r> {
    e: &'r TreeEnsemble<'r>,
    row: &'r [f32],
    x: &'r [f32],
    nodes: &'r [ShapNode],
    width: usize,
    n_pseudo: usize,
    /// `phi[f * width + k]`: pseudo-feature f, k-th output of the tree.
    phi: &'r mut [f64],
    /// What a linear leaf adds without a split above it.
    bias: Vec<f64>,
}

impl Walk<'_> {
    fn recurse(&mut self, i: usize, parent: &[PathElement], zero: f64, one: f64, feature: usize) {
        if zero == 0.0 && one == 0.0 {
            // A side neither the row nor any training data (cover 0, CatBoost's empty leaves)
            // reaches: it adds exactly nothing, and unwinding it would divide by 0.
            return;
        }
        let mut path = parent.to_vec();
        extend(&mut path, zero, one, feature);
        let depth = path.len() - 1;
        match self.nodes[i] {
            ShapNode::Leaf { index, last, .. } => {
                let values = &self.e.leaf_values()[index..index + self.width];
                for p in 1..=depth {
                    let w = unwound_sum(&path, p);
                    let el = path[p];
                    for (k, v) in values.iter().enumerate() {
                        self.phi[el.feature * self.width + k] += w * (el.one - el.zero) * v;
                    }
                }
                // A linear leaf, where the row reaches it: its terms and its constant's
                // difference, credited whole (they are the row's own, not averaged).
                if one > 0.0 && self.on_path(path.as_slice()) {
                    if let Some((constant, terms)) = self.e.linear_leaf(index) {
                        if !terms.iter().any(|t| self.x[t.feature as usize].is_nan()) {
                            let rest = constant - values[0];
                            match last {
                                Some(f) => self.phi[f * self.width] += rest,
                                None => self.bias[0] += rest,
                            }
                            for t in terms {
                                self.phi[t.feature as usize * self.width] += self.x[t.feature as usize] as f64 * t.coeff;
                            }
                        }
                    }
                }
            }
            ShapNode::Split { test, feature, yes, no, cover } => {
                debug_assert!(feature < self.n_pseudo);
                let goes_yes = self.e.goes_yes(test, self.row);
                let (hot, cold) = if goes_yes { (yes, no) } else { (no, yes) };
                let fraction = |c: usize| if cover > 0.0 { self.nodes[c].cover() / cover } else { 0.5 };
                let (mut in_zero, mut in_one) = (1.0, 1.0);
                if let Some(k) = path.iter().position(|p| p.feature == feature) {
                    in_zero = path[k].zero;
                    in_one = path[k].one;
                    unwind(&mut path, k);
                }
                self.recurse(hot, &path, fraction(hot) * in_zero, in_one, feature);
                self.recurse(cold, &path, fraction(cold) * in_zero, 0.0, feature);
            }
        }
    }

    /// Whether the row itself reaches this leaf: every split on the path sent it this way.
    fn on_path(&self, path: &[PathElement]) -> bool {
        path.iter().skip(1).all(|p| p.one > 0.0)
    }
}

fn extend(path: &mut Vec<PathElement>, zero: f64, one: f64, feature: usize) {
    let d = path.len();
    path.push(PathElement { feature, zero, one, weight: if d == 0 { 1.0 } else { 0.0 } });
    for i in (0..d).rev() {
        path[i + 1].weight += one * path[i].weight * (i + 1) as f64 / (d + 1) as f64;
        path[i].weight = zero * path[i].weight * (d - i) as f64 / (d + 1) as f64;
    }
}

fn unwind(path: &mut Vec<PathElement>, k: usize) {
    let d = path.len() - 1;
    let (one, zero) = (path[k].one, path[k].zero);
    let mut next = path[d].weight;
    for i in (0..d).rev() {
        if one != 0.0 {
            let tmp = path[i].weight;
            path[i].weight = next * (d + 1) as f64 / ((i + 1) as f64 * one);
            next = tmp - path[i].weight * zero * (d - i) as f64 / (d + 1) as f64;
        } else {
            path[i].weight = path[i].weight * (d + 1) as f64 / (zero * (d - i) as f64);
        }
    }
    for i in k..d {
        path[i].feature = path[i + 1].feature;
        path[i].zero = path[i + 1].zero;
        path[i].one = path[i + 1].one;
    }
    path.pop();
}

fn unwound_sum(path: &[PathElement], k: usize) -> f64 {
    let d = path.len() - 1;
    let (one, zero) = (path[k].one, path[k].zero);
    let mut next = path[d].weight;
    let mut total = 0.0;
    for i in (0..d).rev() {
        if one != 0.0 {
            let tmp = next * (d + 1) as f64 / ((i + 1) as f64 * one);
            total += tmp;
            next = path[i].weight - tmp * zero * (d - i) as f64 / (d + 1) as f64;
        } else if zero != 0.0 {
            total += path[i].weight / zero / ((d - i) as f64 / (d + 1) as f64);
        }
    }
    total
}

/// `edgescore explain`'s CSV: per row and output, one line of path attribution
/// (`saabas`) and one of TreeSHAP values (`treeshap`): `row,output,method`, a value per input
/// feature, then `expected`. Each line adds up to the output's margin.
pub fn write_csv(e: &TreeEnsemble, rows: &[Vec<f32>], w: &mut dyn std::io::Write) -> Result<()> {
    let shap = Shap::new(e)?;
    let (nf, n_out) = (e.n_features(), e.n_outputs());
    let names: Vec<&str> = (0..nf).map(|i| e.feature_name(i)).collect();
    writeln!(w, "row,output,method,{},expected", names.join(","))?;
    let mut credits = vec![0f64; e.explain_len()];
    let mut values = vec![0f64; e.explain_len()];
    for (r, row) in rows.iter().enumerate() {
        e.explain(row, &mut credits)?;
        shap.values(row, &mut values);
        for o in 0..n_out {
            for (method, v) in [("saabas", &credits), ("treeshap", &values)] {
                let own = &v[o * (nf + 1)..(o + 1) * (nf + 1)];
                let cells: Vec<String> = own.iter().map(|c| format!("{c}")).collect();
                writeln!(w, "{r},{o},{method},{}", cells.join(","))?;
            }
        }
    }
    Ok(())
}
