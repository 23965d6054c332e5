//! Feature schemas on the compiler side: a JSON file naming a model's features (in column
//! order) after the filter's catalogue, with bucket counts for hashed categoricals. `compile
//! --schema` stamps it into the artifact; `features` computes vectors for recorded requests.
//!
//! ```json
//! {"features": [{"name": "header_count"}, {"name": "method", "buckets": 64}]}
//! ```

use anyhow::{bail, Context, Result};
use edgescore_core::features::FeatureSchema;
use crate::ir::{FeatureDef, FeatureKind, ModelIr};
use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaFile {
    pub features: Vec<SchemaFeature>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaFeature {
    pub name: String,
    /// Bucket count of a hashed categorical; absent or 0 for numeric features.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub buckets: u32,
}

fn is_zero(b: &u32) -> bool {
    *b == 0
}

impl SchemaFile {
    pub fn read(path: &Path) -> Result<SchemaFile> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let schema: SchemaFile = serde_json::from_str(&text).with_context(|| format!("{} is not a feature schema", path.display()))?;
        schema.check().with_context(|| format!("feature schema {}", path.display()))?;
        Ok(schema)
    }

    /// Every feature must be one the filter computes, with a kind-consistent bucket count.
    pub fn check(&self) -> Result<()> {
        let mut s = FeatureSchema::new(b"schema-check-key-only");
        for (i, f) in self.features.iter().enumerate() {
            s.slot(&f.name, f.buckets).with_context(|| format!("feature {i}"))?;
        }
        Ok(())
    }
}

/// Names the model's features after the schema and sets their kinds and bucket counts.
/// Trained names must match the schema's, unless the library recorded only positions
/// (`f3`, `Column_3`, `3`, `feature_3`).
pub fn apply(ir: &mut ModelIr, schema: &SchemaFile) -> Result<()> {
    if ir.features.len() != schema.features.len() {
        bail!("the model has {} features, the schema {}", ir.features.len(), schema.features.len());
    }
    for (i, (def, want)) in ir.features.iter_mut().zip(&schema.features).enumerate() {
        let positional = [format!("f{i}"), format!("Column_{i}"), i.to_string(), format!("feature_{i}"), String::new()];
        if def.name != want.name && !positional.contains(&def.name) {
            bail!("feature {i} is `{}` in the model but `{}` in the schema (columns in a different order?)", def.name, want.name);
        }
        let kind = match (&def.kind, want.buckets) {
            (_, 0) if matches!(def.kind, FeatureKind::Categorical { .. }) => {
                bail!("feature {i} `{}` has categorical splits in the model but is numeric in the schema", want.name)
            }
            (_, 0) => FeatureKind::Numeric,
            (FeatureKind::Categorical { buckets }, b) if *buckets > b => {
                bail!("feature {i} `{}`: the model tests category {} but the schema declares {b} buckets", want.name, buckets - 1)
            }
            (_, b) => FeatureKind::Categorical { buckets: b },
        };
        *def = FeatureDef { name: want.name.clone(), kind };
    }
    Ok(())
}
