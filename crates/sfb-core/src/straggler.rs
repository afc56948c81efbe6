//! Which node is slow when: a pure schedule that drivers turn into delay.
//!
//! The core never sleeps. A driver on real threads makes the delay real (its time
//! source sleeps in [`TimeSource::after`](crate::TimeSource::after) after the node's
//! compute); a virtual-time driver adds it to the node's virtual clock. Either way the delay
//! counts as the slow node's compute time, as it would on a slow machine.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::PeerId;

/// Injected slowness of a cluster's nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum Stragglers {
    /// Nobody is slowed down.
    #[default]
    None,
    /// Node `peer` is slowed by `delay` at every clock.
    Fixed {
        /// The slow node.
        peer: PeerId,
        /// Added to each of its steps.
        delay: Duration,
    },
    /// One node of `peers` per clock is slowed by `delay`, chosen by a seeded hash of the
    /// clock that every node computes alike: exactly one node straggles at each clock, a
    /// different one from clock to clock (a transient slowdown that moves around).
    Rotating {
        /// Number of nodes the slow one is drawn from.
        peers: u32,
        /// Added to the chosen node's step.
        delay: Duration,
        /// Seed of the schedule (the same on every node).
        seed: u64,
    },
}

impl Stragglers {
    /// The extra time node `peer` takes for its step at `clock`.
    ///
    /// # Complexity
    /// O(1).
    pub fn delay(&self, peer: PeerId, clock: u64) -> Duration {
        match *self {
            Self::None => Duration::ZERO,
            Self::Fixed { peer: p, delay } => {
                if p == peer {
                    delay
                } else {
                    Duration::ZERO
                }
            }
            Self::Rotating { peers, delay, seed } => {
                if peers > 0 && u64::from(peer.0) == splitmix(seed, clock) % u64::from(peers) {
                    delay
                } else {
                    Duration::ZERO
                }
            }
        }
    }

    /// Whether any node is ever slowed.
    pub fn is_none(&self) -> bool {
        match self {
            Self::None => true,
            Self::Fixed { delay, .. } | Self::Rotating { delay, .. } => delay.is_zero(),
        }
    }
}

/// SplitMix64 of `(seed, step)`.
fn splitmix(seed: u64, step: u64) -> u64 {
    let mut z = seed ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotating_schedule_picks_exactly_one_peer_per_clock_and_moves() {
        let s = Stragglers::Rotating {
            peers: 5,
            delay: Duration::from_millis(3),
            seed: 7,
        };
        let mut counts = [0u32; 5];
        for clock in 0..1000 {
            let slow: Vec<u32> = (0..5)
                .filter(|&id| !s.delay(PeerId(id), clock).is_zero())
                .collect();
            assert_eq!(slow.len(), 1, "clock {clock}: {slow:?}");
            counts[slow[0] as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (150..250).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn fixed_slows_only_its_peer() {
        let s = Stragglers::Fixed {
            peer: PeerId(2),
            delay: Duration::from_millis(4),
        };
        assert_eq!(s.delay(PeerId(2), 9), Duration::from_millis(4));
        assert_eq!(s.delay(PeerId(1), 9), Duration::ZERO);
        assert!(Stragglers::None.is_none());
        assert!(!s.is_none());
    }
}
