//! Consistency models: when may a peer start its next clock?

use std::fmt::Debug;
use std::str::FromStr;
use std::sync::Arc;

use crate::PeerId;

/// What one in-neighbour looks like from a peer about to start clock `t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeerStatus {
    /// The in-neighbour.
    pub peer: PeerId,
    /// Clocks delivered by it so far (`τ`): batches `0..τ` have arrived.
    pub delivered: u64,
    /// Its mean iteration time in seconds, as it last reported.
    pub mean_iter_s: f64,
    /// Whether it has delivered every clock before `t` (`τ ≥ t`).
    pub ready: bool,
}

/// The status table a [`Barrier`] decides on.
#[derive(Debug, Clone, Copy)]
pub struct StatusView<'a> {
    /// The deciding peer.
    pub me: PeerId,
    /// The clock it wants to start.
    pub clock: u64,
    /// Its in-neighbours.
    pub peers: &'a [PeerStatus],
}

impl StatusView<'_> {
    /// Number of in-neighbours that are ready.
    pub fn ready_count(&self) -> usize {
        self.peers.iter().filter(|p| p.ready).count()
    }
}

/// A custom barrier predicate (ASYNC-style): `true` lets the peer start its next clock.
pub trait Barrier: Send + Sync + Debug {
    /// Decides from the status table.
    fn may_start(&self, view: &StatusView<'_>) -> bool;
}

/// ASYNC's throttled release: go when at least `min_ready` in-neighbours have delivered
/// every earlier clock (all of them, if there are fewer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottledRelease {
    /// How many ready in-neighbours release the barrier.
    pub min_ready: usize,
}

impl Barrier for ThrottledRelease {
    fn may_start(&self, view: &StatusView<'_>) -> bool {
        view.ready_count() >= self.min_ready.min(view.peers.len())
    }
}

/// When a peer may start clock `t`, and which received updates it applies first.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Consistency {
    /// Bulk synchronous: wait for every in-neighbour's batch of clock `t − 1`.
    Bsp,
    /// Stale synchronous (SSP-SFB): peer at clock `t` waits while an in-neighbour has
    /// delivered fewer than `t − staleness` clocks.
    Ssp {
        /// The staleness bound `s`.
        staleness: u64,
    },
    /// Never wait; apply whatever has arrived.
    Async,
    /// A user predicate over the status table.
    Custom(Arc<dyn Barrier>),
}

impl Consistency {
    /// SSP's staleness bound (`Some(0)` for BSP), `None` when unbounded.
    pub fn staleness_bound(&self) -> Option<u64> {
        match self {
            Consistency::Bsp => Some(0),
            Consistency::Ssp { staleness } => Some(*staleness),
            Consistency::Async | Consistency::Custom(_) => None,
        }
    }

    /// Whether a peer may start `view.clock`.
    ///
    /// Under SSP(s) every in-neighbour must have delivered at least `t − s` clocks; the
    /// sum `delivered + s` saturates, so a bound as large as `u64::MAX` means "never wait"
    /// rather than wrapping around to a bound nobody meets.
    pub fn may_start(&self, view: &StatusView<'_>) -> bool {
        match self.staleness_bound() {
            Some(s) => view
                .peers
                .iter()
                .all(|p| p.delivered.saturating_add(s) >= view.clock),
            None => match self {
                Consistency::Custom(b) => b.may_start(view),
                _ => true,
            },
        }
    }

    /// Whether received batches from clocks at or after the peer's own are applied early
    /// (only under Async; the synchronous models apply clock `c` only after computing `c`,
    /// which keeps BSP replicas bitwise identical).
    pub fn applies_future(&self) -> bool {
        matches!(self, Consistency::Async)
    }
}

impl std::fmt::Display for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Consistency::Bsp => write!(f, "bsp"),
            Consistency::Ssp { staleness } => write!(f, "ssp:{staleness}"),
            Consistency::Async => write!(f, "async"),
            Consistency::Custom(b) => write!(f, "custom({b:?})"),
        }
    }
}

/// Error parsing a consistency name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown consistency model {0:?}: expected bsp, ssp:S, async or throttle:K")]
pub struct ParseConsistencyError(pub String);

impl FromStr for Consistency {
    type Err = ParseConsistencyError;

    /// Parses `bsp`, `ssp:S`, `async`, `throttle:K` (throttled release at K ready peers).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseConsistencyError(s.to_string());
        let lower = s.trim().to_ascii_lowercase();
        let (name, arg) = match lower.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (lower.as_str(), None),
        };
        match (name, arg) {
            ("bsp", None) => Ok(Consistency::Bsp),
            ("async", None) => Ok(Consistency::Async),
            ("ssp", Some(a)) => Ok(Consistency::Ssp {
                staleness: a.parse().map_err(|_| err())?,
            }),
            ("throttle" | "throttled", Some(a)) => {
                Ok(Consistency::Custom(Arc::new(ThrottledRelease {
                    min_ready: a.parse().map_err(|_| err())?,
                })))
            }
            _ => Err(err()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(clock: u64, delivered: &[u64]) -> Vec<PeerStatus> {
        delivered
            .iter()
            .enumerate()
            .map(|(i, &d)| PeerStatus {
                peer: PeerId(i as u32),
                delivered: d,
                mean_iter_s: 0.0,
                ready: d >= clock,
            })
            .collect()
    }

    fn may_start(c: &Consistency, clock: u64, delivered: &[u64]) -> bool {
        let peers = view(clock, delivered);
        c.may_start(&StatusView {
            me: PeerId(0),
            clock,
            peers: &peers,
        })
    }

    #[test]
    fn ssp_waits_for_the_slowest_in_neighbour_within_the_bound() {
        let ssp = Consistency::Ssp { staleness: 2 };
        assert!(may_start(&ssp, 5, &[3, 9]));
        assert!(!may_start(&ssp, 5, &[2, 9]));
        assert!(may_start(&Consistency::Bsp, 5, &[5, 5]));
        assert!(!may_start(&Consistency::Bsp, 5, &[4, 5]));
    }

    #[test]
    fn huge_staleness_saturates_instead_of_wrapping() {
        // `delivered + s` would wrap to a small number and block forever.
        let ssp = Consistency::Ssp {
            staleness: u64::MAX,
        };
        assert!(may_start(&ssp, 1, &[1, 0]));
        assert!(may_start(&ssp, u64::MAX, &[0, u64::MAX]));
        assert!(may_start(&ssp, u64::MAX, &[u64::MAX, u64::MAX]));
        let near = Consistency::Ssp {
            staleness: u64::MAX - 1,
        };
        assert!(may_start(&near, 3, &[2, 7]));
        assert!(may_start(&near, u64::MAX, &[1]));
        assert!(!may_start(&near, u64::MAX, &[0]));
    }
}
