//! The crate's error type.

use std::time::Duration;

use sfb_core::PeerId;

/// Errors raised by sfb-net.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A peer's engine refused a message or failed a step.
    #[error("peer {peer}: {source}")]
    Peer {
        /// The failing peer.
        peer: PeerId,
        /// The engine's error.
        #[source]
        source: sfb_core::Error,
    },
    /// A peer waited longer than the configured timeout without any message arriving.
    #[error(
        "peer {peer} at clock {clock} waited {waited:?} without progress; still waiting on {waiting_on}"
    )]
    Timeout {
        /// The waiting peer.
        peer: PeerId,
        /// Its clock.
        clock: u64,
        /// How long it waited.
        waited: Duration,
        /// The in-neighbours it was waiting on and what each had delivered.
        waiting_on: String,
    },
    /// Another peer failed, so this one stopped.
    #[error("peer {peer} stopped because peer {by} failed")]
    Aborted {
        /// The stopped peer.
        peer: PeerId,
        /// The peer that failed first.
        by: PeerId,
    },
    /// A peer's link to another closed before the run was complete.
    #[error("peer {peer}: link to {to} closed before the run completed")]
    Disconnected {
        /// The peer that noticed.
        peer: PeerId,
        /// The other end.
        to: PeerId,
    },
    /// A network operation failed (listen, dial, stream IO).
    #[error("{0}")]
    Net(String),
    /// A stream's handshake was refused.
    #[error("handshake with peer {peer} refused: {reason}")]
    Handshake {
        /// The other end.
        peer: PeerId,
        /// Why.
        reason: String,
    },
    /// A peer sent a frame that failed validation.
    #[error("bad frame from peer {peer}: {reason}")]
    BadFrame {
        /// The sender.
        peer: PeerId,
        /// What was wrong.
        reason: String,
    },
    /// The cluster is misconfigured.
    #[error("invalid cluster: {0}")]
    Config(String),
}

/// Result alias for sfb-net.
pub type Result<T, E = Error> = std::result::Result<T, E>;
