//! Transports for **sfb**: they move the engine's messages and never decide anything about
//! consistency.
//!
//! - [`mem`]: an in-memory cluster, P engines on threads joined by bounded channels;
//! - [`mem_fms`]: the FMS baseline in memory, a parameter server and P clients on threads;
//! - [`p2p`]: one peer per process over libp2p (TCP, noise, yamux, one stream per edge),
//!   authenticated against a [`cluster::Cluster`] file, with an optional outbound
//!   [`bandwidth`] budget and liveness by heartbeats (a paused peer is waited for, a
//!   silent one lost); [`frame`] holds the framing and handshake;
//! - [`virtual_time`]: a deterministic single-threaded network in virtual time (seeded
//!   per-link delays, pauses, losses, modelled work costs; no threads, no sleeps).
#![warn(missing_docs)]

pub mod bandwidth;
mod clock;
pub mod cluster;
pub mod driver;
mod error;
pub mod frame;
pub mod mem;
pub mod mem_fms;
pub mod p2p;
pub mod virtual_time;

pub use clock::{Stop, WallClock};
pub use error::{Awaiting, ClusterError, ConnectProblem, Error, FmsSetup, Result};
