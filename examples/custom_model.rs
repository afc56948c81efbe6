//! A model that is not in `sfb-models`, written by a user: multi-output least squares,
//! `min ½‖W x − y‖²` over `W ∈ R^{J×D}`. Its gradient `(W x − y) xᵀ` is one
//! sufficient-factor pair per sample. Trained on a 4-peer in-memory cluster under BSP with
//! full broadcast; it recovers the W that generated the data.
//!
//! ```text
//! cargo run --example custom_model
//! ```
use ndarray::{Array2, ArrayView1, ArrayView2};
use rand::{Rng, SeedableRng};
use sfb::core::{Config, Engine, Model, ModelError, PeerId, Shard, SvList};

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
    let ((j, d, peers), mut rng) = ((3, 8, 4), rand_chacha::ChaCha8Rng::seed_from_u64(7));
    let mut draw =
        |r: usize, c: usize| Array2::from_shape_fn((r, c), |_| rng.random_range(-1.0..1.0f32));
    let (truth, mut engines) = (draw(j, d), Vec::new());
    for p in 0..peers as u32 {
        let mut cfg = Config::full_broadcast(PeerId(p), peers);
        (cfg.clocks, cfg.batch_size, cfg.lr) = (200, 16, 0.5);
        let (xs, w0) = (draw(1000, d), Array2::zeros((j, d)));
        let rows = xs.rows().into_iter();
        let data = rows.map(|x| (x.to_vec(), truth.dot(&x).to_vec())).collect();
        let shard = Shard::new(data, p.into());
        engines.push(Engine::new(cfg, LeastSquares, w0, shard)?);
    }
    let runs = sfb::net::mem::run(engines, &Default::default())?;
    let w = runs[0].engine.replica().w();
    let err = (&w - &truth).mapv(f32::abs).sum();
    println!("Σ|W − W*| = {err:.2e} after 200 clocks on {peers} peers");
    anyhow::ensure!(err < 1e-3, "did not converge");
    Ok(())
}
