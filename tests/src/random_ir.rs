//! Random models and rows, to check the writer + evaluator against the IR's reference reading.
//! Every randomised test seeds its [`Rng`] with [`test_seed`]: `EDGESCORE_TEST_SEED` when set,
//! else the test's own fixed seed, and names the seed in its failure messages.

use edgescore_compile::ir::*;

/// `EDGESCORE_TEST_SEED` (decimal or `0x` hex) when set, else `default`; printed to stderr
/// (cargo test shows it with a failing test's output).
pub fn test_seed(default: u64) -> u64 {
    let seed = match std::env::var("EDGESCORE_TEST_SEED") {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("EDGESCORE_TEST_SEED={v:?}: {e}"))
        }
        Err(_) => default,
    };
    eprintln!("EDGESCORE_TEST_SEED={seed}");
    seed
}

/// xorshift64: a sequence fixed forever, so a seed reproduces a failure on every version.
pub struct Rng(u64);
impl Rng {
    /// xorshift never leaves 0: a zero seed starts from another constant.
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 { 0x9e37_79b9_7f4a_7c15 } else { seed })
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Awkward values: f32 neighbours, values between f32s, zeros, infinities, huge.
    pub fn threshold(&mut self) -> f64 {
        let base = (self.unit() - 0.5) * 8.0;
        match self.below(10) {
            0 => (base as f32) as f64,
            1 => (base as f32).next_up() as f64,
            2 => (base as f32 as f64 + (base as f32).next_up() as f64) / 2.0,
            3 => 0.0,
            4 => -0.0,
            5 => 1e300,
            6 => f64::INFINITY,
            7 => f64::NEG_INFINITY,
            8 => (base.round() as f32) as f64,
            _ => base,
        }
    }
}

/// A random tree of up to `max_depth` levels using every kind of test.
pub fn random_tree(rng: &mut Rng, n_features: u32, max_depth: u32, output: u32) -> Tree {
    fn grow(rng: &mut Rng, nodes: &mut Vec<Node>, n_features: u32, depth: u32) -> u32 {
        let me = nodes.len() as u32;
        nodes.push(Node::Leaf { value: 0.0 });
        if depth == 0 || rng.below(5) == 0 {
            nodes[me as usize] = Node::Leaf { value: (rng.unit() - 0.5) * 2.0 };
            return me;
        }
        let t = rng.threshold();
        let test = match rng.below(9) {
            0 => Test::Lt(t),
            1 => Test::Le(t),
            2 => Test::Gt(t),
            3 => Test::Ge(t),
            4 => Test::Eq((t.clamp(-4.0, 4.0)).round()),
            5 => Test::Ne((t.clamp(-4.0, 4.0)).round()),
            6 if t.is_finite() => Test::LeZeroAsMissing(t),
            _ => Test::InSet {
                categories: (0..rng.below(6)).map(|_| rng.below(70) as u32).collect(),
                invalid_at_or_below: if rng.below(2) == 0 { -1.0 } else { -f32::from_bits(1) },
            },
        };
        let feature = rng.below(n_features as u64) as u32;
        let missing_yes = rng.below(2) == 0;
        let yes = grow(rng, nodes, n_features, depth - 1);
        let no = grow(rng, nodes, n_features, depth - 1);
        nodes[me as usize] = Node::Split { feature, test, missing_yes, yes, no };
        me
    }
    let mut nodes = Vec::new();
    grow(rng, &mut nodes, n_features, max_depth);
    Tree { output, nodes }
}

/// A row of awkward inputs, some near the thresholds the generator likes.
pub fn random_row(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.below(12) {
            0 => f32::NAN,
            1 => 0.0,
            2 => -0.0,
            3 => f32::INFINITY,
            4 => f32::NEG_INFINITY,
            5 => rng.below(70) as f32,
            6 => 1e-36,
            7 => -(rng.below(3) as f32) - 0.5,
            8 => (rng.threshold() as f32).next_down(),
            _ => rng.threshold() as f32,
        })
        .collect()
}
