//! A model wrapper that makes a peer slow, for straggler experiments.

use std::time::Duration;

use ndarray::{ArrayView2, ArrayViewMut2};
use sfb_core::{Model, ModelError, SvList};

/// Wraps a model and adds `delay` to every `compute_sv` (an injected per-step delay, as a
/// slow machine would have). The delay is real time spent in the caller's thread.
#[derive(Debug, Clone)]
pub struct Straggler<M> {
    inner: M,
    delay: Duration,
}

impl<M> Straggler<M> {
    /// `inner`, slowed by `delay` per step.
    pub fn new(inner: M, delay: Duration) -> Self {
        Self { inner, delay }
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
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        r
    }

    fn prox(&mut self, w: ArrayViewMut2<'_, f32>) {
        self.inner.prox(w);
    }

    fn scale(&self, clock: u64, lr: f32, pairs: usize) -> f32 {
        self.inner.scale(clock, lr, pairs)
    }
}
