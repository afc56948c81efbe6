//! The runtime of **sfb**: it turns a description of a run into a running cluster and a
//! summary. The benchmark scenarios, reports and the planner are `sfb-lab`'s, above this
//! crate; the command line is `sfb-cli`'s.
//!
//! - [`RunSpec`]: one run as serde data (model, [`DataSource`], [`TrainOptions`],
//!   topology, backend, transport, network), with `sfb run`'s defaults and
//!   [`RunSpec::validate`] before anything runs;
//! - [`DataSource::load`]: files or synthetic data → [`sfb_models::Problem`];
//! - [`Cluster::builder`]: engines (or an FMS server and clients) for P peers, owning the
//!   per-peer seed scheme ([`peer_seed`]), run in memory or built one node at a time for
//!   another driver;
//! - [`flags`]: the command line's flag for each spec field, one table read both ways;
//! - [`summarize`]: one [`Summary`](sfb_core::metrics::Summary) for every backend and
//!   transport;
//! - [`run`]: a whole [`RunSpec`] in one call, in memory or over libp2p as local
//!   processes ([`launch`]: the launcher and the child side of `sfb peer --spec`);
//! - [`netns`]: per-node network namespaces with kernel-shaped links (`--netns`, root);
//! - [`sim`]: the simulator's options and cost model (`sfb sim`, and `sfb plan` in
//!   `sfb-lab`), with [`calibrate`] timing this machine's work for it.
//!
//! # Example: your own model on 4 peers, full then partial broadcast
//! ```
//! use ndarray::{Array2, ArrayView1, ArrayView2};
//! use sfb_core::{Model, ModelError, SvList};
//! use sfb_harness::Cluster;
//!
//! /// Least squares, J = 1: u = w·x − y, v = x.
//! struct Ls;
//! impl Model for Ls {
//!     type Sample = (Vec<f32>, f32);
//!     fn compute_sv(&mut self, w: ArrayView2<'_, f32>, batch: &[&Self::Sample], sv: &mut SvList)
//!         -> Result<(), ModelError> {
//!         for (x, y) in batch {
//!             sv.push_dense(&[w.row(0).dot(&ArrayView1::from(x)) - y], x)?;
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let data: Vec<_> = (0..400).map(|i| {
//!     let x = vec![1.0, if i % 2 == 0 { 1.0 } else { -1.0 }];
//!     let y = 0.5 - 2.0 * x[1];
//!     (x, y)
//! }).collect();
//! let cluster = || Cluster::builder()
//!     .peers(4)
//!     .model(|_| Ls)
//!     .init_w(Array2::zeros((1, 2)))
//!     .data(data.clone())
//!     .clocks(100).batch(8).lr(0.2);
//! let full = cluster().run_mem()?;
//! let partial = cluster().out_degree(2).run_mem()?;
//! for run in [&full, &partial] {
//!     let w = run.peers[0].engine.replica().w();
//!     assert!((w[[0, 0]] - 0.5).abs() < 1e-3 && (w[[0, 1]] + 2.0).abs() < 1e-3);
//! }
//! // Full broadcast under BSP: every replica is bitwise the same.
//! let s = full.summary();
//! assert!(s.replica_checksums.iter().all(|c| c == &s.replica_checksums[0]));
//! assert_eq!(partial.summary().out_degree, 2);
//! # Ok::<(), sfb_harness::Error>(())
//! ```
//!
//! # Example: a run description
//! ```
//! let mut spec = sfb_harness::RunSpec::default();
//! spec.data = sfb_harness::DataSource::Synthetic("classes=3,features=8,samples=400".into());
//! spec.train.clocks = 5;
//! let out = sfb_harness::run(&spec, None)?;
//! assert_eq!((out.summary.backend.as_str(), out.summary.peers), ("sfb", 4));
//! # Ok::<(), sfb_harness::Error>(())
//! ```
#![warn(missing_docs)]

pub mod auto;
pub mod calibrate;
pub mod checkpoint;
mod cluster;
mod data;
mod error;
pub mod flags;
pub mod launch;
pub mod netns;
pub mod preflight;
mod rate_serde;
pub mod records;
mod run;
pub mod sim;
mod spec;
mod summary;

pub use cluster::{
    Builder, Builtin, Cluster, Custom, FmsRun, LoadError, MemRun, ModelSource, NoModel, Outcome,
    Peer, Progress, peer_seed, shard,
};
pub use error::{Error, Result};
pub use flags::flag_for;
pub use run::{run, run_with};
pub use spec::{
    Backend, CompressSpec, ConsistencySpec, DataSource, FaultOptions, LostShardsSpec, MethodSpec,
    ModelChoice, NetOptions, OutputOptions, PartialSpec, PeerLossSpec, PrioritizeSpec, Push,
    RunSpec, ScaleSpec, ScheduleSpec, StragglerSpec, SyncSpec, TopologyMethod, TopologyOptions,
    TrainOptions, Transport, default_lr, default_lr_for_data, default_method, default_warmup,
    score_step,
};
pub use summary::{NodeOutcome, summarize};
