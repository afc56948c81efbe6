//! A peer's shard of the training data and its deterministic mini-batch sampler.

use std::collections::BTreeSet;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// The samples a peer owns, visited in a fresh seeded permutation each epoch.
#[derive(Debug, Clone)]
pub struct Shard<S> {
    samples: Vec<S>,
    order: Vec<usize>,
    pos: usize,
    epoch: u64,
    seed: u64,
}

impl<S> Shard<S> {
    /// A shard over `samples`; the permutation of epoch `e` is drawn from `(seed, e)`.
    pub fn new(samples: Vec<S>, seed: u64) -> Self {
        let mut s = Self {
            order: (0..samples.len()).collect(),
            samples,
            pos: 0,
            epoch: 0,
            seed,
        };
        s.shuffle();
        s
    }

    fn shuffle(&mut self) {
        let mut rng =
            ChaCha8Rng::seed_from_u64(self.seed ^ self.epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        self.order.sort_unstable();
        self.order.shuffle(&mut rng);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether the shard is empty.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// All samples, in storage order.
    pub fn samples(&self) -> &[S] {
        &self.samples
    }

    /// Where the sampler is (for checkpoints).
    pub fn sampler_state(&self) -> crate::checkpoint::SamplerState {
        crate::checkpoint::SamplerState {
            epoch: self.epoch,
            pos: self.pos,
            len: self.samples.len(),
        }
    }

    /// Puts the sampler where `state` says, so the next batches are those the checkpointed
    /// sampler would have drawn.
    ///
    /// # Errors
    /// [`Error::Checkpoint`](crate::Error::Checkpoint) if the shard has another number of
    /// samples (other data, or another sharding) or `pos` is past the permutation.
    pub fn restore_sampler(&mut self, state: crate::checkpoint::SamplerState) -> crate::Result<()> {
        if state.len != self.samples.len() || state.pos > self.samples.len() {
            return Err(crate::Error::Checkpoint {
                reason: format!(
                    "written for a shard of {} samples (position {}); this peer's shard has {}: \
                     other training data or another number of peers",
                    state.len,
                    state.pos,
                    self.samples.len()
                ),
            });
        }
        self.epoch = state.epoch;
        self.pos = state.pos;
        self.shuffle();
        Ok(())
    }

    /// Replaces the shard's samples (a lost peer's samples taken over, or given back when
    /// it rejoins; [`takeover_indices`]) and starts a new epoch over them: the permutation
    /// of an epoch is over one sample set, so the rest of the current one is not finished.
    /// Sample indices ([`next_batch_indexed`](Self::next_batch_indexed)) refer to the new
    /// set from then on.
    pub fn reassign(&mut self, samples: Vec<S>) {
        self.samples = samples;
        self.order = (0..self.samples.len()).collect();
        self.epoch += 1;
        self.pos = 0;
        self.shuffle();
    }

    /// The next `k` samples (fewer only if the shard is empty), crossing epochs as needed.
    pub fn next_batch(&mut self, k: usize) -> Vec<&S> {
        self.next_batch_indexed(k)
            .into_iter()
            .map(|(_, s)| s)
            .collect()
    }

    /// [`next_batch`](Self::next_batch) with each sample's index in
    /// [`samples`](Self::samples) (what [`Model::compute_sv_indexed`](crate::Model::compute_sv_indexed) gets).
    pub fn next_batch_indexed(&mut self, k: usize) -> Vec<(usize, &S)> {
        let mut idx = Vec::with_capacity(k);
        if self.samples.is_empty() {
            return Vec::new();
        }
        while idx.len() < k {
            if self.pos == self.order.len() {
                self.epoch += 1;
                self.pos = 0;
                self.shuffle();
            }
            idx.push(self.order[self.pos]);
            self.pos += 1;
        }
        idx.into_iter().map(|i| (i, &self.samples[i])).collect()
    }
}

/// The samples a peer trains on for a given set of lost peers (their shards taken over by
/// the survivors; [`Engine::with_takeover`](crate::Engine::with_takeover)), e.g. those of
/// [`takeover_indices`]. Called again whenever the set changes (a loss, a rejoin).
pub type ShardSource<S> = std::sync::Arc<dyn Fn(&BTreeSet<crate::PeerId>) -> Vec<S> + Send + Sync>;

/// Deterministic sharding: sample `i` goes to peer `i mod peers`.
pub fn shard_indices(n: usize, peers: usize, peer: usize) -> impl Iterator<Item = usize> {
    (peer..n).step_by(peers.max(1))
}

/// The samples (indices out of `n`) peer `me` of `peers` trains on once the peers in `lost`
/// are gone and the survivors take over their shards: its own ([`shard_indices`]) first,
/// then, of every lost peer's, each sample `i` whose `(i / peers)`-th turn among the
/// survivors (ascending ids, cyclically) falls on `me`. A function of the set alone, so
/// every survivor computes the same split whatever order it learned of the losses in, the
/// survivors' shares of a lost shard are disjoint and cover it, and an empty `lost` gives
/// back the original shard. Empty when `me` is itself in `lost` or every peer is.
pub fn takeover_indices(n: usize, peers: usize, me: usize, lost: &BTreeSet<usize>) -> Vec<usize> {
    let peers = peers.max(1);
    if lost.contains(&me) {
        return Vec::new();
    }
    let survivors: Vec<usize> = (0..peers).filter(|p| !lost.contains(p)).collect();
    let Some(rank) = survivors.iter().position(|&p| p == me) else {
        return Vec::new();
    };
    let mut mine: Vec<usize> = shard_indices(n, peers, me).collect();
    for &gone in lost.iter().filter(|&&g| g < peers) {
        mine.extend(
            shard_indices(n, peers, gone).filter(|i| (i / peers) % survivors.len() == rank),
        );
    }
    mine
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(v: &[usize]) -> BTreeSet<usize> {
        v.iter().copied().collect()
    }

    #[test]
    fn takeover_partitions_every_sample_among_the_survivors() {
        for (n, peers, lost) in [
            (103, 8, set(&[2])),
            (103, 8, set(&[2, 5])),
            (7, 4, set(&[0, 3])),
            (1000, 5, set(&[4])),
            (64, 8, set(&[1, 2, 3, 4, 5, 6])),
        ] {
            let mut seen = vec![0u32; n];
            let mut sizes = Vec::new();
            for me in (0..peers).filter(|p| !lost.contains(p)) {
                let mine = takeover_indices(n, peers, me, &lost);
                sizes.push(mine.len());
                for i in mine {
                    seen[i] += 1;
                }
            }
            assert!(
                seen.iter().all(|&c| c == 1),
                "n {n} P {peers} lost {lost:?}: {seen:?}"
            );
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= lost.len() + 1, "unbalanced: {sizes:?}");
        }
    }

    #[test]
    fn takeover_starts_with_the_own_shard_and_gives_it_back_when_nobody_is_lost() {
        let own: Vec<usize> = shard_indices(50, 4, 1).collect();
        assert_eq!(takeover_indices(50, 4, 1, &BTreeSet::new()), own);
        let grown = takeover_indices(50, 4, 1, &set(&[3]));
        assert_eq!(&grown[..own.len()], &own[..]);
        assert!(grown.len() > own.len());
        assert!(takeover_indices(50, 4, 3, &set(&[3])).is_empty());
    }

    #[test]
    fn a_reassigned_shard_draws_only_its_new_samples_from_a_new_epoch() {
        let mut s = Shard::new(vec![0, 1, 2, 3], 9);
        let _ = s.next_batch(3);
        s.reassign(vec![10, 11, 12, 13, 14, 15]);
        assert_eq!(s.sampler_state().epoch, 1);
        let mut drawn: Vec<i32> = s.next_batch(6).into_iter().copied().collect();
        drawn.sort_unstable();
        assert_eq!(drawn, vec![10, 11, 12, 13, 14, 15]);
    }
}
