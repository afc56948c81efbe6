//! **sfb** — Sufficient Factor Broadcasting: peer-to-peer distributed training of
//! matrix-parametrized models.
//!
//! This facade re-exports the workspace's crates:
//! - [`core`]: factors, the replica and its batched apply kernel, the [`core::Model`]
//!   trait, consistency models and the sans-IO per-peer engine;
//! - [`topology`]: Q-out partial-broadcast topologies and their optimizer;
//! - [`net`]: transports (in-memory cluster; libp2p next) that drive engines;
//! - [`models`]: MLR and friends, data generators, evaluation;
//! - [`harness`]: run descriptions ([`harness::RunSpec`]), data sources, the cluster
//!   builder ([`harness::Cluster`]) and run summaries;
//! - [`lab`]: benchmark scenarios and reports, the planner, kernel and link measurements;
//! - [`app`]: the command line (`sfb run`, `sfb topology`, `sfb bench`, …) as a library:
//!   the `sfb` binary is [`app::App`] with the built-in models, and a program of your own
//!   registers its models on one to get the same commands.
#![warn(missing_docs)]

pub use sfb_cli as app;
pub use sfb_core as core;
pub use sfb_harness as harness;
pub use sfb_lab as lab;
pub use sfb_models as models;
pub use sfb_net as net;
pub use sfb_topology as topology;
