//! The least-squares model the examples share: `min ½‖W x − y‖²`, whose gradient
//! `(W x − y) xᵀ` is one factor pair per sample, and its seeded data.
use ndarray::{Array2, ArrayView1, ArrayView2};
use rand::{Rng, SeedableRng};
use sfb::core::{Model, ModelError, SvList};

/// A sample `(x ∈ R^D, y ∈ R^J)`.
pub type Sample = (Vec<f32>, Vec<f32>);

/// Least squares: `u = W x − y` (length J), `v = x` (length D).
pub struct LeastSquares;

impl Model for LeastSquares {
    type Sample = Sample;
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        for (x, y) in batch {
            let u = w.dot(&ArrayView1::from(x)) - ArrayView1::from(y);
            sv.push_dense(&u.to_vec(), x)?;
        }
        Ok(())
    }
}

/// A 3 × 8 `W*` and `n` noise-free samples `(x, W* x)`, `x` uniform in `[−1, 1]⁸`, from
/// seed 7.
#[allow(dead_code)] // one example uses `truth`, the other only the samples
pub fn problem(n: usize) -> (Array2<f32>, Vec<Sample>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut draw = |r, c| Array2::from_shape_fn((r, c), |_| rng.random_range(-1.0..1.0f32));
    let (truth, xs) = (draw(3, 8), draw(n, 8));
    let pair = |x: ArrayView1<'_, f32>| (x.to_vec(), truth.dot(&x).to_vec());
    let data = xs.rows().into_iter().map(pair).collect();
    (truth, data)
}

/// The mean of `½‖W x − y‖²` over held-out samples: the objective a run reports.
#[allow(dead_code)] // used by one example
pub struct HalfMse(pub Vec<Sample>);

impl sfb::core::Evaluator for HalfMse {
    fn evaluate(&mut self, w: ArrayView2<'_, f32>) -> sfb::core::Evaluation {
        let sum: f64 = self
            .0
            .iter()
            .map(|(x, y)| {
                let r = w.dot(&ArrayView1::from(x)) - ArrayView1::from(y);
                0.5 * f64::from(r.dot(&r))
            })
            .sum();
        sfb::core::Evaluation::new(sum / self.0.len().max(1) as f64, None)
    }
}
