//! The measurements behind `sfb bench --scenario kernel|link`, as a library: the binary
//! calls [`kernel::measure`] and [`link::measure`] and prints or writes their reports; the
//! criterion benches in `crates/sfb-core/benches/apply.rs` and
//! `crates/sfb-lab/benches/link.rs` time the same kernels on the same seeded inputs
//! ([`sfb_core::replica::seeded_batches`], [`link::frame_message`]).
//!
//! - [`kernel`]: [`Replica::apply`](sfb_core::Replica::apply) against a plain faer GEMM of
//!   the same shape, the naive per-pair loop ([`sfb_core::replica::apply_naive`]) and the
//!   machine's memory bandwidth over a buffer the size of W.
//! - [`link`]: one libp2p stream (TCP + noise + yamux over 127.0.0.1) per arm: a bare copy
//!   loop vs sfb's framing vs framing + `wire::decode` (full validation), the receiver's
//!   CPU cost per frame from memory, and the bandwidth budget's achieved rate.
//!
//! Needs the crate feature `bench` (on by default).

pub mod kernel;
pub mod link;

use std::time::{Duration, Instant};

use serde::Serialize;

/// Errors of the measurements.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter is outside its accepted range.
    #[error("{field} must be {expected}")]
    Invalid {
        /// The parameter.
        field: &'static str,
        /// The accepted range, in words.
        expected: &'static str,
    },
    /// A bandwidth could not be parsed.
    #[error("bandwidth {text:?}: {reason}")]
    Rate {
        /// The text given.
        text: String,
        /// What is wrong.
        reason: String,
    },
    /// The kernel or a frame was refused by sfb-core.
    #[error(transparent)]
    Core(#[from] sfb_core::Error),
    /// A stream or the runtime failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The libp2p set-up failed.
    #[error("libp2p {what}: {reason}")]
    Libp2p {
        /// What was being done.
        what: &'static str,
        /// The cause.
        reason: String,
    },
    /// A step did not finish in time.
    #[error("{what}: no result within {limit:?}")]
    Timeout {
        /// What was being done.
        what: String,
        /// The bound.
        limit: Duration,
    },
    /// A result does not make sense (a task ended, a frame from the wrong origin, …).
    #[error("{0}")]
    Broken(String),
}

/// Results of the measurements.
pub type Result<T> = std::result::Result<T, Error>;

/// One arm in DESIGN.md's `bench` JSON shape (`name`, `time_to_target_s`, `samples_per_s`,
/// `bytes_per_clock`, `final_objective`); micro-benchmarks leave the training figures empty.
#[derive(Debug, Clone, Serialize)]
pub struct ArmKeys {
    /// Arm name.
    pub name: String,
    /// Always `None` here.
    pub time_to_target_s: Option<f64>,
    /// Always `None` here.
    pub samples_per_s: Option<f64>,
    /// Always `None` here.
    pub bytes_per_clock: Option<f64>,
    /// Always `None` here.
    pub final_objective: Option<f64>,
}

impl ArmKeys {
    fn named(name: String) -> Self {
        Self {
            name,
            time_to_target_s: None,
            samples_per_s: None,
            bytes_per_clock: None,
            final_objective: None,
        }
    }
}

/// Median seconds of `reps` timed calls of `f` (at least one), after one warm-up call.
pub fn median_time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    median(&t)
}

/// The median (mean of the middle two for an even count; NaN when empty).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// Creates `dir` and writes each `(file name, contents)` into it.
fn write_all(dir: &std::path::Path, files: &[(&str, String)]) -> Result<()> {
    let io = |what: String| move |source| Error::Io { what, source };
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
    }
    Ok(())
}
