//! Choosing a model at run time: [`ModelSpec`] builds any built-in model as an
//! [`AnyModel`], with its starting matrix and its evaluator, over the shared sample type
//! [`Example`].

use std::sync::Arc;

use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use sfb_core::{Evaluator, Model, ModelError, SvList};

use crate::data::LabelMap;
use crate::{
    Dml, DmlEvaluator, Error, Example, L2Mlr, L2MlrEvaluator, Limits, Mlr, MlrEvaluator,
    PrimalEvaluator, Result, Saga, SparseCoding, SparseCodingEvaluator, dml, sparse_coding,
    synthetic,
};

/// Any built-in model, dispatching every [`Model`] method to the one inside.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyModel {
    /// Multiclass logistic regression by SGD.
    Mlr(Mlr),
    /// L2-regularized MLR by SDCA.
    L2Mlr(L2Mlr),
    /// Distance metric learning (boxed: it holds its pair sampler's state).
    Dml(Box<Dml>),
    /// Sparse coding.
    SparseCoding(SparseCoding),
    /// MLR (optionally L2-regularized) by SAGA: run with [`sfb_core::Method::Saga`].
    Saga(Saga),
}

impl Model for AnyModel {
    type Sample = Example;

    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        match self {
            AnyModel::Mlr(m) => m.compute_sv(w, batch, sv),
            AnyModel::L2Mlr(m) => m.compute_sv(w, batch, sv),
            AnyModel::Dml(m) => m.compute_sv(w, batch, sv),
            AnyModel::SparseCoding(m) => m.compute_sv(w, batch, sv),
            AnyModel::Saga(m) => m.compute_sv(w, batch, sv),
        }
    }

    fn separable(&self) -> bool {
        match self {
            AnyModel::Mlr(m) => m.separable(),
            AnyModel::L2Mlr(m) => m.separable(),
            AnyModel::Dml(m) => m.separable(),
            AnyModel::SparseCoding(m) => m.separable(),
            AnyModel::Saga(m) => m.separable(),
        }
    }

    fn compute_sv_indexed(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[(usize, &Example)],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        match self {
            AnyModel::Mlr(m) => m.compute_sv_indexed(w, batch, sv),
            AnyModel::L2Mlr(m) => m.compute_sv_indexed(w, batch, sv),
            AnyModel::Dml(m) => m.compute_sv_indexed(w, batch, sv),
            AnyModel::SparseCoding(m) => m.compute_sv_indexed(w, batch, sv),
            AnyModel::Saga(m) => m.compute_sv_indexed(w, batch, sv),
        }
    }

    fn save_state(&self) -> Vec<u8> {
        match self {
            AnyModel::Mlr(m) => m.save_state(),
            AnyModel::L2Mlr(m) => m.save_state(),
            AnyModel::Dml(m) => m.save_state(),
            AnyModel::SparseCoding(m) => m.save_state(),
            AnyModel::Saga(m) => m.save_state(),
        }
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        match self {
            AnyModel::Mlr(m) => m.restore_state(bytes),
            AnyModel::L2Mlr(m) => m.restore_state(bytes),
            AnyModel::Dml(m) => m.restore_state(bytes),
            AnyModel::SparseCoding(m) => m.restore_state(bytes),
            AnyModel::Saga(m) => m.restore_state(bytes),
        }
    }

    fn timing_sv(
        &mut self,
        dim: (usize, usize),
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        match self {
            AnyModel::Mlr(m) => m.timing_sv(dim, batch, sv),
            AnyModel::L2Mlr(m) => m.timing_sv(dim, batch, sv),
            AnyModel::Dml(m) => m.timing_sv(dim, batch, sv),
            AnyModel::SparseCoding(m) => m.timing_sv(dim, batch, sv),
            AnyModel::Saga(m) => m.timing_sv(dim, batch, sv),
        }
    }

    fn prox(&mut self, w: ArrayViewMut2<'_, f32>) {
        match self {
            AnyModel::Mlr(m) => m.prox(w),
            AnyModel::L2Mlr(m) => m.prox(w),
            AnyModel::Dml(m) => m.prox(w),
            AnyModel::SparseCoding(m) => m.prox(w),
            AnyModel::Saga(m) => m.prox(w),
        }
    }

    fn scale(&self, clock: u64, lr: f32, pairs: usize) -> f32 {
        match self {
            AnyModel::Mlr(m) => m.scale(clock, lr, pairs),
            AnyModel::L2Mlr(m) => m.scale(clock, lr, pairs),
            AnyModel::Dml(m) => m.scale(clock, lr, pairs),
            AnyModel::SparseCoding(m) => m.scale(clock, lr, pairs),
            AnyModel::Saga(m) => m.scale(clock, lr, pairs),
        }
    }
}

/// Which model to build, with its parameters.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelSpec {
    /// [`Mlr`]: W is `classes × features`.
    Mlr,
    /// [`L2Mlr`] with regularization `lambda`: the replica is Z, `classes × (features + 1)`.
    L2Mlr {
        /// λ > 0.
        lambda: f64,
        /// The last feature is the constant 1 and its weight, the intercept, is not
        /// regularized ([`L2Mlr::with_intercept`]).
        intercept: bool,
    },
    /// [`Dml`]: the projection is `latent × features`.
    Dml {
        /// Rows of the projection (0: `min(features, 64)`, [`dml::latent_for`]).
        latent: usize,
        /// The starting scale: the median squared distance from a training sample to its
        /// nearest candidate at the start ([`dml::init_projection`]); > 0.
        margin: f32,
        /// Shard samples drawn per clock besides the mini-batch as neighbours
        /// ([`dml::DEFAULT_CANDIDATES`] by default); each sends one pair.
        candidates: usize,
    },
    /// [`SparseCoding`]: the dictionary is `features × atoms`.
    SparseCoding {
        /// Dictionary size.
        atoms: usize,
        /// ℓ1 weight λ ≥ 0.
        lambda: f32,
        /// Coordinate-descent sweeps per code while training.
        sweeps: usize,
        /// Step-size decay in clocks ([`SparseCoding::with_decay`]; 0 = constant step).
        decay: f32,
    },
    /// MLR trained on W itself for the primal `(1/n) Σ CE + (λ/2)‖W‖²` (L2-MLR without
    /// SDCA; plain MLR when `lambda` is 0): W is `classes × features`. The optimizer applies
    /// λ ([`sfb_core::Optimizer::l2`] = `lambda`).
    MlrPrimal {
        /// λ ≥ 0.
        lambda: f64,
        /// [`Saga`]'s factor differences (run with [`sfb_core::Method::Saga`]); otherwise
        /// [`Mlr`]'s plain factors (run with SGD and weight decay).
        saga: bool,
    },
}

/// The data every peer knows: the whole training set, the held-out set, and the shape.
#[derive(Debug, Clone)]
pub struct Problem {
    /// All training samples (every peer derives its shard from it).
    pub train: Arc<Vec<Example>>,
    /// Held-out samples.
    pub test: Arc<Vec<Example>>,
    /// Classes `J` (ignored by sparse coding).
    pub classes: usize,
    /// Features `D`.
    pub features: usize,
    /// The file's label values of the classes ([`LabelMap::identity`] for synthetic data).
    pub labels: LabelMap,
}

impl Problem {
    /// Refuses a mini-batch of `batch` samples per peer and clock larger than the whole
    /// training set: no peer could draw it without repeating every sample, and an absurd
    /// one (`--batch 1000000000`) would allocate gigabytes per clock before the first step.
    /// (A batch larger than a peer's shard is allowed: the peer draws with repeats.)
    ///
    /// # Errors
    /// [`Error::BatchTooLarge`] naming the batch and the training set's size.
    ///
    /// # Example
    /// ```
    /// use std::sync::Arc;
    /// use sfb_models::{Example, Features, Problem};
    /// let x = |i| Example::new(Features::Dense(vec![1.0]), 0, i);
    /// let p = Problem {
    ///     train: Arc::new((0..10).map(x).collect()),
    ///     test: Arc::new(vec![]),
    ///     classes: 2,
    ///     features: 1,
    ///     labels: sfb_models::data::LabelMap::identity(2),
    /// };
    /// assert!(p.check_batch(10).is_ok());
    /// assert_eq!(
    ///     p.check_batch(11).unwrap_err().to_string(),
    ///     "batch 11 is larger than the whole training set (10 samples): use a batch of at \
    ///      most 10 (a peer draws its mini-batch from its shard, with repeats when the shard \
    ///      is smaller)"
    /// );
    /// ```
    pub fn check_batch(&self, batch: usize) -> Result<()> {
        let samples = self.train.len();
        if batch > samples && samples > 0 {
            return Err(Error::BatchTooLarge { batch, samples });
        }
        Ok(())
    }
    /// The mean ℓ1 norm of the training samples' features, `(1/n) Σ_i ‖x_i‖₁` (0 for no
    /// samples): what an adaptive step of `η` per coordinate moves a linear score by, on a
    /// typical sample, at its first step (the default step sizes are set from it).
    pub fn mean_l1(&self) -> f64 {
        if self.train.is_empty() {
            return 0.0;
        }
        let total: f64 = self
            .train
            .iter()
            .map(|e| match &e.x {
                crate::Features::Dense(v) => v.iter().map(|x| f64::from(x.abs())).sum::<f64>(),
                crate::Features::Sparse { values, .. } => {
                    values.iter().map(|x| f64::from(x.abs())).sum::<f64>()
                }
            })
            .sum();
        total / self.train.len() as f64
    }
}

impl ModelSpec {
    /// Refuses this model on data of `classes` classes, `features` features and `train`
    /// training samples when its replicated matrix ([`shape`](Self::shape)) would exceed
    /// [`Limits::max_w_bytes`], or — for L2-MLR — its dual variables (`train × classes`
    /// f64) would exceed [`Limits::max_data_bytes`]; `at` names the data in the error.
    /// Call it before generating or building anything.
    ///
    /// # Errors
    /// [`Error::Limit`] with the bytes needed and the limit.
    pub fn check_limits(
        &self,
        classes: usize,
        features: usize,
        train: usize,
        limits: &Limits,
        at: &str,
    ) -> Result<()> {
        let (rows, cols) = match *self {
            ModelSpec::Mlr => (classes, features),
            ModelSpec::L2Mlr { .. } => (classes, features.saturating_add(1)),
            ModelSpec::Dml { latent, .. } => (dml::latent_for(latent, features), features),
            ModelSpec::SparseCoding { atoms, .. } => (features, atoms),
            ModelSpec::MlrPrimal { .. } => (classes, features),
        };
        limits.check_matrix(at, &format!("W of {}", self.name()), rows, cols)?;
        if let ModelSpec::MlrPrimal { saga: true, .. } = self {
            let what = format!("SAGA tables ({train} samples × {classes} classes, f32)");
            limits.check_data_bytes(
                at,
                &what,
                (train as u128 * classes as u128).saturating_mul(4),
            )?;
        }
        if let ModelSpec::L2Mlr { .. } = self {
            let what = format!("SDCA dual variables ({train} samples × {classes} classes, f64)");
            limits.check_data_bytes(
                at,
                &what,
                (train as u128 * classes as u128).saturating_mul(8),
            )?;
        }
        Ok(())
    }

    /// `mlr`, `l2mlr`, `dml` or `sc` ([`ModelSpec::MlrPrimal`]: `l2mlr` when λ > 0).
    pub fn name(&self) -> &'static str {
        match self {
            ModelSpec::Mlr => "mlr",
            ModelSpec::MlrPrimal { lambda, .. } if *lambda > 0.0 => "l2mlr",
            ModelSpec::MlrPrimal { .. } => "mlr",
            ModelSpec::L2Mlr { .. } => "l2mlr",
            ModelSpec::Dml { .. } => "dml",
            ModelSpec::SparseCoding { .. } => "sc",
        }
    }

    /// This model with an intercept (`intercept`: the data's last feature is the constant
    /// 1): only [`ModelSpec::L2Mlr`] treats that column apart (its intercept is not
    /// regularized); the others learn it as any other weight.
    pub fn with_intercept(self, intercept: bool) -> Self {
        match self {
            ModelSpec::L2Mlr { lambda, .. } => ModelSpec::L2Mlr { lambda, intercept },
            other => other,
        }
    }

    /// Shape of the replicated matrix.
    pub fn shape(&self, problem: &Problem) -> (usize, usize) {
        let (j, d) = (problem.classes, problem.features);
        match *self {
            ModelSpec::Mlr | ModelSpec::MlrPrimal { .. } => (j, d),
            ModelSpec::L2Mlr { .. } => (j, d + 1),
            ModelSpec::Dml { latent, .. } => (dml::latent_for(latent, d), d),
            ModelSpec::SparseCoding { atoms, .. } => (d, atoms),
        }
    }

    /// The starting matrix, the same on every peer for the same `seed`: MLR
    /// `N(0, init_std²)` entries ([`synthetic::init_w`]); SDCA zeros (all duals 0);
    /// DML [`dml::init_projection`]; sparse coding [`sparse_coding::init_dictionary`].
    pub fn init_w(&self, problem: &Problem, init_std: f32, seed: u64) -> Array2<f32> {
        let (j, d) = (problem.classes, problem.features);
        match *self {
            ModelSpec::Mlr | ModelSpec::MlrPrimal { .. } => synthetic::init_w(j, d, init_std, seed),
            ModelSpec::L2Mlr { .. } => L2Mlr::init_z(j, d),
            ModelSpec::Dml { latent, margin, .. } => {
                dml::init_projection(&problem.train, dml::latent_for(latent, d), d, margin, seed)
            }
            ModelSpec::SparseCoding { atoms, .. } => {
                sparse_coding::init_dictionary(&problem.train, d, atoms, seed)
            }
        }
    }

    /// Why a peer of this model cannot take over a lost peer's shard mid-run
    /// ([`sfb_core::Engine::with_takeover`]), if it cannot: its state belongs to the
    /// samples it started with.
    pub fn takeover_refusal(&self) -> Option<&'static str> {
        match self {
            ModelSpec::L2Mlr { .. } => Some(
                "l2mlr (SDCA) keeps a dual variable per sample of its own shard; use \
                 --lost-shards drop",
            ),
            ModelSpec::MlrPrimal { saga: true, .. } => Some(
                "saga keeps the last gradient of every sample of its own shard; use \
                 --lost-shards drop",
            ),
            ModelSpec::Dml { .. } => {
                Some("dml draws its pairs from the shard it was built with; use --lost-shards drop")
            }
            ModelSpec::Mlr
            | ModelSpec::MlrPrimal { saga: false, .. }
            | ModelSpec::SparseCoding { .. } => None,
        }
    }

    /// Why this model cannot train on streamed data ([`crate::stream`]), if it cannot:
    /// a streaming peer holds only its own shard and held-out slice, and this model needs
    /// the whole training set on every peer (to start W alike, or in its evaluator).
    pub fn streaming_refusal(&self) -> Option<&'static str> {
        match self {
            ModelSpec::Mlr => None,
            ModelSpec::MlrPrimal { lambda, .. } if *lambda == 0.0 => None,
            ModelSpec::MlrPrimal { .. } => Some(
                "the l2mlr primal objective is evaluated over the whole training set, which \
                 a streaming peer does not hold",
            ),
            ModelSpec::L2Mlr { .. } => Some(
                "l2mlr (SDCA) evaluates its duality gap over the whole training set, which a \
                 streaming peer does not hold",
            ),
            ModelSpec::Dml { .. } => Some(
                "dml starts its projection from, and evaluates on, the whole training set, \
                 which a streaming peer does not hold",
            ),
            ModelSpec::SparseCoding { .. } => Some(
                "sc starts its dictionary from the whole training set, which a streaming peer \
                 does not hold",
            ),
        }
    }

    /// The model of peer `peer` of `peers`, owning `shard`; `seed` drives any sampling
    /// the model does itself (DML's pairs).
    ///
    /// # Errors
    /// [`crate::Error::Parameter`] for parameters out of range.
    pub fn build(
        &self,
        problem: &Problem,
        shard: &[Example],
        peers: usize,
        seed: u64,
    ) -> Result<AnyModel> {
        let (j, d) = (problem.classes, problem.features);
        let positive = |name: &'static str, v: usize| {
            if v == 0 {
                Err(crate::Error::Parameter {
                    name,
                    value: "0".into(),
                    reason: "must be at least 1".into(),
                })
            } else {
                Ok(())
            }
        };
        Ok(match *self {
            ModelSpec::MlrPrimal { lambda, .. } if !(lambda.is_finite() && lambda >= 0.0) => {
                return Err(crate::Error::Parameter {
                    name: "lambda",
                    value: lambda.to_string(),
                    reason: "must be finite and non-negative".into(),
                });
            }
            ModelSpec::Mlr | ModelSpec::MlrPrimal { saga: false, .. } => {
                AnyModel::Mlr(Mlr::new(j, d))
            }
            ModelSpec::MlrPrimal { saga: true, .. } => {
                AnyModel::Saga(Saga::with_capacity(j, d, shard.len()))
            }
            ModelSpec::L2Mlr { lambda, intercept } => {
                let m = L2Mlr::new(j, d, lambda, problem.train.len(), peers, shard)?;
                AnyModel::L2Mlr(if intercept { m.with_intercept() } else { m })
            }
            ModelSpec::Dml {
                latent,
                margin,
                candidates,
            } => {
                if !(margin.is_finite() && margin > 0.0) {
                    return Err(crate::Error::Parameter {
                        name: "margin",
                        value: margin.to_string(),
                        reason: "must be positive".into(),
                    });
                }
                AnyModel::Dml(Box::new(Dml::new(
                    dml::latent_for(latent, d),
                    d,
                    candidates,
                    Arc::new(shard.to_vec()),
                    seed,
                )?))
            }
            ModelSpec::SparseCoding {
                atoms,
                lambda,
                sweeps,
                decay,
            } => {
                positive("dict-size", atoms)?;
                AnyModel::SparseCoding(
                    SparseCoding::new(d, atoms, lambda, sweeps)?.with_decay(decay),
                )
            }
        })
    }

    /// The held-out evaluator of this model (see each evaluator for its figures).
    pub fn evaluator(&self, problem: &Problem, seed: u64) -> Box<dyn Evaluator> {
        match *self {
            ModelSpec::Mlr => Box::new(MlrEvaluator::new(Arc::clone(&problem.test))),
            ModelSpec::MlrPrimal { lambda, .. } if lambda > 0.0 => Box::new(PrimalEvaluator::new(
                Arc::clone(&problem.train),
                Arc::clone(&problem.test),
                lambda,
            )),
            ModelSpec::MlrPrimal { .. } => Box::new(MlrEvaluator::new(Arc::clone(&problem.test))),
            ModelSpec::L2Mlr { lambda, intercept } => {
                let e = L2MlrEvaluator::new(
                    Arc::clone(&problem.train),
                    Arc::clone(&problem.test),
                    lambda,
                );
                Box::new(if intercept { e.with_intercept() } else { e })
            }
            ModelSpec::Dml { candidates, .. } => Box::new(DmlEvaluator::new(
                &problem.train,
                &problem.test,
                problem.features,
                candidates,
                seed,
            )),
            ModelSpec::SparseCoding { lambda, .. } => Box::new(SparseCodingEvaluator::new(
                Arc::clone(&problem.test),
                lambda,
            )),
        }
    }
}
