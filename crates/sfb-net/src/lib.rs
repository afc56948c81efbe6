//! Transports for **sfb**: they move the engine's messages and never decide anything about
//! consistency.
//!
//! - [`mem`]: an in-memory cluster, P engines on threads joined by bounded channels.
//!
//! The libp2p transport, cluster files and the FMS parameter-server backend come next.
#![warn(missing_docs)]

mod error;
pub mod mem;

pub use error::{Error, Result};
