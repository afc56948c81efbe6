//! tmp
#![warn(missing_docs)]
mod analysis;
mod error;
mod generate;
mod optimize;
mod topology;

pub use analysis::{Analysis, gap, lower_bound};
pub use error::{Error, Result};
pub use generate::{Method, circulant, exponential, full, generate, kautz, random, ring};
pub use optimize::{Optimized, Options, Proof, optimize};
pub use topology::{Topology, check_params};
