//! Transports for **sfb**: they move the engine's messages and never decide anything about
//! consistency.
//!
//! - [`mem`]: an in-memory cluster, P engines on threads joined by bounded channels;
//! - [`mem_fms`]: the FMS baseline in memory, a parameter server and P clients on threads;
//! - [`p2p`]: one peer per process over libp2p (TCP, noise, yamux, one stream per edge),
//!   authenticated against a [`cluster::Cluster`] file, with an optional outbound
//!   [`bandwidth`] budget; [`frame`] holds the framing and handshake.
#![warn(missing_docs)]

pub mod bandwidth;
mod clock;
pub mod cluster;
mod error;
pub mod frame;
pub mod mem;
pub mod mem_fms;
pub mod p2p;

pub use clock::WallClock;
pub use error::{Error, Result};
