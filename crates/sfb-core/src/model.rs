//! The user-facing model trait.

use ndarray::{ArrayView2, ArrayViewMut2};

use crate::{ModelError, SvList};

/// A matrix-parametrized model trained by sufficient factors.
///
/// Implement [`compute_sv`](Model::compute_sv); everything else has a default. The engine
/// owns sending, receiving, applying and waiting.
///
/// # When things are called
/// Once per clock, after every update that the consistency model requires has been applied
/// to the local replica (and [`prox`](Model::prox) has run), the engine draws a mini-batch
/// from the peer's shard and calls `compute_sv` with a read view of W (`J × D`). The model
/// pushes one `(u, v)` pair per sample (or per term of its gradient) into `sv`; `u` must
/// have length `J`, `v` length `D` (dense) or indices `< D` (sparse). At the end of the
/// iteration the engine commits the list into a batch with scale
/// [`scale`](Model::scale), so the update applied everywhere is
/// `W += scale · Σ_i u_i v_iᵀ`.
///
/// # Errors
/// An `Err` from `compute_sv` stops this peer's run with [`Error::Model`](crate::Error::Model);
/// nothing of that iteration is sent or applied. Non-finite factors are caught by the
/// engine in the same way.
///
/// # Example
/// ```
/// use ndarray::ArrayView2;
/// use sfb_core::{Model, ModelError, SvList};
///
/// /// Multi-output least squares: loss ½‖W x − y‖², gradient (W x − y) xᵀ.
/// struct LeastSquares;
///
/// impl Model for LeastSquares {
///     type Sample = (Vec<f32>, Vec<f32>); // (x ∈ R^D, y ∈ R^J)
///     fn compute_sv(
///         &mut self,
///         w: ArrayView2<'_, f32>,
///         batch: &[&Self::Sample],
///         sv: &mut SvList,
///     ) -> Result<(), ModelError> {
///         for (x, y) in batch {
///             let residual: Vec<f32> = w
///                 .rows()
///                 .into_iter()
///                 .zip(y)
///                 .map(|(row, yj)| row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>() - yj)
///                 .collect();
///             sv.push_dense(&residual, x)?;
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Model: Send {
    /// One training example.
    type Sample: Send + Sync;

    /// Writes one `(u, v)` pair per sample of `batch` into `sv`, given the current W.
    ///
    /// # Errors
    /// Any error ends the peer's run; see the trait docs.
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut SvList,
    ) -> Result<(), ModelError>;

    /// Projects W after each step's updates are applied (e.g. unit-norm columns). Default:
    /// no-op.
    fn prox(&mut self, w: ArrayViewMut2<'_, f32>) {
        let _ = w;
    }

    /// The scale given to the batch committed at `clock` holding `pairs` pairs, for
    /// learning rate `lr`. Default: `-lr / pairs` (an SGD step on the mean loss).
    fn scale(&self, clock: u64, lr: f32, pairs: usize) -> f32 {
        let _ = clock;
        if pairs == 0 { 0.0 } else { -lr / pairs as f32 }
    }
}

/// Held-out evaluation of a parameter matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation {
    /// The model's objective (lower is better), e.g. mean cross-entropy.
    pub objective: f64,
    /// Fraction classified correctly, for classifiers.
    pub accuracy: Option<f64>,
}

/// Computes an [`Evaluation`] of W, typically on held-out data.
pub trait Evaluator: Send {
    /// Evaluates `w`.
    fn evaluate(&mut self, w: ArrayView2<'_, f32>) -> Evaluation;
}
