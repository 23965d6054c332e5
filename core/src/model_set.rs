//! Several models scored on one shared feature vector: the request's features (and their
//! categorical hashes) are computed once and every model reads the slots it needs.

use crate::artifact::ArtifactError;
use crate::ensemble::explain::ExplainError;
use crate::ensemble::{Model, ScoreError, TreeEnsemble};

/// Why a model could not join a set.
#[derive(Debug, thiserror::Error)]
pub enum ModelSetError {
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error("model {model}: feature {feature:?} is not in the shared feature vector")]
    UnknownFeature { model: String, feature: String },
}

struct Member {
    model: Model,
    /// `gather[i]` is the shared-vector slot of the model's feature `i`; `None` when the model's
    /// features are the shared vector's first slots in order, so no copy is needed.
    gather: Option<Vec<u32>>,
    /// Shared-vector length the model reads up to.
    need: usize,
}

/// Models that share one feature vector laid out by `names`.
pub struct ModelSet {
    names: Vec<String>,
    members: Vec<Member>,
    /// Per-model feature scratch, sized once (for gathered models).
    scratch: Vec<f32>,
}

impl ModelSet {
    /// A set whose shared feature vector has these slots, in this order.
    pub fn new(names: Vec<String>) -> ModelSet {
        ModelSet { names, members: Vec::new(), scratch: Vec::new() }
    }

    /// Validates `bytes` and maps the model's features onto the shared vector by name.
    pub fn push(&mut self, bytes: &[u8]) -> Result<usize, ModelSetError> {
        let model = Model::load(bytes)?;
        let e = model.ensemble();
        let mut gather = Vec::with_capacity(e.n_features());
        for i in 0..e.n_features() {
            let name = e.feature_name(i);
            let slot = self.names.iter().position(|n| n == name).ok_or_else(|| ModelSetError::UnknownFeature {
                model: e.name().to_string(),
                feature: name.to_string(),
            })?;
            gather.push(slot as u32);
        }
        Ok(self.push_gathered(model, gather))
    }

    /// Adds a validated model whose feature `i` reads shared slot `gather[i]` (the caller
    /// resolved the names, e.g. the filter's feature catalogue). Slots past the set's names are
    /// the caller's to fill.
    pub fn push_gathered(&mut self, model: Model, gather: Vec<u32>) -> usize {
        let identity = gather.iter().enumerate().all(|(i, &s)| s as usize == i);
        let need = gather.iter().map(|&s| s as usize + 1).max().unwrap_or(0);
        self.scratch.resize(self.scratch.len().max(gather.len()), 0.0);
        self.members.push(Member { model, gather: (!identity).then_some(gather), need });
        self.members.len() - 1
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The validated view of model `i`.
    pub fn ensemble(&self, i: usize) -> &TreeEnsemble<'_> {
        self.members[i].model.ensemble()
    }

    /// Scores model `i` on the shared vector `shared` into `out`. No allocation.
    pub fn score(&mut self, i: usize, shared: &[f32], out: &mut [f32]) -> Result<(), ScoreError> {
        self.with_features(i, shared, |e, x| e.score(x, out))?
    }

    /// Model `i`'s path attribution of the shared vector (`TreeEnsemble::explain`). No
    /// allocation.
    pub fn explain(&mut self, i: usize, shared: &[f32], out: &mut [f64]) -> Result<(), ExplainError> {
        self.with_features(i, shared, |e, x| e.explain(x, out))?
    }

    /// `f` of model `i` and its features, gathered from `shared` where they are not its first
    /// slots in order.
    fn with_features<R>(&mut self, i: usize, shared: &[f32], f: impl FnOnce(&TreeEnsemble<'_>, &[f32]) -> R) -> Result<R, ScoreError> {
        let Some(member) = self.members.get(i) else {
            return Err(ScoreError::NoSuchModel(i));
        };
        let need = member.need.max(self.names.len());
        if shared.len() < need {
            return Err(ScoreError::Features { got: shared.len(), need });
        }
        let e = member.model.ensemble();
        Ok(match &member.gather {
            None => f(e, shared),
            Some(gather) => {
                let x = &mut self.scratch[..gather.len()];
                for (dst, &slot) in x.iter_mut().zip(gather) {
                    *dst = shared[slot as usize];
                }
                f(e, x)
            }
        })
    }
}
