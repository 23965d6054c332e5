//! What a score or a text verdict can trigger, and the defaults of a block reply: used by the
//! configuration (models and text labels) and by the decision.

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// Score only (recorded in headers, logs and metrics).
    #[default]
    Allow,
    /// Above the threshold: the decision header names the model.
    Tag,
    /// Above the threshold: a local reply (in enforce mode).
    Block,
}

pub const DEFAULT_BLOCK_STATUS: u16 = 403;
pub const DEFAULT_BLOCK_BODY: &str = "request blocked by edgescore\n";

impl ActionKind {
    /// As the decision header and the feature log spell it.
    pub fn name(self) -> &'static str {
        match self {
            ActionKind::Allow => "allow",
            ActionKind::Tag => "tag",
            ActionKind::Block => "block",
        }
    }
}
