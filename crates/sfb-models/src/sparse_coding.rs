//! Sparse coding (dictionary learning) by SGD on the dictionary.
//!
//! W is the dictionary, `d × k` (signal dimension × atoms). A sample `x` is encoded by a
//! few coordinate-descent sweeps of the lasso
//! `a = argmin ½‖x − W a‖² + λ‖a‖₁` (warm start 0); the gradient of
//! `½‖x − W a‖²` in W at that code is `−(x − W a) aᵀ`, so the factors are
//! `u = −(x − W a)` (length d) and `v = a` (length k, sent sparse: codes are sparse).
//! [`prox`](Model::prox) projects every column (atom) onto the unit ball `‖W_k‖ ≤ 1`,
//! which keeps the ℓ1 penalty meaningful.
//!
//! Labels are ignored.

use std::sync::Arc;

use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use sfb_core::{Evaluation, Evaluator, Model, ModelError, SvList};

use crate::Example;

/// Sparse coding with ℓ1 weight `lambda` and `sweeps` coordinate-descent sweeps per code.
#[derive(Debug, Clone)]
pub struct SparseCoding {
    dim: usize,
    atoms: usize,
    lambda: f32,
    sweeps: usize,
    decay: f32,
}

impl SparseCoding {
    /// A model for a `dim × atoms` dictionary.
    ///
    /// # Errors
    /// [`crate::Error::Parameter`] for a negative or non-finite `lambda` or zero `sweeps`.
    pub fn new(dim: usize, atoms: usize, lambda: f32, sweeps: usize) -> crate::Result<Self> {
        if !(lambda.is_finite() && lambda >= 0.0) {
            return Err(crate::Error::Parameter {
                name: "lambda",
                value: lambda.to_string(),
                reason: "must be ≥ 0".into(),
            });
        }
        if sweeps == 0 {
            return Err(crate::Error::Parameter {
                name: "sweeps",
                value: "0".into(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(Self {
            dim,
            atoms,
            lambda,
            sweeps,
            decay: 0.0,
        })
    }

    /// Decays the step size: the step of clock `t` is `lr / √(1 + t/clocks)` (0 = none,
    /// the default). SGD on the dictionary keeps fluctuating at a constant step; a decaying
    /// one makes the objective settle.
    pub fn with_decay(mut self, clocks: f32) -> Self {
        self.decay = clocks.max(0.0);
        self
    }
}

/// A starting dictionary: `atoms` training samples chosen by a seeded permutation,
/// scaled to unit norm (as columns of a `dim × atoms` matrix). Every peer computing it
/// from the same data and seed gets the same matrix.
pub fn init_dictionary(train: &[Example], dim: usize, atoms: usize, seed: u64) -> Array2<f32> {
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd1c7_0a11);
    order.shuffle(&mut rng);
    let mut w = Array2::zeros((dim, atoms));
    let mut col = vec![0f32; dim];
    let mut k = 0;
    for &i in order.iter().cycle().take(order.len().max(atoms) * 2) {
        if k == atoms {
            break;
        }
        train[i].x.write_dense(&mut col);
        let norm = col.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            for (r, v) in col.iter().enumerate() {
                w[[r, k]] = v / norm;
            }
            k += 1;
        }
    }
    for k in k..atoms {
        // Not enough non-zero samples: unit basis vectors.
        w[[k % dim.max(1), k]] = 1.0;
    }
    w
}

/// Lasso codes of one signal by coordinate descent against a fixed dictionary.
#[derive(Debug, Clone)]
pub struct Encoder {
    w: Array2<f32>,
    gram: Vec<f32>,
    lambda: f32,
}

impl Encoder {
    /// An encoder for dictionary `w` (`d × k`).
    pub fn new(w: ArrayView2<'_, f32>, lambda: f32) -> Self {
        let w = w.as_standard_layout().into_owned();
        let g = w.t().dot(&w);
        Self {
            gram: g.iter().copied().collect(),
            w,
            lambda,
        }
    }

    /// Encodes `x` (length d) into `a` (length k) with up to `sweeps` sweeps, stopping
    /// early when no coordinate moves by more than `tol`; returns the residual `x − W a`.
    pub fn encode(&self, x: &[f32], a: &mut [f32], sweeps: usize, tol: f32) -> Vec<f32> {
        let (d, k) = self.w.dim();
        let b = self.w.t().dot(&ndarray::ArrayView1::from(x));
        a.fill(0.0);
        let mut ga = vec![0f32; k]; // G a
        for _ in 0..sweeps {
            let mut moved = 0f32;
            for j in 0..k {
                let gjj = self.gram[j * k + j];
                if gjj <= 0.0 {
                    continue;
                }
                let r = b[j] - ga[j] + gjj * a[j];
                let new = soft(r, self.lambda) / gjj;
                let delta = new - a[j];
                if delta != 0.0 {
                    for (l, g) in ga.iter_mut().enumerate() {
                        *g += self.gram[l * k + j] * delta;
                    }
                    a[j] = new;
                    moved = moved.max(delta.abs());
                }
            }
            if moved <= tol {
                break;
            }
        }
        let ws = self.w.as_slice().expect("standard layout");
        (0..d)
            .map(|r| {
                x[r] - ws[r * k..(r + 1) * k]
                    .iter()
                    .zip(a.iter())
                    .map(|(p, q)| p * q)
                    .sum::<f32>()
            })
            .collect()
    }
}

fn soft(x: f32, t: f32) -> f32 {
    if x > t {
        x - t
    } else if x < -t {
        x + t
    } else {
        0.0
    }
}

impl Model for SparseCoding {
    type Sample = Example;

    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let (d, k) = w.dim();
        if (d, k) != (self.dim, self.atoms) {
            return Err(ModelError::msg(format!(
                "dictionary is {d}×{k}, expected {}×{}",
                self.dim, self.atoms
            )));
        }
        let enc = Encoder::new(w, self.lambda);
        let mut x = vec![0f32; d];
        let mut a = vec![0f32; k];
        let (mut idx, mut val) = (Vec::new(), Vec::new());
        for (i, e) in batch.iter().enumerate() {
            if e.x.min_dim() > d {
                return Err(ModelError::msg(format!(
                    "sample {i} (id {}) has more than {d} features",
                    e.id
                )));
            }
            e.x.write_dense(&mut x);
            let mut u = enc.encode(&x, &mut a, self.sweeps, 0.0);
            for r in &mut u {
                *r = -*r;
            }
            idx.clear();
            val.clear();
            for (j, &c) in a.iter().enumerate() {
                if c != 0.0 {
                    idx.push(j as u32);
                    val.push(c);
                }
            }
            sv.push_sparse(&u, &idx, &val)?;
        }
        Ok(())
    }

    /// One pair per sample: its code, found from W and the sample alone.
    fn separable(&self) -> bool {
        true
    }

    /// `−lr / pairs`, times the decay factor of [`SparseCoding::with_decay`].
    fn scale(&self, clock: u64, lr: f32, pairs: usize) -> f32 {
        if pairs == 0 {
            return 0.0;
        }
        let decay = if self.decay > 0.0 {
            (1.0 + clock as f32 / self.decay).sqrt()
        } else {
            1.0
        };
        -lr / (pairs as f32 * decay)
    }

    /// Projects each atom (column) onto the unit ball.
    fn prox(&mut self, mut w: ArrayViewMut2<'_, f32>) {
        project_columns(&mut w);
    }
}

/// Scales every column of `w` with norm above 1 back to norm 1.
pub fn project_columns(w: &mut ArrayViewMut2<'_, f32>) {
    for mut col in w.columns_mut() {
        let norm = col
            .iter()
            .map(|v| f64::from(*v) * f64::from(*v))
            .sum::<f64>()
            .sqrt();
        if norm > 1.0 {
            let s = (1.0 / norm) as f32;
            col.mapv_inplace(|v| v * s);
        }
    }
}

/// Mean reconstruction error and objective of dictionary `w` on `data`, with codes from
/// [`Encoder`] run to convergence (`sweeps` sweeps at most, tolerance `1e-7`).
///
/// Returns `(mean ‖x − W a‖², mean ½‖x − W a‖² + λ‖a‖₁, mean non-zeros of a)`.
pub fn reconstruction(
    w: ArrayView2<'_, f32>,
    data: &[Example],
    lambda: f32,
    sweeps: usize,
) -> (f64, f64, f64) {
    let (d, k) = w.dim();
    let enc = Encoder::new(w, lambda);
    let mut x = vec![0f32; d];
    let mut a = vec![0f32; k];
    let (mut err, mut obj, mut nnz) = (0f64, 0f64, 0f64);
    for e in data {
        e.x.write_dense(&mut x);
        let r = enc.encode(&x, &mut a, sweeps, 1e-7);
        let sq: f64 = r.iter().map(|v| f64::from(*v) * f64::from(*v)).sum();
        let l1: f64 = a.iter().map(|v| f64::from(v.abs())).sum();
        err += sq;
        obj += 0.5 * sq + f64::from(lambda) * l1;
        nnz += a.iter().filter(|v| **v != 0.0).count() as f64;
    }
    let n = data.len().max(1) as f64;
    (err / n, obj / n, nnz / n)
}

/// Held-out evaluation of a dictionary: `objective` = mean `½‖x − W a‖² + λ‖a‖₁`; extras
/// `reconstruction_error` (mean `‖x − W a‖²`), `mean_nonzero_codes`, `max_column_norm`.
#[derive(Debug, Clone)]
pub struct SparseCodingEvaluator {
    data: Arc<Vec<Example>>,
    lambda: f32,
}

impl SparseCodingEvaluator {
    /// Evaluates on `data` with ℓ1 weight `lambda`.
    pub fn new(data: Arc<Vec<Example>>, lambda: f32) -> Self {
        Self { data, lambda }
    }
}

impl Evaluator for SparseCodingEvaluator {
    fn evaluate(&mut self, w: ArrayView2<'_, f32>) -> Evaluation {
        let (err, obj, nnz) = reconstruction(w, &self.data, self.lambda, 500);
        let max_norm = w
            .columns()
            .into_iter()
            .map(|c| {
                c.iter()
                    .map(|v| f64::from(*v) * f64::from(*v))
                    .sum::<f64>()
                    .sqrt()
            })
            .fold(0.0, f64::max);
        Evaluation::new(obj, None)
            .with("reconstruction_error", err)
            .with("mean_nonzero_codes", nnz)
            .with("max_column_norm", max_norm)
    }
}
