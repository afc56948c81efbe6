//! The crate's error type.

use std::path::PathBuf;

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
    /// A line of a data file is malformed or does not fit the training data.
    #[error("{}:{line}: {reason}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A data file holds no samples.
    #[error("{}:{lines}: empty data file: no samples in {lines} line(s)", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// Lines read (blank and comment lines included).
        lines: usize,
    },
    /// A data file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An input exceeds a resource limit ([`Limits`](crate::Limits)): nothing of its size
    /// was allocated.
    #[error(
        "{at}: {found}, over the {} limit of {max} {} (raise it with {}=N)",
        limit.what(),
        limit.unit(),
        limit.env()
    )]
    Limit {
        /// Where: `file:line`, a file, or a synthetic spec.
        at: String,
        /// What was found, in words with its figure (e.g. `feature index 4000000000`).
        found: String,
        /// The limit exceeded.
        limit: crate::LimitKind,
        /// The limit's value (in [`LimitKind::unit`](crate::LimitKind::unit)s).
        max: u64,
    },
    /// A mini-batch is larger than the whole training set
    /// ([`Problem::check_batch`](crate::Problem::check_batch)).
    #[error(
        "batch {batch} is larger than the whole training set ({samples} samples): use a \
         batch of at most {samples} (a peer draws its mini-batch from its shard, with \
         repeats when the shard is smaller)"
    )]
    BatchTooLarge {
        /// The batch size asked for.
        batch: usize,
        /// Training samples in all.
        samples: usize,
    },
    /// A model file ([`crate::saved`]) is refused.
    #[error("{}: {reason}", path.display())]
    ModelFile {
        /// The file.
        path: PathBuf,
        /// Why, in one line.
        reason: String,
    },
    /// A model or reader parameter is out of range.
    #[error("invalid parameter {name} = {value}: {reason}")]
    Parameter {
        /// The parameter's name.
        name: &'static str,
        /// Its value, as given.
        value: String,
        /// The accepted range.
        reason: String,
    },
}

/// Result alias for sfb-models.
pub type Result<T, E = Error> = std::result::Result<T, E>;
