//! A peer's shard of the training data and its deterministic mini-batch sampler.

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

/// Deterministic sharding: sample `i` goes to peer `i mod peers`.
pub fn shard_indices(n: usize, peers: usize, peer: usize) -> impl Iterator<Item = usize> {
    (peer..n).step_by(peers.max(1))
}
