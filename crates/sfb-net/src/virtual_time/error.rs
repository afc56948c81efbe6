//! Why a virtual-time run failed.

use std::fmt;
use std::time::Duration;

use sfb_core::PeerId;

/// A node that could not make progress when the run stalled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The node.
    pub node: PeerId,
    /// Its clock (clocks completed).
    pub clock: u64,
    /// Whom it waits on, with the clocks each has delivered to it (its
    /// [`waiting_on`](sfb_core::StateMachine::waiting_on)).
    pub waiting_on: Vec<(PeerId, u64)>,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at clock {} waits on ", self.node, self.clock)?;
        if self.waiting_on.is_empty() {
            return write!(f, "nobody it can name");
        }
        for (i, (q, d)) in self.waiting_on.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{q} (delivered {d} clocks)")?;
        }
        Ok(())
    }
}

fn list(blocked: &[Blocked]) -> String {
    blocked
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Errors of a virtual-time run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No nodes were given.
    #[error("a virtual-time network needs at least one node")]
    NoNodes,
    /// Two nodes have the same id.
    #[error("two nodes are {node}")]
    DuplicateNode {
        /// The repeated id.
        node: PeerId,
    },
    /// A pause or loss names a node that is not in the network.
    #[error("the {what} names {node}, which is not in the network")]
    UnknownNode {
        /// The unknown id.
        node: PeerId,
        /// `pause` or `loss`.
        what: &'static str,
    },
    /// A restart that cannot happen as given.
    #[error("the restart of {node} {why}")]
    BadRestart {
        /// The node.
        node: PeerId,
        /// What is wrong.
        why: String,
    },
    /// The latency range is empty.
    #[error("latency range is empty: min {min:?} > max {max:?}")]
    InvalidLatency {
        /// Shortest delay.
        min: Duration,
        /// Longest delay.
        max: Duration,
    },
    /// A NIC rate is not a positive number of bytes per second.
    #[error("{side} rate must be a positive number of bytes per second, got {rate}")]
    InvalidRate {
        /// `egress` or `ingress`.
        side: &'static str,
        /// The rate given.
        rate: f64,
    },
    /// A transport CPU per frame that is not a number of seconds in 0..=1.
    #[error("transport cpu per frame must be in 0..=1 seconds, got {seconds}")]
    InvalidFrameCpu {
        /// The figure given.
        seconds: f64,
    },
    /// A host model with no nodes per host, or cores or threads not positive.
    #[error("hosts need at least 1 node each and positive cores and threads, got {hosts:?}")]
    InvalidHosts {
        /// The model given.
        hosts: super::Hosts,
    },
    /// A partition ends before it starts.
    #[error("a partition of {side:?} ends ({until:?}) before it starts ({from:?})")]
    InvalidPartition {
        /// Its side.
        side: Vec<PeerId>,
        /// Start.
        from: Duration,
        /// End.
        until: Duration,
    },
    /// A pause ends before it starts.
    #[error("pause of {node} ends ({until:?}) before it starts ({from:?})")]
    InvalidPause {
        /// The paused node.
        node: PeerId,
        /// Start.
        from: Duration,
        /// End.
        until: Duration,
    },
    /// A slow-link span that ends before it starts, or a factor below 1 or not finite.
    #[error(
        "slow links of {node}: factor {factor} from {from:?} until {until:?} (a factor of 1 \
         or more over a span that does not end before it starts)"
    )]
    InvalidSlow {
        /// The node.
        node: PeerId,
        /// The factor.
        factor: f64,
        /// Start.
        from: Duration,
        /// End.
        until: Duration,
    },
    /// A node refused a frame or failed a step.
    #[error("{node} at virtual time {at:?}: {source}")]
    Node {
        /// The failing node.
        node: PeerId,
        /// Its virtual time.
        at: Duration,
        /// The node's error.
        #[source]
        source: sfb_core::Error,
    },
    /// A node's driver loop failed for a reason of its own (not one of the node's
    /// protocol, which is [`Error::Node`]).
    #[error("{node} at virtual time {at:?}: {source}")]
    Loop {
        /// The failing node.
        node: PeerId,
        /// Its virtual time.
        at: Duration,
        /// The loop's error.
        #[source]
        source: Box<crate::Error>,
    },
    /// A node addressed a frame to a node that is not in the network.
    #[error("{from} at virtual time {at:?} sent a frame to {to}, which is not in the network")]
    UnknownDestination {
        /// The sender.
        from: PeerId,
        /// The missing receiver.
        to: PeerId,
        /// The sender's virtual time.
        at: Duration,
    },
    /// No frame is in flight, no node can step, and some node is not done: without the
    /// run ending, nothing would ever happen again.
    #[error("stalled at virtual time {at:?}: {}", list(blocked))]
    Stalled {
        /// Virtual time of the last event.
        at: Duration,
        /// Every node that is not done.
        blocked: Vec<Blocked>,
    },
    /// The run processed more events than [`Config::max_events`](super::Config::max_events)
    /// allows (or the limit is 0).
    #[error("event limit of {limit} reached at virtual time {at:?}")]
    EventLimit {
        /// The limit.
        limit: u64,
        /// Virtual time when it was reached.
        at: Duration,
    },
}
