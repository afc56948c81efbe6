//! A user's model, not in `sfb-models`: least squares `min ½‖W x − y‖²`, whose gradient
//! `(W x − y) xᵀ` is one factor pair per sample, on 4 peers under BSP: full broadcast
//! recovers W; partial broadcast (Q = 2; no relaying, so replicas drift) gets close.
use ndarray::{Array2, ArrayView1, ArrayView2};
use rand::{Rng, SeedableRng};
use sfb::core::{Model, ModelError, SvList};
use sfb::harness::Cluster;

/// Least squares: `u = W x − y` (length J), `v = x` (length D).
struct LeastSquares;

impl Model for LeastSquares {
    type Sample = (Vec<f32>, Vec<f32>); // (x ∈ R^D, y ∈ R^J)
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

fn main() -> anyhow::Result<()> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut draw = |r, c| Array2::from_shape_fn((r, c), |_| rng.random_range(-1.0..1.0f32));
    let (truth, xs) = (draw(3, 8), draw(4000, 8));
    let pair = |x: ArrayView1<'_, f32>| (x.to_vec(), truth.dot(&x).to_vec());
    let data: Vec<_> = xs.rows().into_iter().map(pair).collect();
    let cluster = || {
        Cluster::builder()
            .peers(4)
            .model(|_| LeastSquares)
            .init_w(Array2::zeros((3, 8)))
            .data(data.clone())
            .clocks(200)
            .lr(0.2)
    };
    let (full, partial) = (cluster().run_mem()?, cluster().out_degree(2).run_mem()?);
    for (name, run, within) in [("full", full, 1e-3), ("Q=2", partial, 1.0)] {
        let w = run.peers[0].engine.replica().w();
        let err = (&w - &truth).mapv(f32::abs).sum();
        println!("{name:>4} broadcast, 4 peers, 200 clocks: Σ|W − W*| = {err:.2e}");
        anyhow::ensure!(err < within, "{name} broadcast did not converge");
    }
    Ok(())
}
