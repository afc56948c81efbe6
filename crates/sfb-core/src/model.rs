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
/// from the peer's shard and calls `compute_sv` (through
/// [`compute_sv_indexed`](Model::compute_sv_indexed)) with a read view of W (`J × D`). The model
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

    /// [`compute_sv`](Model::compute_sv) with each sample's index in the peer's shard
    /// (`(index, sample)`, in the order drawn): what the engine calls. A model that keeps
    /// per-sample state (SAGA's table of last gradients, SDCA's duals) overrides it; the
    /// index is stable for the whole run and below the shard's length. A sample may appear
    /// twice in one batch (a batch that crosses an epoch boundary of a small shard).
    /// Default: drops the indices and calls `compute_sv`.
    ///
    /// # Errors
    /// As `compute_sv`.
    fn compute_sv_indexed(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[(usize, &Self::Sample)],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let samples: Vec<&Self::Sample> = batch.iter().map(|&(_, s)| s).collect();
        self.compute_sv(w, &samples, sv)
    }

    /// The model's own training state as bytes, for checkpoints: whatever `compute_sv`
    /// changes in `self` (SDCA's duals, SAGA's table, a sampler's position). A resumed run
    /// gets it back through [`restore_state`](Model::restore_state) and must then compute
    /// exactly what the checkpointed model would have. Default: none (a model whose
    /// `compute_sv` changes nothing of `self`).
    fn save_state(&self) -> Vec<u8> {
        Vec::new()
    }

    /// Restores what [`save_state`](Model::save_state) wrote. On an error the model must be
    /// unchanged.
    ///
    /// # Errors
    /// Bytes this model did not write (another model, another shard). Default: refuses
    /// anything but no state.
    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        if bytes.is_empty() {
            Ok(())
        } else {
            Err(ModelError::msg(format!(
                "the checkpoint holds {} bytes of model state, but this model keeps none \
                 (was it written by another model?)",
                bytes.len()
            )))
        }
    }

    /// The factors `compute_sv` would write for `batch` into `sv` for a `j × d` W, with
    /// their shapes and sizes but without the arithmetic (zeros where values would be
    /// computed): what a timing-only node sends
    /// ([`Config::timing_only`](crate::Config::timing_only)). Default: one dense pair of
    /// zeros per sample. A model whose pairs are sparse, or more than one per sample,
    /// overrides it so its frames have their real sizes.
    ///
    /// # Errors
    /// [`ModelError`] as from `compute_sv`.
    fn timing_sv(
        &mut self,
        (j, d): (usize, usize),
        batch: &[&Self::Sample],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let (u, v) = (vec![0.0; j], vec![0.0; d]);
        for _ in batch {
            sv.push_dense(&u, &v)?;
        }
        Ok(())
    }

    /// Projects W after each step's updates are applied (e.g. unit-norm columns). Default:
    /// no-op.
    fn prox(&mut self, w: ArrayViewMut2<'_, f32>) {
        let _ = w;
    }

    /// Whether a mini-batch's factors are the concatenation of its parts' factors: one pair
    /// per sample, each computed from W and its sample alone, so that `compute_sv` on a
    /// batch writes what `compute_sv` on each part in turn writes, and the batch's
    /// [`scale`](Model::scale) is that of its sample count. The engine may then compute a
    /// clock in parts and send each as it is computed
    /// ([`Config::send_parts`](crate::Config::send_parts)). Default: `false` (a model that
    /// couples the samples of a batch, keeps state across them, or writes extra pairs).
    fn separable(&self) -> bool {
        false
    }

    /// The scale given to the batch committed at `clock` holding `pairs` pairs, for
    /// learning rate `lr`. Default: `-lr / pairs` (an SGD step on the mean loss).
    fn scale(&self, clock: u64, lr: f32, pairs: usize) -> f32 {
        let _ = clock;
        if pairs == 0 { 0.0 } else { -lr / pairs as f32 }
    }
}

/// Held-out evaluation of a parameter matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The model's objective (lower is better), e.g. mean cross-entropy.
    pub objective: f64,
    /// Fraction classified correctly, for classifiers.
    pub accuracy: Option<f64>,
    /// Model-specific named figures (e.g. `duality_gap`), reported as extra keys of the
    /// run summary.
    pub extra: Extras,
}

impl Evaluation {
    /// An evaluation with no extra figures.
    pub fn new(objective: f64, accuracy: Option<f64>) -> Self {
        Self {
            objective,
            accuracy,
            extra: Extras::default(),
        }
    }

    /// Adds a named figure (see [`Extras::with`]).
    pub fn with(mut self, name: &'static str, value: f64) -> Self {
        self.extra = self.extra.with(name, value);
        self
    }
}

/// Named figures of an [`Evaluation`], in insertion order (as many as the model reports).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Extras {
    items: Vec<(&'static str, f64)>,
}

impl Extras {
    /// Adds `name = value`, replacing an earlier value of the same name.
    pub fn with(mut self, name: &'static str, value: f64) -> Self {
        match self.items.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.items.push((name, value)),
        }
        self
    }

    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// `(name, value)` pairs in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        self.items.iter().copied()
    }

    /// Number of figures.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The figures as an owned map (for reports).
    pub fn to_map(&self) -> std::collections::BTreeMap<String, f64> {
        self.iter().map(|(n, v)| (n.to_string(), v)).collect()
    }
}

/// Computes an [`Evaluation`] of W, typically on held-out data.
pub trait Evaluator: Send {
    /// Evaluates `w`.
    fn evaluate(&mut self, w: ArrayView2<'_, f32>) -> Evaluation;
}
