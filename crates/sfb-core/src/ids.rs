//! Identifier newtypes.

use serde::{Deserialize, Serialize};

/// Index of a peer in its cluster, `0..P`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PeerId(pub u32);

impl PeerId {
    /// The FMS parameter server (`u32::MAX`; displayed as `server`). Never a valid peer
    /// index: clients are `0..P`.
    pub const SERVER: PeerId = PeerId(u32::MAX);

    /// The index as `usize`, for table lookups.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for PeerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == Self::SERVER {
            write!(f, "server")
        } else {
            write!(f, "p{}", self.0)
        }
    }
}

impl From<u32> for PeerId {
    fn from(v: u32) -> Self {
        Self(v)
    }
}
