//! The sfb lab: what measures and compares runs, above the runtime ([`sfb_harness`]).
//!
//! - [`experiment`]: the benchmark scenarios of `sfb bench` and `sfb demo` (arms of
//!   [`RunSpec`](sfb_harness::RunSpec)s, carried out by a runner, and their reports:
//!   Markdown, JSON, CSV, PNG);
//! - [`plan`]: `sfb plan`'s closed-form time per clock of every backend, on the
//!   simulator's cost model ([`sfb_harness::sim`]);
//! - [`bench`](mod@bench): the kernel and link measurements of `sfb bench --scenario kernel|link` and
//!   the criterion benches.
//!
//! Nothing in the runtime depends on this crate: a program that trains builds without
//! plotting or benchmarks.
#![warn(missing_docs)]
// The lab returns the runtime's error (`sfb_harness::Error`) as the runtime gives it; in
// the runtime itself the lint spares it as exported API.
#![allow(clippy::result_large_err)]

pub mod bench;
pub mod experiment;
pub mod plan;
