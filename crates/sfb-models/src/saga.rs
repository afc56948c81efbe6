//! SAGA over sufficient factors for multiclass logistic regression, plain or
//! L2-regularized: the model half of [`sfb_core::Method::Saga`].
//!
//! # The method
//! For a sample `i` with features `a_i` the gradient of the cross-entropy is
//! `u_i a_iᵀ`, `u_i = softmax(W a_i) − onehot(y_i)` (see [`crate::mlr`]). SAGA (Defazio,
//! Bach & Lacoste-Julien 2014) keeps the last `u_i^old` of every sample and the table mean
//! `A = (1/n) Σ_i u_i^old a_iᵀ` over the `n` samples of every peer; a mini-batch `B` of `K`
//! samples steps
//!
//! ```text
//! W −= η [ (1/K) Σ_{i∈B} (u_i^new − u_i^old) a_iᵀ + A + λW ],
//! A += (1/n) Σ_{i∈B} (u_i^new − u_i^old) a_iᵀ,   u_i^old ← u_i^new.
//! ```
//!
//! `(u_i^new − u_i^old) a_iᵀ` is still rank 1, so [`Saga`] sends the pairs
//! `(Δu_i, a_i)` (dense or sparse `a`) with the ordinary scale `−lr/K`, and keeps only the
//! `u` of its own shard (`n_p × J` floats, zero until a sample is first visited: the first
//! visit sends `u^new` itself). The optimizer ([`sfb_core::Method::Saga`]) keeps `A` on
//! every replica from the broadcast factors and adds `−ηA` and the decay `W ← (1 − ηλ) W`
//! ([`sfb_core::Optimizer::l2`]) to each step; see [`sfb_core::optim`]. The estimate is
//! unbiased whatever the table holds, and its variance vanishes at the optimum, so a
//! constant step converges linearly on the strongly convex L2 problem where SGD stalls at
//! a noise floor.
//!
//! The model needs each sample's index in its shard: the engine passes it through
//! [`Model::compute_sv_indexed`]; the plain [`Model::compute_sv`] refuses.
//!
//! # Example
//! ```
//! use ndarray::Array2;
//! use sfb_core::{Model, SvList};
//! use sfb_models::{Example, Features, Saga};
//!
//! let e = Example::new(Features::Dense(vec![1.0, 2.0]), 1, 0);
//! let w = Array2::<f32>::zeros((2, 2));
//! let mut model = Saga::new(2, 2);
//! let mut sv = SvList::new(2, 2);
//! model.compute_sv_indexed(w.view(), &[(0, &e)], &mut sv).unwrap();
//! // First visit: Δu = u^new = softmax(0) − e_1 = (0.5, −0.5).
//! assert_eq!(model.last_u(0), Some(&[0.5, -0.5][..]));
//! sv.clear();
//! model.compute_sv_indexed(w.view(), &[(0, &e)], &mut sv).unwrap();
//! // Same W: nothing changed, Δu = 0.
//! let fb = sv.to_batch(sfb_core::PeerId(0), 0, -0.1);
//! assert!(fb.u.iter().all(|&x| x == 0.0));
//! ```

use std::sync::Arc;

use ndarray::{Array2, ArrayView2};
use sfb_core::{Evaluation, Evaluator, Model, ModelError, SvList};

use crate::{Example, Features, mlr};

/// The SAGA model of one peer: MLR's gradient factors, sent as differences against the
/// last ones of each sample; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Saga {
    classes: usize,
    features: usize,
    /// `u_i^old`, `J` floats per shard index (grown on demand; unvisited samples are 0).
    table: Vec<f32>,
    logits: Array2<f32>,
}

impl Saga {
    /// A SAGA model for a `classes × features` W.
    pub fn new(classes: usize, features: usize) -> Self {
        Self {
            classes,
            features,
            table: Vec::new(),
            logits: Array2::zeros((0, 0)),
        }
    }

    /// The same, with the table allocated for a shard of `samples` samples up front (it
    /// grows on demand otherwise).
    pub fn with_capacity(classes: usize, features: usize, samples: usize) -> Self {
        let mut s = Self::new(classes, features);
        s.table = vec![0.0; samples.saturating_mul(classes)];
        s
    }

    /// `(J, D)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.classes, self.features)
    }

    /// The last `u` sent for the sample at shard index `index` (zeros if it was never
    /// visited but the table reaches it; `None` past the table).
    pub fn last_u(&self, index: usize) -> Option<&[f32]> {
        let j = self.classes;
        self.table.get(index * j..(index + 1) * j)
    }

    /// Bytes the table holds.
    pub fn table_bytes(&self) -> usize {
        self.table.len() * 4
    }
}

impl Model for Saga {
    /// The table of last gradient factors.
    fn save_state(&self) -> Vec<u8> {
        sfb_core::checkpoint::ByteWriter::new()
            .f32s(&self.table)
            .finish()
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        let mut r = sfb_core::checkpoint::ByteReader::new(bytes);
        let table = r.f32s(None).map_err(ModelError::msg)?;
        r.finish().map_err(ModelError::msg)?;
        if table.len() % self.classes.max(1) != 0 || table.iter().any(|x| !x.is_finite()) {
            return Err(ModelError::msg(format!(
                "SAGA table: {} values, not finite rows of {} classes",
                table.len(),
                self.classes
            )));
        }
        self.table = table;
        Ok(())
    }

    type Sample = Example;

    /// Refuses: SAGA needs each sample's index (the engine calls
    /// [`compute_sv_indexed`](Model::compute_sv_indexed)).
    fn compute_sv(
        &mut self,
        _w: ArrayView2<'_, f32>,
        _batch: &[&Example],
        _sv: &mut SvList,
    ) -> Result<(), ModelError> {
        Err(ModelError::msg(
            "SAGA keeps the last gradient of every sample and needs each sample's index in \
             its shard: call compute_sv_indexed (the engine does)",
        ))
    }

    fn compute_sv_indexed(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[(usize, &Example)],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let (j, d) = w.dim();
        if j != self.classes {
            return Err(ModelError::msg(format!(
                "W has {j} rows, the SAGA table was made for J = {}",
                self.classes
            )));
        }
        for (k, (_, e)) in batch.iter().enumerate() {
            mlr::check(e, k, j, d)?;
        }
        let Some(last) = batch.iter().map(|&(i, _)| i).max() else {
            return Ok(());
        };
        let need = (last + 1).checked_mul(j).ok_or_else(|| {
            ModelError::msg(format!("sample index {last} is too large for a table"))
        })?;
        if self.table.len() < need {
            self.table.resize(need, 0.0);
        }
        let refs: Vec<&Example> = batch.iter().map(|&(_, e)| e).collect();
        mlr::logits(w, &refs, &mut self.logits);
        for (mut row, &(i, e)) in self.logits.rows_mut().into_iter().zip(batch) {
            let u = row.as_slice_mut().expect("row");
            mlr::softmax(u);
            u[e.y as usize] -= 1.0;
            // Δu = u^new − u^old, and the table keeps u^new (a sample drawn twice in one
            // batch sends its change once: the second Δu is 0).
            for (x, old) in u.iter_mut().zip(&mut self.table[i * j..(i + 1) * j]) {
                let new = *x;
                *x = new - *old;
                *old = new;
            }
            match &e.x {
                Features::Dense(x) => sv.push_dense(u, x)?,
                Features::Sparse { indices, values } => sv.push_sparse(u, indices, values)?,
            }
        }
        Ok(())
    }
}

/// The primal objective `P(W) = (1/n) Σ_i CE(W a_i, y_i) + (λ/2)‖W‖²` on `train` (W is
/// `J × D`, not SDCA's Z; [`crate::sdca::primal_dual`] gives the same figure for Z).
pub fn primal(w: ArrayView2<'_, f32>, train: &[Example], lambda: f64) -> f64 {
    let sq: f64 = w.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    mlr::evaluate(w, train).objective + 0.5 * lambda * sq
}

/// Evaluation of W for L2-regularized MLR trained on the primal (SAGA, SGD with weight
/// decay): `objective` is the primal [`primal`] on the whole training set (what the
/// optimizer minimizes, comparable with [`crate::L2MlrEvaluator`]'s), `accuracy` on the
/// held-out set; extras `primal_objective`, `test_cross_entropy`.
#[derive(Debug, Clone)]
pub struct PrimalEvaluator {
    train: Arc<Vec<Example>>,
    test: Arc<Vec<Example>>,
    lambda: f64,
}

impl PrimalEvaluator {
    /// Evaluates on the whole training set `train` (for the primal) and `test`.
    pub fn new(train: Arc<Vec<Example>>, test: Arc<Vec<Example>>, lambda: f64) -> Self {
        Self {
            train,
            test,
            lambda,
        }
    }
}

impl Evaluator for PrimalEvaluator {
    fn evaluate(&mut self, w: ArrayView2<'_, f32>) -> Evaluation {
        let p = primal(w, &self.train, self.lambda);
        let test = mlr::evaluate(w, &self.test);
        Evaluation::new(p, test.accuracy)
            .with("primal_objective", p)
            .with("test_cross_entropy", test.objective)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sfb_core::PeerId;

    fn ex(x: Vec<f32>, y: u32, id: u32) -> Example {
        Example::new(Features::Dense(x), y, id)
    }

    /// The pairs are MLR's gradient factors minus the last ones of each sample, and the
    /// table ends at MLR's latest `u` of every sample visited.
    #[test]
    fn differences_against_the_table_sum_to_the_latest_gradient() {
        let data = [
            ex(vec![1.0, 0.0, 2.0], 0, 0),
            ex(vec![0.5, -1.0, 0.0], 2, 1),
            ex(vec![0.0, 3.0, -1.0], 1, 2),
        ];
        let (j, d) = (3, 3);
        let mut saga = Saga::new(j, d);
        let mut plain = crate::Mlr::new(j, d);
        let mut total = vec![0f32; 3 * j];
        let ws = [
            Array2::from_shape_fn((j, d), |(r, c)| 0.1 * r as f32 - 0.2 * c as f32),
            Array2::from_shape_fn((j, d), |(r, c)| 0.3 * (r * c) as f32 - 0.1),
        ];
        for (step, w) in ws.iter().enumerate() {
            // Step 0: samples 0, 1; step 1: samples 1, 2 and 1 again.
            let idx: Vec<usize> = if step == 0 { vec![0, 1] } else { vec![1, 2, 1] };
            let batch: Vec<(usize, &Example)> = idx.iter().map(|&i| (i, &data[i])).collect();
            let mut sv = SvList::new(j, d);
            saga.compute_sv_indexed(w.view(), &batch, &mut sv).unwrap();
            let fb = sv.to_batch(PeerId(0), step as u64, 1.0);
            for (k, &i) in idx.iter().enumerate() {
                for c in 0..j {
                    total[i * j + c] += fb.u_row(k)[c];
                }
            }
            let mut sv = SvList::new(j, d);
            let refs: Vec<&Example> = idx.iter().map(|&i| &data[i]).collect();
            plain.compute_sv(w.view(), &refs, &mut sv).unwrap();
            let fresh = sv.to_batch(PeerId(0), 0, 1.0);
            for (k, &i) in idx.iter().enumerate() {
                assert_eq!(saga.last_u(i).unwrap(), fresh.u_row(k), "step {step}");
            }
        }
        for i in 0..3 {
            for c in 0..j {
                let want = saga.last_u(i).unwrap()[c];
                assert!((total[i * j + c] - want).abs() < 1e-6, "sample {i}");
            }
        }
        // The unindexed call is refused, and a bad label changes nothing.
        let mut sv = SvList::new(j, d);
        assert!(saga.compute_sv(ws[0].view(), &[&data[0]], &mut sv).is_err());
        let before = saga.table.clone();
        let bad = ex(vec![1.0, 1.0, 1.0], 9, 3);
        assert!(
            saga.compute_sv_indexed(ws[0].view(), &[(0, &data[0]), (3, &bad)], &mut sv)
                .is_err()
        );
        assert_eq!(saga.table, before);
    }
}
