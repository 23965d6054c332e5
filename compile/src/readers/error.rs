//! The error every reader returns: a file that is not the format it claims (`Malformed`), or a
//! model using a construct edgescore does not compile (`Unsupported`).

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot tell the model format from its contents; pass --format")]
    UnknownFormat,
    #[error("malformed {format} model: {detail}")]
    Malformed { format: &'static str, detail: String },
    #[error("unsupported in {format} model: {construct}{}", tree.map(|t| format!(" (tree {t})")).unwrap_or_default())]
    Unsupported { format: &'static str, construct: String, tree: Option<usize> },
}

impl ReadError {
    pub fn malformed(format: &'static str, detail: impl Into<String>) -> Self {
        ReadError::Malformed { format, detail: detail.into() }
    }
    pub fn unsupported(format: &'static str, construct: impl Into<String>, tree: Option<usize>) -> Self {
        ReadError::Unsupported { format, construct: construct.into(), tree }
    }
}
