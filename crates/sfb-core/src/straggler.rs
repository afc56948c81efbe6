//! Which node is slow when: a pure schedule that drivers turn into delay.
//!
//! Besides a fixed or rotating extra delay, the two patterns of the ASYNC paper (Soori et
//! al., "ASYNC: A Cloud Engine with Asynchrony and History for Distributed Machine
//! Learning", IPDPS 2020) are relative to a node's own compute time: the *controlled
//! delay* pattern slows one chosen node by a given intensity (100% = its steps take twice
//! as long), the *production cluster* pattern (after Garraghan et al.'s traces) makes about
//! 25% of the nodes straggle for the whole run, 80% of them taking 150–250% of their
//! normal step time and the other 20% 250% up to 10×, all drawn from a seed.
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
    /// ASYNC's controlled delay: node `peer`'s compute takes `1 + percent / 100` times as
    /// long as it would (`percent` = the intensity: 100 doubles it).
    Controlled {
        /// The slow node.
        peer: PeerId,
        /// Extra compute time, in percent of the node's own.
        percent: u32,
    },
    /// ASYNC's production-cluster stragglers among `peers` nodes: a seeded
    /// [`production_stragglers`] of them (about 25%) are slow for the whole run, each by a
    /// factor of its own ([`production_factor`]).
    Production {
        /// Number of nodes.
        peers: u32,
        /// Seed of who straggles and by how much (the same on every node).
        seed: u64,
    },
}

/// How many of `peers` nodes straggle in the production-cluster pattern: 25%, rounded to
/// the nearest (at least one of two or more).
pub fn production_stragglers(peers: u32) -> u32 {
    if peers < 2 {
        return 0;
    }
    ((peers + 2) / 4).max(1)
}

/// Node `peer`'s slowdown in the production-cluster pattern of `peers` nodes seeded with
/// `seed`: `None` for a node that does not straggle; else the factor its step time is
/// multiplied by — uniform in [1.5, 2.5] for 80% of the stragglers, in [2.5, 10] for the
/// long tail. Who straggles is a seeded permutation of the nodes (exactly
/// [`production_stragglers`] of them).
///
/// # Complexity
/// O(log peers).
pub fn production_factor(peers: u32, seed: u64, peer: PeerId) -> Option<f64> {
    if peer.0 >= peers {
        return None;
    }
    let n = u64::from(peers);
    // An affine permutation i ↦ (a·i + b) mod n with a coprime to n.
    let mut a = splitmix(seed, 1) % n;
    while gcd(a, n) != 1 {
        a = (a + 1) % n;
    }
    let b = splitmix(seed, 2) % n;
    let rank = (a * u64::from(peer.0) + b) % n;
    if rank >= u64::from(production_stragglers(peers)) {
        return None;
    }
    let unit =
        |salt: u64| (splitmix(seed ^ salt, u64::from(peer.0)) >> 11) as f64 / (1u64 << 53) as f64;
    Some(if unit(0x7461_696c) < 0.8 {
        1.5 + unit(0x6d69_6464)
    } else {
        2.5 + 7.5 * unit(0x6c6f_6e67)
    })
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Stragglers {
    /// The extra time node `peer` takes for its step at `clock`, whose compute took
    /// `compute` (what the relative patterns scale).
    ///
    /// # Complexity
    /// O(1); O(log P) for the production pattern.
    pub fn delay(&self, peer: PeerId, clock: u64, compute: Duration) -> Duration {
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
            Self::Controlled { peer: p, percent } => {
                if p == peer {
                    compute.mul_f64(f64::from(percent) / 100.0)
                } else {
                    Duration::ZERO
                }
            }
            Self::Production { peers, seed } => production_factor(peers, seed, peer)
                .map_or(Duration::ZERO, |f| compute.mul_f64(f - 1.0)),
        }
    }

    /// Whether any node is ever slowed.
    pub fn is_none(&self) -> bool {
        match self {
            Self::None => true,
            Self::Fixed { delay, .. } | Self::Rotating { delay, .. } => delay.is_zero(),
            Self::Controlled { percent, .. } => *percent == 0,
            Self::Production { peers, .. } => production_stragglers(*peers) == 0,
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
                .filter(|&id| !s.delay(PeerId(id), clock, Duration::ZERO).is_zero())
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
        assert_eq!(s.delay(PeerId(2), 9, MS), Duration::from_millis(4));
        assert_eq!(s.delay(PeerId(1), 9, MS), Duration::ZERO);
        assert!(Stragglers::None.is_none());
        assert!(!s.is_none());
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn controlled_delay_scales_the_chosen_nodes_own_compute_time() {
        let s = Stragglers::Controlled {
            peer: PeerId(1),
            percent: 150,
        };
        assert_eq!(s.delay(PeerId(1), 3, 8 * MS), 12 * MS);
        assert_eq!(s.delay(PeerId(0), 3, 8 * MS), Duration::ZERO);
        assert!(!s.is_none());
        assert!(
            Stragglers::Controlled {
                peer: PeerId(1),
                percent: 0
            }
            .is_none()
        );
    }

    #[test]
    fn production_pattern_has_a_quarter_of_stragglers_with_the_papers_factors() {
        for peers in [2u32, 4, 7, 8, 64, 256, 1000] {
            for seed in 0..20 {
                let factors: Vec<f64> = (0..peers)
                    .filter_map(|p| production_factor(peers, seed, PeerId(p)))
                    .collect();
                assert_eq!(
                    factors.len() as u32,
                    production_stragglers(peers),
                    "{peers}"
                );
                assert!(
                    factors.iter().all(|f| (1.5..=10.0).contains(f)),
                    "{factors:?}"
                );
            }
        }
        assert_eq!(production_stragglers(256), 64);
        assert_eq!(production_stragglers(1), 0);
        // Over many nodes: 80% of the stragglers in [1.5, 2.5], the rest in the long tail.
        let f: Vec<f64> = (0..100_000)
            .filter_map(|p| production_factor(100_000, 3, PeerId(p)))
            .collect();
        let mid = f.iter().filter(|&&x| x <= 2.5).count() as f64 / f.len() as f64;
        assert!((0.78..0.82).contains(&mid), "{mid}");
        let tail_mean = f.iter().filter(|&&x| x > 2.5).sum::<f64>()
            / f.iter().filter(|&&x| x > 2.5).count() as f64;
        assert!((6.0..6.5).contains(&tail_mean), "{tail_mean}");
        // Different seeds pick different nodes; the same seed the same ones.
        let who = |seed| -> Vec<u32> {
            (0..64)
                .filter(|&p| production_factor(64, seed, PeerId(p)).is_some())
                .collect()
        };
        assert_eq!(who(5), who(5));
        assert_ne!(who(5), who(6));
        let s = Stragglers::Production { peers: 64, seed: 5 };
        let p = who(5)[0];
        let f = production_factor(64, 5, PeerId(p)).unwrap();
        assert_eq!(s.delay(PeerId(p), 0, 10 * MS), (10 * MS).mul_f64(f - 1.0));
    }
}
