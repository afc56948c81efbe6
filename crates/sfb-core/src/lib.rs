//! Sans-IO core of **sfb**, a Sufficient Factor Broadcasting runtime.
//!
//! A matrix-parametrized model (`W`, `J × D`) trained by SGD has per-sample updates of
//! rank one, `ΔW = u vᵀ`. Every peer keeps a full [`Replica`] of W, computes the factor
//! pairs of its mini-batch with a user [`Model`], sends them as a [`FactorBatch`] to its
//! out-neighbours, and applies everything it receives with one batched kernel
//! ([`Replica::apply`]). The [`Engine`] is the per-peer state machine that does this under a
//! [`Consistency`] model; transports (in `sfb-net`) only move its messages. The core reads
//! no clock of its own: every duration it reports comes from the [`TimeSource`] its
//! driver passes in, so a test or a simulator decides what time it is.
//!
//! # Example: two peers, BSP, driven by hand
//! ```
//! use ndarray::{Array2, ArrayView2};
//! use sfb_core::{Config, Engine, ManualTime, Model, ModelError, PeerId, Progress, Shard, SvList};
//!
//! /// Least squares with J = 1: u = w·x − y, v = x.
//! struct Ls;
//! impl Model for Ls {
//!     type Sample = (Vec<f32>, f32);
//!     fn compute_sv(&mut self, w: ArrayView2<'_, f32>, batch: &[&Self::Sample], sv: &mut SvList)
//!         -> Result<(), ModelError> {
//!         for (x, y) in batch {
//!             let pred: f32 = w.row(0).iter().zip(x).map(|(a, b)| a * b).sum();
//!             sv.push_dense(&[pred - y], x)?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let data = |p: usize| Shard::new(vec![(vec![1.0, p as f32], 1.0); 4], p as u64);
//! let mut engines: Vec<_> = (0..2)
//!     .map(|p| {
//!         let mut cfg = Config::full_broadcast(PeerId(p as u32), 2);
//!         cfg.clocks = 5;
//!         Engine::new(cfg, Ls, Array2::zeros((1, 2)), data(p)).unwrap()
//!     })
//!     .collect();
//! // Time is an argument: this test decides what time it is (here it never moves).
//! let mut time = ManualTime::default();
//! let mut done = 0;
//! while done < 2 {
//!     done = 0;
//!     for p in 0..2 {
//!         if engines[p].on_tick(&mut time).unwrap() == Progress::Done {
//!             done += 1;
//!         }
//!         while let Some(out) = engines[p].poll_output() {
//!             engines[out.to.index()].on_message(PeerId(p as u32), out.msg, &mut time).unwrap();
//!         }
//!     }
//! }
//! assert_eq!(engines[0].replica().checksum(), engines[1].replica().checksum());
//! ```
#![warn(missing_docs)]

pub mod aggregate;
pub mod bound;
pub mod checkpoint;
pub mod compress;
mod consistency;
mod data;
pub mod engine;
mod error;
mod factor;
pub mod fms;
pub mod gossip;
mod ids;
pub mod membership;
pub mod metrics;
mod model;
mod node;
pub mod optim;
pub mod prioritize;
pub mod relay;
pub mod replica;
pub mod stop;
mod straggler;
mod time;
pub mod tree;
pub mod wire;
mod worker;

pub use checkpoint::{NodeState, Role};
pub use consistency::{
    Barrier, Consistency, ParseConsistencyError, PeerStatus, StatusView, ThrottledRelease,
};
pub use data::{Shard, ShardSource, shard_indices, takeover_indices};
pub use engine::{Config, DEFAULT_MAX_DRIFT, Engine, Event, Output, PeerLoss, Progress};
pub use error::{ConfigError, Error, ModelError, Result};
pub use factor::{FactorBatch, SvList, VFactors, VRow};
pub use ids::PeerId;
pub use membership::{Action, Membership, News, View};
pub use model::{Evaluation, Evaluator, Extras, Model};
pub use node::StateMachine;
pub use optim::{Method, Optimizer, Schedule, Stepper};
pub use prioritize::{Budget, LinkRate, Policy, Prioritize, Prioritizer};
pub use relay::{RouteError, Routes};
pub use replica::{ApplyStats, Replica};
pub use straggler::{Stragglers, production_factor, production_stragglers};
pub use time::{ManualTime, TimeSource, Work};
pub use worker::DIVERGENCE_FACTOR;
