//! The crate's error type.

/// Errors raised by sfb-models.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A synthetic-data spec could not be parsed.
    #[error("bad synthetic spec {spec:?}: {reason}")]
    Spec {
        /// The spec given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A sample does not fit the model.
    #[error("sample {index}: {reason}")]
    Sample {
        /// Index of the sample in its batch.
        index: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Result alias for sfb-models.
pub type Result<T, E = Error> = std::result::Result<T, E>;
