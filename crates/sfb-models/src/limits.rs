//! Resource limits on input: how long a line, how many features, how large the loaded data
//! and the replicated matrix may be before loading is refused.
//!
//! Every limit has a documented default and an environment variable that raises (or lowers)
//! it ([`Limits::from_env`]); an input beyond a limit is refused with
//! [`Error::Limit`](crate::Error::Limit), which names where (`file:line` or the synthetic
//! spec), what was found, the limit, and how to raise it. The checks run *before* the
//! memory is taken: a reader never buffers more than [`Limits::max_line_bytes`] of one line,
//! and a feature index is checked before anything of its size exists.
//!
//! # Example
//! ```
//! use sfb_models::{Error, LimitKind, Limits};
//! let limits = Limits { max_w_bytes: 1 << 20, ..Limits::default() };
//! let err = limits.check_matrix("synthetic", "W", 1000, 1000).unwrap_err();
//! assert!(matches!(err, Error::Limit { limit: LimitKind::WBytes, .. }));
//! assert_eq!(
//!     err.to_string(),
//!     "synthetic: W (1000 × 1000 f32) needs 4000000 bytes (3.8 MiB), over the W-size limit \
//!      of 1048576 bytes (raise it with SFB_MAX_W_BYTES=N)"
//! );
//! ```

use crate::{Error, Example, Result};

/// Which limit of [`Limits`] an input exceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitKind {
    /// [`Limits::max_line_bytes`].
    LineBytes,
    /// [`Limits::max_features`].
    Features,
    /// [`Limits::max_data_bytes`].
    DataBytes,
    /// [`Limits::max_w_bytes`].
    WBytes,
}

impl LimitKind {
    /// The limit in words, e.g. `line-length`.
    pub fn what(self) -> &'static str {
        match self {
            LimitKind::LineBytes => "line-length",
            LimitKind::Features => "feature-count",
            LimitKind::DataBytes => "data-size",
            LimitKind::WBytes => "W-size",
        }
    }

    /// The unit of the limit's value.
    pub fn unit(self) -> &'static str {
        match self {
            LimitKind::Features => "features",
            _ => "bytes",
        }
    }

    /// The [`Limits`] field, e.g. `max_line_bytes`.
    pub fn field(self) -> &'static str {
        match self {
            LimitKind::LineBytes => "max_line_bytes",
            LimitKind::Features => "max_features",
            LimitKind::DataBytes => "max_data_bytes",
            LimitKind::WBytes => "max_w_bytes",
        }
    }

    /// The environment variable [`Limits::from_env`] reads it from.
    pub fn env(self) -> &'static str {
        match self {
            LimitKind::LineBytes => "SFB_MAX_LINE_BYTES",
            LimitKind::Features => "SFB_MAX_FEATURES",
            LimitKind::DataBytes => "SFB_MAX_DATA_BYTES",
            LimitKind::WBytes => "SFB_MAX_W_BYTES",
        }
    }

    const ALL: [LimitKind; 4] = [
        LimitKind::LineBytes,
        LimitKind::Features,
        LimitKind::DataBytes,
        LimitKind::WBytes,
    ];
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.field())
    }
}

/// Bounds on what a data source may make the process allocate. The defaults fit the
/// machines this runs on (tens of GB of memory, `P` replicas of W in one `sfb run`) with
/// room to spare, and are far above every data set the tests and benchmarks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest line of a data file, in bytes (end of line excluded). A longer line — or a
    /// "line" that never ends, such as `/dev/zero` — is refused after reading this many
    /// bytes of it. Default 16 MiB (16,777,216): a dense CSV row of a million features or a
    /// LIBSVM line of a million non-zeros is well under it.
    pub max_line_bytes: usize,
    /// Most features `D` (LIBSVM: largest index + 1; CSV: fields − 1; a `D` given by the
    /// caller). Default 2^25 = 33,554,432, above the largest public LIBSVM sets
    /// (kdd2010-b: 29.9 M features).
    pub max_features: usize,
    /// Most memory the samples of one data set may take, in bytes (estimated: each sample's
    /// bookkeeping plus 4 bytes per dense value or 8 per sparse non-zero; files are checked
    /// while they are read, densifying and generating before they start). Default 4 GiB.
    pub max_data_bytes: u64,
    /// Most memory one replica of the parameter matrix (or another matrix of its size, such
    /// as a synthetic teacher) may take, in bytes. Every peer holds one replica, so an
    /// in-memory run of `P` peers holds `P` of them. Default 2 GiB (536 M f32 entries).
    pub max_w_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_line_bytes: 16 << 20,
            max_features: 1 << 25,
            max_data_bytes: 4 << 30,
            max_w_bytes: 2 << 30,
        }
    }
}

/// `bytes` in a unit a person reads at a glance (`3.8 MiB`).
pub(crate) fn human_bytes(bytes: u128) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1} {unit}")
}

/// Bytes of one sample beyond its values (the [`Example`] and its vectors' headers).
pub(crate) const SAMPLE_OVERHEAD: u128 = std::mem::size_of::<Example>() as u128;

/// Estimated bytes of `samples` samples with `values` stored values in all, dense (4 bytes
/// a value) or sparse (8: index and value).
pub(crate) fn data_bytes(samples: u128, values: u128, sparse: bool) -> u128 {
    let per_value = if sparse { 8 } else { 4 };
    (samples.saturating_mul(SAMPLE_OVERHEAD)).saturating_add(values.saturating_mul(per_value))
}

impl Limits {
    /// The defaults, with any limit overridden by its environment variable
    /// (`SFB_MAX_LINE_BYTES`, `SFB_MAX_FEATURES`, `SFB_MAX_DATA_BYTES`, `SFB_MAX_W_BYTES`;
    /// a non-negative integer, e.g. `SFB_MAX_DATA_BYTES=17179869184`).
    ///
    /// # Errors
    /// [`Error::Parameter`] naming the variable when its value is not a non-negative
    /// integer.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`from_env`](Self::from_env) with the variables looked up by `get` (for tests and
    /// for callers that keep their settings elsewhere).
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut l = Self::default();
        for kind in LimitKind::ALL {
            let Some(v) = get(kind.env()) else { continue };
            let n: u64 = v.trim().parse().map_err(|_| Error::Parameter {
                name: kind.env(),
                value: v.clone(),
                reason: format!("must be a non-negative integer ({})", kind.unit()),
            })?;
            let as_usize = usize::try_from(n).unwrap_or(usize::MAX);
            match kind {
                LimitKind::LineBytes => l.max_line_bytes = as_usize,
                LimitKind::Features => l.max_features = as_usize,
                LimitKind::DataBytes => l.max_data_bytes = n,
                LimitKind::WBytes => l.max_w_bytes = n,
            }
        }
        Ok(l)
    }

    /// The value of limit `kind`.
    pub fn get(&self, kind: LimitKind) -> u64 {
        match kind {
            LimitKind::LineBytes => self.max_line_bytes as u64,
            LimitKind::Features => self.max_features as u64,
            LimitKind::DataBytes => self.max_data_bytes,
            LimitKind::WBytes => self.max_w_bytes,
        }
    }

    /// The error for `found` (in words) exceeding limit `kind` at `at`.
    pub fn exceeded(&self, kind: LimitKind, at: impl Into<String>, found: String) -> Error {
        Error::Limit {
            at: at.into(),
            found,
            limit: kind,
            max: self.get(kind),
        }
    }

    /// Refuses `features` features: `at` names the source, `what` the figure found.
    ///
    /// # Errors
    /// [`Error::Limit`] ([`LimitKind::Features`]) when `features > max_features`.
    pub fn check_features(&self, at: impl Into<String>, what: &str, features: u64) -> Result<()> {
        if features > self.max_features as u64 {
            return Err(self.exceeded(LimitKind::Features, at, format!("{what} {features}")));
        }
        Ok(())
    }

    /// Refuses data of `bytes` bytes: `at` names the source, `what` the data.
    ///
    /// # Errors
    /// [`Error::Limit`] ([`LimitKind::DataBytes`]) when `bytes > max_data_bytes`.
    pub fn check_data_bytes(&self, at: impl Into<String>, what: &str, bytes: u128) -> Result<()> {
        if bytes > u128::from(self.max_data_bytes) {
            let found = format!("{what} need {bytes} bytes ({})", human_bytes(bytes));
            return Err(self.exceeded(LimitKind::DataBytes, at, found));
        }
        Ok(())
    }

    /// Refuses a `rows × cols` f32 matrix `name` (W, or one of its size) beyond
    /// [`max_w_bytes`](Self::max_w_bytes); `at` names the source.
    ///
    /// # Errors
    /// [`Error::Limit`] ([`LimitKind::WBytes`]).
    pub fn check_matrix(
        &self,
        at: impl Into<String>,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<()> {
        let bytes = (rows as u128)
            .saturating_mul(cols as u128)
            .saturating_mul(4);
        if bytes > u128::from(self.max_w_bytes) {
            let found = format!(
                "{name} ({rows} × {cols} f32) needs {bytes} bytes ({})",
                human_bytes(bytes)
            );
            return Err(self.exceeded(LimitKind::WBytes, at, found));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_env_overrides() {
        let l = Limits::default();
        assert_eq!(
            (
                l.max_line_bytes,
                l.max_features,
                l.max_data_bytes,
                l.max_w_bytes
            ),
            (16 << 20, 1 << 25, 4 << 30, 2 << 30)
        );
        let env = |k: &str| match k {
            "SFB_MAX_LINE_BYTES" => Some("100".to_string()),
            "SFB_MAX_W_BYTES" => Some(" 5000 ".to_string()),
            _ => None,
        };
        let l = Limits::from_lookup(env).unwrap();
        assert_eq!((l.max_line_bytes, l.max_w_bytes), (100, 5000));
        assert_eq!(l.max_features, 1 << 25);
        let err =
            Limits::from_lookup(|k| (k == "SFB_MAX_FEATURES").then(|| "1e9".into())).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid parameter SFB_MAX_FEATURES = 1e9: must be a non-negative integer (features)"
        );
    }

    #[test]
    fn limit_errors_name_the_figure_the_limit_and_the_variable() {
        let l = Limits::default();
        let e = l
            .check_features("a.svm:3", "feature index", 4_000_000_000)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.svm:3: feature index 4000000000, over the feature-count limit of 33554432 \
             features (raise it with SFB_MAX_FEATURES=N)"
        );
        let e = l
            .check_data_bytes("a.csv:9", "the samples read so far", 5 << 30)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.csv:9: the samples read so far need 5368709120 bytes (5.0 GiB), over the \
             data-size limit of 4294967296 bytes (raise it with SFB_MAX_DATA_BYTES=N)"
        );
        assert!(l.check_matrix("x", "W", 1 << 14, 1 << 15).is_ok()); // exactly 2 GiB
        assert!(l.check_matrix("x", "W", 1 << 14, (1 << 15) + 1).is_err());
        // No overflow on absurd shapes.
        assert!(l.check_matrix("x", "W", usize::MAX, usize::MAX).is_err());
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(40_000_000_000), "37.3 GiB");
    }
}
