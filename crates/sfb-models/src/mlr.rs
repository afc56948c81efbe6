//! Multiclass logistic regression (softmax regression), the reference model.
//!
//! W is `J × D` (classes × features). For a sample `(a, y)` the gradient of the
//! cross-entropy loss is `(softmax(W a) − onehot(y)) aᵀ`, so the sufficient factors are
//! `u = softmax(W a) − onehot(y)` and `v = a` (sparse when `a` is).

use faer::linalg::matmul::matmul;
use faer::{Accum, Par};
use faer_ext::IntoFaer;
use ndarray::{Array2, ArrayView2};
use sfb_core::{Evaluation, Evaluator, Model, ModelError, SvList};

use crate::{Example, Features};

/// Multiclass logistic regression over `classes` classes and `features` features.
#[derive(Debug, Clone)]
pub struct Mlr {
    classes: usize,
    features: usize,
}

impl Mlr {
    /// An MLR model for a `classes × features` W.
    pub fn new(classes: usize, features: usize) -> Self {
        Self { classes, features }
    }

    /// `(J, D)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.classes, self.features)
    }
}

/// Writes the logits `W a` of every sample into `out` (`K × J`, row-major).
/// Dense batches use one GEMM; sparse samples gather the columns they touch.
pub(crate) fn logits(w: ArrayView2<'_, f32>, batch: &[&Example], out: &mut Array2<f32>) {
    let (j, d) = w.dim();
    let k = batch.len();
    *out = Array2::zeros((k, j));
    if batch.iter().all(|e| matches!(e.x, Features::Dense(_))) && k > 0 {
        let mut x = Array2::<f32>::zeros((k, d));
        for (mut row, e) in x.rows_mut().into_iter().zip(batch) {
            if let Features::Dense(v) = &e.x {
                row.as_slice_mut().expect("row").copy_from_slice(v);
            }
        }
        matmul(
            out.view_mut().into_faer(),
            Accum::Replace,
            x.view().into_faer(),
            w.t().into_faer(),
            1.0f32,
            gemm_par(k * j * d),
        );
        return;
    }
    let ws = w.as_standard_layout();
    let ws = ws.as_slice().expect("standard layout");
    for (i, e) in batch.iter().enumerate() {
        for c in 0..j {
            out[[i, c]] = e.x.dot(&ws[c * d..(c + 1) * d]);
        }
    }
}

/// Threads for a GEMM of `macs` multiply-adds: below ~16M (a few hundred µs) handing it
/// to the rayon pool costs more in wake-ups than it saves (a mini-batch's logits at
/// J = D = 128 is 0.3M), so it runs on the calling thread.
pub(crate) fn gemm_par(macs: usize) -> Par {
    if macs < 1 << 24 {
        Par::Seq
    } else {
        Par::rayon(0)
    }
}

/// In place: logits → probabilities; returns `log Σ exp` (for the loss).
pub(crate) fn softmax(z: &mut [f32]) -> f32 {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut s = 0f32;
    for x in z.iter_mut() {
        *x = (*x - m).exp();
        s += *x;
    }
    for x in z.iter_mut() {
        *x /= s;
    }
    m + s.ln()
}

pub(crate) fn check(e: &Example, index: usize, j: usize, d: usize) -> Result<(), ModelError> {
    if e.y as usize >= j {
        return Err(ModelError::msg(format!(
            "sample {index}: label {} is not below J = {j}",
            e.y
        )));
    }
    let ok = match &e.x {
        Features::Dense(x) => x.len() == d,
        Features::Sparse { .. } => e.x.min_dim() <= d,
    };
    if !ok {
        return Err(ModelError::msg(format!(
            "sample {index}: features do not fit D = {d}"
        )));
    }
    Ok(())
}

impl Model for Mlr {
    type Sample = Example;

    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let (j, d) = w.dim();
        for (i, e) in batch.iter().enumerate() {
            check(e, i, j, d)?;
        }
        let mut z = Array2::zeros((0, 0));
        logits(w, batch, &mut z);
        for (mut row, e) in z.rows_mut().into_iter().zip(batch) {
            let u = row.as_slice_mut().expect("row");
            softmax(u);
            u[e.y as usize] -= 1.0;
            match &e.x {
                Features::Dense(x) => sv.push_dense(u, x)?,
                Features::Sparse { indices, values } => sv.push_sparse(u, indices, values)?,
            }
        }
        Ok(())
    }

    /// One pair per sample, from W and the sample alone.
    fn separable(&self) -> bool {
        true
    }

    /// `u` of zeros (the scores are not computed), `v` the sample's features as
    /// `compute_sv` sends them: sparse data keeps its sparse frames and their sizes.
    fn timing_sv(
        &mut self,
        (j, _): (usize, usize),
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let u = vec![0.0; j];
        for e in batch {
            match &e.x {
                Features::Dense(x) => sv.push_dense(&u, x)?,
                Features::Sparse { indices, values } => sv.push_sparse(&u, indices, values)?,
            }
        }
        Ok(())
    }
}

/// Mean cross-entropy and accuracy of W on `data`.
pub fn evaluate(w: ArrayView2<'_, f32>, data: &[Example]) -> Evaluation {
    if data.is_empty() {
        return Evaluation::new(f64::NAN, None);
    }
    let mut loss = 0f64;
    let mut correct = 0usize;
    let mut z = Array2::zeros((0, 0));
    for chunk in data.chunks(256) {
        let refs: Vec<&Example> = chunk.iter().collect();
        logits(w, &refs, &mut z);
        for (row, e) in z.rows().into_iter().zip(chunk) {
            let row = row.as_slice().expect("row");
            let y = e.y as usize;
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f32>().ln();
            loss += f64::from(lse - row.get(y).copied().unwrap_or(f32::NEG_INFINITY));
            let arg = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &x)| if x > b.1 { (i, x) } else { b },
                )
                .0;
            correct += usize::from(arg == y);
        }
    }
    Evaluation::new(
        loss / data.len() as f64,
        Some(correct as f64 / data.len() as f64),
    )
}

/// Held-out evaluation of MLR: mean cross-entropy and accuracy.
#[derive(Debug, Clone)]
pub struct MlrEvaluator {
    data: std::sync::Arc<Vec<Example>>,
}

impl MlrEvaluator {
    /// Evaluates on `data`.
    pub fn new(data: std::sync::Arc<Vec<Example>>) -> Self {
        Self { data }
    }
}

impl Evaluator for MlrEvaluator {
    fn evaluate(&mut self, w: ArrayView2<'_, f32>) -> Evaluation {
        evaluate(w, &self.data)
    }
}
