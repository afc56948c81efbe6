//! A model wrapper that makes a peer slow, for straggler experiments.

use std::time::Duration;

use ndarray::{ArrayView2, ArrayViewMut2};
use sfb_core::{Model, ModelError, SvList};

/// When a [`Straggler`] is slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Every step.
    Always,
    /// One peer of `peers` per step, chosen by a seeded hash of the step number that every
    /// peer computes alike: exactly one peer straggles at each clock, a different one from
    /// clock to clock (a transient slowdown that moves around the cluster).
    Rotating {
        /// This peer's index.
        id: u32,
        /// Number of peers.
        peers: u32,
        /// Seed of the schedule (the same on every peer).
        seed: u64,
    },
}

impl Schedule {
    /// Whether the peer is slow at `step` (0-based).
    pub fn slow_at(&self, step: u64) -> bool {
        match *self {
            Self::Always => true,
            Self::Rotating { id, peers, seed } => {
                // SplitMix64 of (seed, step).
                let mut z = seed ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                peers > 0 && z % u64::from(peers) == u64::from(id)
            }
        }
    }
}

/// Wraps a model and adds `delay` to `compute_sv` on the steps its [`Schedule`] picks (an
/// injected delay, as a slow machine would have). The delay is real time spent in the
/// caller's thread.
#[derive(Debug, Clone)]
pub struct Straggler<M> {
    inner: M,
    delay: Duration,
    schedule: Schedule,
    step: u64,
}

impl<M> Straggler<M> {
    /// `inner`, slowed by `delay` on every step.
    pub fn new(inner: M, delay: Duration) -> Self {
        Self::with_schedule(inner, delay, Schedule::Always)
    }

    /// `inner`, slowed by `delay` on the steps `schedule` picks.
    pub fn with_schedule(inner: M, delay: Duration, schedule: Schedule) -> Self {
        Self {
            inner,
            delay,
            schedule,
            step: 0,
        }
    }
}

impl<M: Model> Model for Straggler<M> {
    type Sample = M::Sample;

    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let r = self.inner.compute_sv(w, batch, sv);
        if !self.delay.is_zero() && self.schedule.slow_at(self.step) {
            std::thread::sleep(self.delay);
        }
        self.step += 1;
        r
    }

    fn prox(&mut self, w: ArrayViewMut2<'_, f32>) {
        self.inner.prox(w);
    }

    fn scale(&self, clock: u64, lr: f32, pairs: usize) -> f32 {
        self.inner.scale(clock, lr, pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::Schedule;

    #[test]
    fn rotating_schedule_picks_exactly_one_peer_per_step_and_moves() {
        let peers = 5u32;
        let mut counts = [0u32; 5];
        for step in 0..1000 {
            let slow: Vec<u32> = (0..peers)
                .filter(|&id| Schedule::Rotating { id, peers, seed: 7 }.slow_at(step))
                .collect();
            assert_eq!(slow.len(), 1, "step {step}: {slow:?}");
            counts[slow[0] as usize] += 1;
        }
        // Every peer straggles about a fifth of the time.
        assert!(
            counts.iter().all(|&c| (150..250).contains(&c)),
            "{counts:?}"
        );
        assert!(Schedule::Always.slow_at(3));
    }
}
