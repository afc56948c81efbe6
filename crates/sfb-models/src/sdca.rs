//! L2-regularized multiclass logistic regression trained by SDCA (stochastic dual
//! coordinate ascent), distributed as CoCoA+ with sufficient factors.
//!
//! # The problem
//! Primal: `P(W) = (1/n) Σ_i CE(W x_i, y_i) + (λ/2)‖W‖²` over `W ∈ R^{J×D}`.
//! Dual: one variable `α_i = e_{y_i} − p_i` per sample with `p_i` in the simplex,
//! `D(α) = (1/n) Σ_i H(p_i) − (λ/2)‖W(α)‖²` with `W(α) = ∇h*(Z) = Z/λ` and
//! `Z = (1/n) Σ_i α_i x_iᵀ` (`h = (λ/2)‖·‖²`, `H` the entropy). `P(W(α)) − D(α) ≥ 0` is the
//! duality gap; it is 0 exactly at the optimum.
//!
//! # As sufficient factors
//! The replicated matrix is **Z**, not W. Each peer owns the dual variables of its shard
//! (found by [`Example::id`]). At each clock it updates the duals of its mini-batch one by
//! one (local SDCA on the CoCoA+ subproblem with safety factor `σ' = peers`, which makes
//! the sum of all peers' updates safe), and each change `Δα_i` of a dual gives the pair
//! `u = Δα_i / n`, `v = x_i` (`ΔZ = u vᵀ`; the engine's scale is 1, there is no learning
//! rate). W is never stored: [`dual_operator`] turns Z into W where it is needed.
//!
//! So that any peer can report the dual objective from its replica alone, Z carries one
//! extra column: `Z[0, D] = (1/n) Σ_i H(p_i)`, kept up to date by one more pair per
//! mini-batch (`u = (ΔH/n) e_0`, `v = e_D`). The replica is therefore `J × (D + 1)`.

use std::collections::HashMap;
use std::sync::Arc;

use ndarray::{Array2, ArrayView2};
use sfb_core::{Evaluation, Evaluator, Model, ModelError, SvList};

use crate::{Example, Features, mlr};

/// `W = ∇h*(Z)` for `h = (λ/2)‖W‖²`: the first `D` columns of the replica divided by λ
/// (the last column is SDCA's bookkeeping, see the [module docs](self)).
pub fn dual_operator(z: ArrayView2<'_, f32>, lambda: f32) -> Array2<f32> {
    let d = z.ncols().saturating_sub(1);
    z.slice(ndarray::s![.., ..d]).mapv(|v| v / lambda)
}

/// L2-MLR by SDCA for one peer; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct L2Mlr {
    classes: usize,
    features: usize,
    lambda: f64,
    n: f64,
    sigma: f64,
    slot: HashMap<u32, usize>,
    /// `p_i` per owned sample (`J` each), so `α_i = e_{y_i} − p_i`.
    p: Vec<f64>,
    dense_x: Vec<f32>,
}

impl L2Mlr {
    /// The model for a peer owning `shard` of a training set of `n` samples spread over
    /// `peers` peers, with `classes × features` W and regularization `lambda`.
    ///
    /// All duals start at 0 (`p_i = e_{y_i}`), which matches the initial `Z = 0`: start
    /// every peer from [`L2Mlr::init_z`].
    ///
    /// # Errors
    /// [`crate::Error::Parameter`] for `lambda ≤ 0`, `n` or `peers` 0, or a duplicate id.
    pub fn new(
        classes: usize,
        features: usize,
        lambda: f64,
        n: usize,
        peers: usize,
        shard: &[Example],
    ) -> crate::Result<Self> {
        let bad = |name, value: String, reason: &str| crate::Error::Parameter {
            name,
            value,
            reason: reason.into(),
        };
        if !(lambda.is_finite() && lambda > 0.0) {
            return Err(bad("lambda", lambda.to_string(), "must be positive"));
        }
        if n == 0 || peers == 0 {
            return Err(bad("n", n.to_string(), "n and peers must be positive"));
        }
        let mut slot = HashMap::with_capacity(shard.len());
        let mut p = vec![0.0; shard.len() * classes];
        for (s, e) in shard.iter().enumerate() {
            if slot.insert(e.id, s).is_some() {
                return Err(bad(
                    "id",
                    e.id.to_string(),
                    "sample ids must be unique in a shard",
                ));
            }
            if (e.y as usize) < classes {
                p[s * classes + e.y as usize] = 1.0;
            }
        }
        Ok(Self {
            classes,
            features,
            lambda,
            n: n as f64,
            sigma: peers as f64,
            slot,
            p,
            dense_x: Vec::new(),
        })
    }

    /// The initial replica: `Z = 0`, shape `J × (D + 1)`.
    pub fn init_z(classes: usize, features: usize) -> Array2<f32> {
        Array2::zeros((classes, features + 1))
    }

    /// λ.
    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    /// The dual variables this peer owns, as `(id, p_id)` in no order: the dual variable
    /// is `α_id = e_y − p_id` (`y` the sample's class).
    pub fn dual_probabilities(&self) -> impl Iterator<Item = (u32, &[f64])> + '_ {
        self.slot
            .iter()
            .map(|(&id, &s)| (id, &self.p[s * self.classes..(s + 1) * self.classes]))
    }

    /// `Σ_i H(p_i)` over this peer's samples (the un-normalized first dual term).
    pub fn entropy_sum(&self) -> f64 {
        self.p.chunks(self.classes.max(1)).map(entropy).sum()
    }
}

fn entropy(p: &[f64]) -> f64 {
    p.iter().filter(|&&v| v > 0.0).map(|&v| -v * v.ln()).sum()
}

/// Solves `e^u + u = t` for `u` (the log of Lambert's W of `e^t`).
fn log_lambert(t: f64) -> f64 {
    let mut u = if t > 1.0 {
        t.ln()
    } else {
        t - t.exp().min(1.0)
    };
    for _ in 0..100 {
        let e = u.exp();
        let step = (e + u - t) / (e + 1.0);
        u -= step;
        if step.abs() <= 1e-15 * (1.0 + u.abs()) {
            break;
        }
    }
    u
}

/// `argmax_p H(p) + ⟨z, p⟩ − (q/2)‖p − old‖²` over the simplex, into `out`.
///
/// Stationarity gives `ln p_j + q p_j = z_j − 1 + q old_j − ν`, solved per class by
/// [`log_lambert`] and for the multiplier `ν` by safeguarded Newton on `Σ p_j = 1`.
fn solve_coordinate(z: &[f64], old: &[f64], q: f64, out: &mut [f64]) {
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if q < 1e-12 {
        let s: f64 = z.iter().map(|v| (v - m).exp()).sum();
        for (o, v) in out.iter_mut().zip(z) {
            *o = (v - m).exp() / s;
        }
        return;
    }
    let c: Vec<f64> = z
        .iter()
        .zip(old)
        .map(|(zj, oj)| zj - 1.0 + q * oj + q.ln())
        .collect();
    // S(ν) = Σ_j e^{u_j(ν)} / q with e^u + u = c_j − ν; decreasing in ν.
    let eval = |nu: f64, out: &mut [f64]| -> (f64, f64) {
        let (mut s, mut ds) = (0.0, 0.0);
        for (o, cj) in out.iter_mut().zip(&c) {
            let w = log_lambert(cj - nu).exp();
            *o = w / q;
            s += w / q;
            ds -= w / (1.0 + w) / q;
        }
        (s - 1.0, ds)
    };
    let cmax = c.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // Bracket the root by expanding around the largest c_j, then safeguarded Newton.
    let (mut lo, mut hi) = (cmax - 1.0, cmax + 1.0);
    while eval(lo, out).0 < 0.0 {
        lo -= 2.0 * (hi - lo);
    }
    while eval(hi, out).0 > 0.0 {
        hi += 2.0 * (hi - lo);
    }
    let mut nu = 0.5 * (lo + hi);
    for _ in 0..200 {
        let (f, df) = eval(nu, out);
        if f > 0.0 {
            lo = nu;
        } else {
            hi = nu;
        }
        if f.abs() < 1e-15 {
            break;
        }
        let mut next = nu - f / df;
        if !(next > lo && next < hi) {
            next = 0.5 * (lo + hi);
        }
        if (next - nu).abs() <= 1e-15 * (1.0 + nu.abs()) {
            nu = next;
            break;
        }
        nu = next;
    }
    eval(nu, out);
    // Renormalize the last rounding away.
    let s: f64 = out.iter().sum();
    for o in out.iter_mut() {
        *o /= s;
    }
}

impl Model for L2Mlr {
    /// The duals (`p_i` of every owned sample).
    fn save_state(&self) -> Vec<u8> {
        sfb_core::checkpoint::ByteWriter::new()
            .f64s(&self.p)
            .finish()
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        let mut r = sfb_core::checkpoint::ByteReader::new(bytes);
        let p = r
            .f64s(Some(self.p.len()))
            .map_err(|e| ModelError::msg(format!("SDCA duals: {e} (another shard?)")))?;
        r.finish().map_err(ModelError::msg)?;
        if p.iter().any(|x| !x.is_finite()) {
            return Err(ModelError::msg("SDCA duals: a non-finite value"));
        }
        self.p = p;
        Ok(())
    }

    type Sample = Example;

    fn compute_sv(
        &mut self,
        z: ArrayView2<'_, f32>,
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let (j, d1) = z.dim();
        let d = self.features;
        if j != self.classes || d1 != d + 1 {
            return Err(ModelError::msg(format!(
                "SDCA replica is {j}×{d1}, expected {}×{} (Z plus one bookkeeping column)",
                self.classes,
                d + 1
            )));
        }
        let zs = z.as_standard_layout();
        let zs = zs.as_slice().expect("standard layout");
        let dense = batch.iter().all(|e| matches!(e.x, Features::Dense(_)));
        let (n, lambda) = (self.n, self.lambda);
        let mut deltas: Vec<Vec<f64>> = Vec::with_capacity(batch.len());
        let mut d_entropy = 0.0;
        let mut zx = vec![0.0f64; j];
        let mut newp = vec![0.0f64; j];
        let mut u = vec![0.0f32; j];
        for (k, e) in batch.iter().enumerate() {
            let s = *self.slot.get(&e.id).ok_or_else(|| {
                ModelError::msg(format!(
                    "sample {k} (id {}) is not in this peer's shard",
                    e.id
                ))
            })?;
            if e.y as usize >= j || e.x.min_dim() > d {
                return Err(ModelError::msg(format!(
                    "sample {k} (id {}) does not fit J = {j}, D = {d}",
                    e.id
                )));
            }
            // z = W x with the local updates of this batch so far (scaled by σ').
            for (c, o) in zx.iter_mut().enumerate() {
                *o = f64::from(e.x.dot(&zs[c * d1..c * d1 + d]));
            }
            for (m, dm) in deltas.iter().enumerate() {
                let xx = f64::from(batch[m].x.dot_features(&e.x));
                if xx != 0.0 {
                    for (o, a) in zx.iter_mut().zip(dm) {
                        *o += self.sigma * a / n * xx;
                    }
                }
            }
            for o in &mut zx {
                *o /= lambda;
            }
            let q = self.sigma * f64::from(e.x.sq_norm()) / (lambda * n);
            let old = &mut self.p[s * j..(s + 1) * j];
            solve_coordinate(&zx, old, q, &mut newp);
            let delta: Vec<f64> = old.iter().zip(&newp).map(|(o, p)| o - p).collect();
            d_entropy += entropy(&newp) - entropy(old);
            old.copy_from_slice(&newp);
            for (uc, a) in u.iter_mut().zip(&delta) {
                *uc = (a / n) as f32;
            }
            match &e.x {
                Features::Sparse { indices, values } if !dense => {
                    sv.push_sparse(&u, indices, values)?;
                }
                x => {
                    self.dense_x.resize(d + 1, 0.0);
                    x.write_dense(&mut self.dense_x[..d]);
                    self.dense_x[d] = 0.0;
                    if dense {
                        sv.push_dense(&u, &self.dense_x)?;
                    } else {
                        let (idx, val): (Vec<u32>, Vec<f32>) = self.dense_x[..d]
                            .iter()
                            .enumerate()
                            .filter(|(_, v)| **v != 0.0)
                            .map(|(i, &v)| (i as u32, v))
                            .unzip();
                        sv.push_sparse(&u, &idx, &val)?;
                    }
                }
            }
            deltas.push(delta);
        }
        if !batch.is_empty() {
            u.fill(0.0);
            u[0] = (d_entropy / n) as f32;
            if dense {
                self.dense_x.clear();
                self.dense_x.resize(d + 1, 0.0);
                self.dense_x[d] = 1.0;
                sv.push_dense(&u, &self.dense_x)?;
            } else {
                sv.push_sparse(&u, &[d as u32], &[1.0])?;
            }
        }
        Ok(())
    }

    /// SDCA steps are exact coordinate maximizations: no learning rate, scale 1.
    fn scale(&self, _clock: u64, _lr: f32, _pairs: usize) -> f32 {
        1.0
    }
}

/// Primal, dual and gap of a replica Z, with held-out accuracy.
///
/// `objective` is the primal `P(W)` on the training set (what SDCA minimizes); `accuracy`
/// is on the held-out set; extras `primal_objective`, `dual_objective`, `duality_gap`,
/// `test_cross_entropy`.
#[derive(Debug, Clone)]
pub struct L2MlrEvaluator {
    train: Arc<Vec<Example>>,
    test: Arc<Vec<Example>>,
    lambda: f64,
}

impl L2MlrEvaluator {
    /// Evaluates on the whole training set `train` (for the primal) and `test`.
    pub fn new(train: Arc<Vec<Example>>, test: Arc<Vec<Example>>, lambda: f64) -> Self {
        Self {
            train,
            test,
            lambda,
        }
    }
}

/// Primal and dual objectives of replica `z` (see the [module docs](self)) on `train`.
pub fn primal_dual(z: ArrayView2<'_, f32>, train: &[Example], lambda: f64) -> (f64, f64) {
    let w = dual_operator(z, lambda as f32);
    let sq: f64 = w.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let loss = mlr::evaluate(w.view(), train).objective;
    let reg = 0.5 * lambda * sq;
    let entropy_term = f64::from(z[[0, z.ncols() - 1]]);
    (loss + reg, entropy_term - reg)
}

impl Evaluator for L2MlrEvaluator {
    fn evaluate(&mut self, z: ArrayView2<'_, f32>) -> Evaluation {
        let (primal, dual) = primal_dual(z, &self.train, self.lambda);
        let w = dual_operator(z, self.lambda as f32);
        let test = mlr::evaluate(w.view(), &self.test);
        Evaluation::new(primal, test.accuracy)
            .with("primal_objective", primal)
            .with("dual_objective", dual)
            .with("duality_gap", primal - dual)
            .with("test_cross_entropy", test.objective)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lambert_inverts() {
        for t in [-40.0, -3.0, 0.0, 0.5, 1.0, 7.0, 300.0] {
            let u = log_lambert(t);
            assert!((u.exp() + u - t).abs() < 1e-12 * (1.0 + t.abs()), "t = {t}");
        }
    }

    /// The coordinate solution satisfies the optimality conditions and beats nearby
    /// points of the simplex.
    #[test]
    fn coordinate_step_is_optimal() {
        let z = [0.3, -1.0, 2.0, 0.0];
        let old = [0.0, 0.0, 1.0, 0.0];
        for q in [0.0, 0.1, 3.0, 500.0] {
            let mut p = [0.0; 4];
            solve_coordinate(&z, &old, q, &mut p);
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            let f = |p: &[f64]| {
                entropy(p) + p.iter().zip(&z).map(|(a, b)| a * b).sum::<f64>()
                    - 0.5
                        * q
                        * p.iter()
                            .zip(&old)
                            .map(|(a, b)| (a - b) * (a - b))
                            .sum::<f64>()
            };
            let best = f(&p);
            for (a, b) in [(0, 1), (1, 2), (2, 3), (0, 3)] {
                for eps in [1e-4, -1e-4] {
                    let mut r = p;
                    r[a] += eps;
                    r[b] -= eps;
                    if r.iter().all(|&v| v >= 0.0) {
                        assert!(
                            f(&r) <= best + 1e-12,
                            "q = {q}: moving mass {a}→{b} improves"
                        );
                    }
                }
            }
        }
    }
}
