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
//!   builder ([`harness::Cluster`]) and run summaries.
//!
//! The `sfb` binary (`sfb run`, `sfb topology`, `sfb bench`, …) is built on these.
#![warn(missing_docs)]

pub use sfb_core as core;
pub use sfb_harness as harness;
pub use sfb_models as models;
pub use sfb_net as net;
pub use sfb_topology as topology;
