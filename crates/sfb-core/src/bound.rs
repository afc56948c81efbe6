//! A bound on the size of the steps a peer takes from others: the one check of a batch's
//! *values* beyond shapes and finiteness.
//!
//! # What is trusted
//! A peer that passes the handshake has the run's key, the run's settings (the agreement
//! digest: model, shapes, data identity, seed scheme, optimizer and its step size,
//! consistency, schedule) and, the handshake cannot tell more, is trusted to run the same
//! code on them: its factors are applied as it sends them, scale included. What a receiver
//! still checks of every batch is its shape, that every value is finite, and this bound: a
//! batch whose step is far larger than every step this peer has accepted lately is the
//! sender's fault (a peer whose code or memory went wrong, a step size the agreement did
//! not see), and the sender is shut out as a bad frame's is ([`crate::Error::StepTooLarge`];
//! the link is closed and the run's peer-loss policy decides).
//!
//! # The rule
//! A batch's step size is `|scale| · Σᵢ ‖uᵢ‖ ‖vᵢ‖`, an upper bound of the Frobenius norm of
//! `scale · Σᵢ uᵢ vᵢᵀ` ([`FactorBatch::step_norm`], O(K(J + D))). The reference is the
//! largest step size of the batches accepted (this peer's own included) in the last
//! [`WINDOW`] clocks; a batch more than `bound` times the reference is refused. Nothing is
//! refused before the first accepted batch, nor against a reference of 0.
//!
//! It catches gross faults only: a step size 10× the run's is accepted at the default
//! bound of [`DEFAULT_STEP_BOUND`]. Measured on healthy runs, the largest ratio of a batch
//! to its reference stays far below it (the summary's `max_step_ratio`, see the docs of
//! fault tolerance for the figures).

use std::collections::VecDeque;

use crate::{Error, FactorBatch, Result};

/// Default [`crate::Config::step_bound`]: a batch more than 1,000 times the largest step
/// accepted in the last [`WINDOW`] clocks is refused.
pub const DEFAULT_STEP_BOUND: f32 = 1000.0;

/// Clocks whose accepted batches make the reference.
pub const WINDOW: u64 = 8;

/// The bound of one peer: the largest accepted step size of each of the last [`WINDOW`]
/// clocks.
#[derive(Debug, Clone, Default)]
pub struct StepBound {
    bound: Option<f64>,
    /// `(clock, largest accepted step size of that clock)`, clocks increasing.
    recent: VecDeque<(u64, f64)>,
    /// The largest ratio of an accepted batch's step size to its reference.
    max_ratio: f64,
}

impl StepBound {
    /// A bound of `bound` times the reference; `None`: every batch is accepted (the
    /// ratios are still measured).
    pub fn new(bound: Option<f32>) -> Self {
        Self {
            bound: bound.map(f64::from),
            ..Self::default()
        }
    }

    /// The largest step size accepted in the window, if any is above 0.
    pub fn reference(&self) -> Option<f64> {
        self.recent
            .iter()
            .map(|&(_, n)| n)
            .fold(None, |m: Option<f64>, n| Some(m.map_or(n, |m| m.max(n))))
            .filter(|&r| r > 0.0)
    }

    /// The largest ratio of an accepted batch to its reference so far.
    pub fn max_ratio(&self) -> f64 {
        self.max_ratio
    }

    /// Checks `batch` from `from` against the bound and, accepted, counts it in the
    /// reference. This peer's own batches go through [`accept`](Self::accept).
    ///
    /// # Errors
    /// [`Error::StepTooLarge`] (nothing is counted).
    pub fn check(&mut self, from: crate::PeerId, batch: &FactorBatch) -> Result<()> {
        let norm = batch.step_norm();
        if let Some(reference) = self.reference() {
            let ratio = norm / reference;
            if let Some(bound) = self.bound
                && ratio > bound
            {
                return Err(Error::StepTooLarge {
                    from,
                    origin: batch.origin,
                    clock: batch.clock,
                    norm,
                    reference,
                    bound,
                });
            }
            self.max_ratio = self.max_ratio.max(ratio);
        }
        self.accept(batch.clock, norm);
        Ok(())
    }

    /// Counts an accepted step size of `clock` (this peer's own batch, or one checked).
    pub fn accept(&mut self, clock: u64, norm: f64) {
        if !norm.is_finite() {
            return;
        }
        match self.recent.iter_mut().find(|(c, _)| *c == clock) {
            Some((_, n)) => *n = n.max(norm),
            None => {
                let at = self.recent.partition_point(|&(c, _)| c < clock);
                self.recent.insert(at, (clock, norm));
            }
        }
        let newest = self.recent.back().map_or(0, |&(c, _)| c);
        while self
            .recent
            .front()
            .is_some_and(|&(c, _)| c + WINDOW <= newest)
        {
            self.recent.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PeerId, VFactors};

    fn batch(clock: u64, scale: f32, u: f32) -> FactorBatch {
        FactorBatch {
            origin: PeerId(1),
            clock,
            scale,
            j: 2,
            d: 2,
            u: vec![u, 0.0, 0.0, u],
            v: VFactors::Dense(vec![3.0, 4.0, 0.0, 1.0]),
        }
    }

    #[test]
    fn the_step_norm_bounds_the_update_s_frobenius_norm() {
        let b = batch(0, -0.5, 2.0);
        // |−0.5| · (2·5 + 2·1) = 6.
        assert!((b.step_norm() - 6.0).abs() < 1e-12);
        // The update: −0.5·(2·[3 4; 0 0] + 2·[0 0; 0 1]) = [−3 −4; 0 −1], norm √26 ≤ 6.
        assert!(26f64.sqrt() <= b.step_norm());
    }

    #[test]
    fn a_batch_far_above_every_recent_step_is_refused_and_not_counted() {
        let mut s = StepBound::new(Some(1000.0));
        // Nothing to compare with: the first batch is accepted whatever its size.
        s.check(PeerId(1), &batch(0, -1e6, 1.0)).unwrap();
        let mut s = StepBound::new(Some(1000.0));
        s.accept(0, batch(0, -0.1, 1.0).step_norm());
        s.check(PeerId(1), &batch(0, -10.0, 1.0)).unwrap();
        assert!((s.max_ratio() - 100.0).abs() < 1e-4, "{}", s.max_ratio());
        let e = s.check(PeerId(2), &batch(1, -1e30, 1.0)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::StepTooLarge {
                    from: PeerId(2),
                    clock: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("p2"), "{e}");
        // The refused batch is not part of the reference.
        assert!((s.reference().unwrap() - batch(0, -10.0, 1.0).step_norm()).abs() < 1e-6);
        // Without a bound the same batch is accepted, and measured.
        let mut off = StepBound::new(None);
        off.accept(0, 1.0);
        off.check(PeerId(2), &batch(1, -1e30, 1.0)).unwrap();
        assert!(off.max_ratio() > 1e29);
    }

    #[test]
    fn the_reference_is_the_largest_step_of_the_last_clocks() {
        let mut s = StepBound::new(Some(10.0));
        s.accept(0, 100.0);
        for c in 1..WINDOW {
            s.accept(c, 1.0);
        }
        assert_eq!(s.reference(), Some(100.0));
        // Clock 0 leaves the window: steps shrink as training converges, and so does the
        // reference.
        s.accept(WINDOW, 1.0);
        assert_eq!(s.reference(), Some(1.0));
        assert!(s.check(PeerId(1), &batch(WINDOW, -50.0, 1.0)).is_err());
        // A reference of 0 (every step so far empty) refuses nothing.
        let mut z = StepBound::new(Some(10.0));
        z.accept(0, 0.0);
        z.check(PeerId(1), &batch(0, -1.0, 1.0)).unwrap();
    }
}
