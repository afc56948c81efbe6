//! Q-out partial-broadcast topologies for Sufficient Factor Broadcasting.
//!
//! In SFB each peer sends its sufficient factors to Q out-neighbours instead of all P − 1
//! peers. An update then reaches a peer `d` hops away `d` clocks later (with relaying), so
//! the topology should minimize Σ_{p≠q} dist(p, q) — the SFB paper's eq. 3 — subject to
//! every out-degree being Q. This crate provides:
//!
//! - [`Topology`]: P peers with out-neighbour lists, validated (out-degree exactly Q, no
//!   self loops or duplicate arcs, strongly connected), in-neighbours derived, conversion
//!   to a petgraph [`DiGraph`](petgraph::graph::DiGraph).
//! - Analysis ([`Topology::analyze`] → [`Analysis`]): all-pairs hop distances, cost,
//!   diameter, mean delay, eccentricities; the Moore-type [`lower_bound`].
//! - Constructions ([`generate`] with a [`Method`]): [`full`], [`ring`], [`circulant`],
//!   [`exponential`], generalized Kautz ([`kautz`]), seeded [`random`].
//! - The optimizer ([`optimize`] with [`Options`] → [`Optimized`]): exact
//!   branch-and-bound for small P, annealed local search with incremental shortest paths
//!   for large P; reports whether the result is proven optimal.
//! - File formats: the TOML cluster/topology file ([`ClusterFile`],
//!   [`Topology::from_toml_str`], [`Topology::to_toml`]), the JSON [`Report`] with the keys
//!   `sfb topology --format json` promises, and DOT ([`Topology::to_dot`]).
//! - Learning ([`Learning::of`]): whether the paper's no-forwarding mode converges,
//!   stalls or diverges on a topology, and the gossip mode's mixing rate and weights;
//!   [`optimize_for`] with a [`Goal`] keeps eq. 3 but requires the paper mode's stability
//!   or puts the gossip mode's mixing rate first.
//! - [`repair`]: a valid topology over the survivors of peer failures, changing few arcs.
//!
//! Peers are indices `0..P`; this crate knows nothing about networking.
//!
//! # Example
//! ```
//! use std::time::Duration;
//! use sfb_topology::{Method, Options, generate, lower_bound, optimize};
//!
//! // The paper's setting: 12 peers, each sending to 2 others.
//! let kautz = generate(&Method::Kautz, 12, 2)?;
//! let best = optimize(12, 2, &Options::default().time_limit(Duration::from_secs(30)))?;
//! assert!(best.proven_optimal);
//! assert!(best.cost <= kautz.cost());
//! assert_eq!(best.cost, lower_bound(12, 2)); // a Moore-optimal graph exists here
//!
//! let analysis = best.topology.analyze();
//! assert_eq!(analysis.diameter, 3);
//! let text = best.topology.to_toml();
//! assert_eq!(sfb_topology::Topology::from_toml_str(&text)?, best.topology);
//! # Ok::<(), sfb_topology::Error>(())
//! ```
#![warn(missing_docs)]

mod analysis;
mod error;
mod format;
mod generate;
mod learning;
mod optimize;
mod repair;
mod topology;

pub use analysis::{Analysis, gap, lower_bound};
pub use error::{Error, Result};
pub use format::{ClusterFile, Format, PeerEntry, Report, describe};
pub use generate::{Method, circulant, exponential, full, generate, kautz, random, ring};
pub use learning::{Learning, PaperMode};
pub use optimize::{
    Chosen, GOAL_SEARCH_MAX_PEERS, Goal, LOCAL_SEARCH_MAX_PEERS, Optimized, Options, Proof,
    optimize, optimize_for,
};
pub use repair::{Repaired, repair};
pub use topology::{Topology, check_params};
