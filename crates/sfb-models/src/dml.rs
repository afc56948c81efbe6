//! Distance metric learning (Weinberger-style, with a linear projection).
//!
//! W is the projection `L ∈ R^{k×d}`; the learned distance is `‖L(x − y)‖²`. For each
//! sample of the mini-batch the model draws one *similar* partner (same class) and one
//! *dissimilar* partner (another class) from its peer's shard. The loss is
//! `‖Lδ‖²` for a similar pair (pull) and the hinge `max(0, m − ‖Lδ‖²)` for a dissimilar
//! pair (push), `δ = x − y`. The gradient of `‖Lδ‖²` in L is `2 L δ δᵀ`, so a pair's
//! factors are `u = s · 2Lδ` (s = 1 for a similar pair, −1 for an active dissimilar pair;
//! inactive ones send nothing) and `v = δ`. The engine's step is averaged over all sampled
//! pairs, active or not.
//!
//! Evaluation classifies held-out samples by their nearest training sample (1-NN) in the
//! learned metric and, for comparison, in the Euclidean one.

use std::sync::Arc;

use ndarray::{Array2, ArrayView2};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sfb_core::{Evaluation, Evaluator, Model, ModelError, SvList};

use crate::{Example, synthetic};

/// Metric learning for one peer; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Dml {
    latent: usize,
    features: usize,
    margin: f32,
    pool: Arc<Vec<Example>>,
    by_class: Vec<Vec<usize>>,
    rng: ChaCha8Rng,
    sampled: usize,
}

impl Dml {
    /// A `latent × features` projection learned from pairs drawn out of `pool` (this peer's
    /// shard) with hinge margin `margin`; `seed` drives the pair sampling.
    ///
    /// # Errors
    /// [`crate::Error::Parameter`] for a non-positive margin or a pool with fewer than two
    /// classes.
    pub fn new(
        latent: usize,
        features: usize,
        margin: f32,
        pool: Arc<Vec<Example>>,
        seed: u64,
    ) -> crate::Result<Self> {
        if !(margin.is_finite() && margin > 0.0) {
            return Err(crate::Error::Parameter {
                name: "margin",
                value: margin.to_string(),
                reason: "must be positive".into(),
            });
        }
        let classes = pool.iter().map(|e| e.y as usize + 1).max().unwrap_or(0);
        let mut by_class = vec![Vec::new(); classes];
        for (i, e) in pool.iter().enumerate() {
            by_class[e.y as usize].push(i);
        }
        if by_class.iter().filter(|c| !c.is_empty()).count() < 2 {
            return Err(crate::Error::Parameter {
                name: "labels",
                value: format!("{classes} class(es)"),
                reason: "metric learning needs samples of at least two classes".into(),
            });
        }
        Ok(Self {
            latent,
            features,
            margin,
            pool,
            by_class,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0xd31_0000_beef),
            sampled: 0,
        })
    }

    fn partner(&mut self, y: u32, similar: bool) -> Option<usize> {
        if similar {
            let c = self.by_class.get(y as usize).filter(|c| !c.is_empty())?;
            return Some(c[self.rng.random_range(0..c.len())]);
        }
        // A uniformly drawn sample of another class (rejection; ≥ 2 classes exist).
        for _ in 0..1000 {
            let i = self.rng.random_range(0..self.pool.len());
            if self.pool[i].y != y {
                return Some(i);
            }
        }
        None
    }
}

/// The starting projection: a seeded Gaussian `latent × features` matrix scaled so that
/// the mean learned distance of random pairs of `train` is about 1 (the hinge margin).
pub fn init_projection(
    train: &[Example],
    latent: usize,
    features: usize,
    seed: u64,
) -> Array2<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x001a_7e17);
    let mut mean_sq = 0f64;
    let pairs = 256.min(train.len());
    let (mut a, mut b) = (vec![0f32; features], vec![0f32; features]);
    for _ in 0..pairs {
        let i = rng.random_range(0..train.len());
        let j = rng.random_range(0..train.len());
        train[i].x.write_dense(&mut a);
        train[j].x.write_dense(&mut b);
        mean_sq += a
            .iter()
            .zip(&b)
            .map(|(p, q)| f64::from((p - q) * (p - q)))
            .sum::<f64>();
    }
    let mean_sq = (mean_sq / pairs.max(1) as f64).max(1e-12);
    let scale = (1.0 / (latent as f64 * mean_sq).sqrt()) as f32;
    Array2::from_shape_fn((latent, features), |_| synthetic::normal(&mut rng) * scale)
}

/// `L δ` into `out`.
fn project(l: &[f32], features: usize, delta: &[f32], out: &mut [f32]) {
    for (o, row) in out.iter_mut().zip(l.chunks_exact(features)) {
        *o = crate::dot(row, delta);
    }
}

impl Model for Dml {
    /// The pair sampler's position in its stream (its seed is the constructor's).
    fn save_state(&self) -> Vec<u8> {
        let pos = self.rng.get_word_pos();
        sfb_core::checkpoint::ByteWriter::new()
            .u64(pos as u64)
            .u64((pos >> 64) as u64)
            .finish()
    }

    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        let mut r = sfb_core::checkpoint::ByteReader::new(bytes);
        let lo = r.u64().map_err(ModelError::msg)?;
        let hi = r.u64().map_err(ModelError::msg)?;
        r.finish().map_err(ModelError::msg)?;
        self.rng
            .set_word_pos(u128::from(lo) | (u128::from(hi) << 64));
        Ok(())
    }

    type Sample = Example;

    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let (k, d) = w.dim();
        if (k, d) != (self.latent, self.features) {
            return Err(ModelError::msg(format!(
                "projection is {k}×{d}, expected {}×{}",
                self.latent, self.features
            )));
        }
        let l = w.as_standard_layout();
        let l = l.as_slice().expect("standard layout");
        let (mut x, mut y, mut delta) = (vec![0f32; d], vec![0f32; d], vec![0f32; d]);
        let mut ld = vec![0f32; k];
        self.sampled = 0;
        for (i, e) in batch.iter().enumerate() {
            if e.x.min_dim() > d {
                return Err(ModelError::msg(format!(
                    "sample {i} (id {}) has more than {d} features",
                    e.id
                )));
            }
            e.x.write_dense(&mut x);
            for similar in [true, false] {
                let Some(p) = self.partner(e.y, similar) else {
                    continue;
                };
                self.sampled += 1;
                self.pool[p].x.write_dense(&mut y);
                for ((o, a), b) in delta.iter_mut().zip(&x).zip(&y) {
                    *o = a - b;
                }
                project(l, d, &delta, &mut ld);
                let dist: f32 = ld.iter().map(|v| v * v).sum();
                let s = if similar {
                    2.0
                } else if dist < self.margin {
                    -2.0
                } else {
                    continue;
                };
                let (u, v) = sv.next_dense()?;
                for (uo, l) in u.iter_mut().zip(&ld) {
                    *uo = s * l;
                }
                v.copy_from_slice(&delta);
            }
        }
        Ok(())
    }

    /// `−lr / (pairs sampled)`: the mean over every sampled pair, inactive hinges included.
    fn scale(&self, _clock: u64, lr: f32, _pairs: usize) -> f32 {
        if self.sampled == 0 {
            0.0
        } else {
            -lr / self.sampled as f32
        }
    }
}

/// Fraction of `test` whose nearest neighbour in `reference` (after mapping both by
/// `proj`, or Euclidean when `None`) has the same class.
pub fn one_nn_accuracy(
    proj: Option<ArrayView2<'_, f32>>,
    reference: &[Example],
    test: &[Example],
    features: usize,
) -> f64 {
    let proj = proj.map(|p| p.as_standard_layout().into_owned());
    let embed = |e: &Example| -> Vec<f32> {
        let x = e.x.to_dense(features);
        match &proj {
            Some(l) => l
                .rows()
                .into_iter()
                .map(|r| crate::dot(r.as_slice().expect("standard layout"), &x))
                .collect(),
            None => x,
        }
    };
    let refs: Vec<Vec<f32>> = reference.iter().map(embed).collect();
    let correct = test
        .iter()
        .filter(|t| {
            let q = embed(t);
            let best = refs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    (
                        i,
                        r.iter()
                            .zip(&q)
                            .map(|(a, b)| (a - b) * (a - b))
                            .sum::<f32>(),
                    )
                })
                .fold(
                    (usize::MAX, f32::INFINITY),
                    |b, c| if c.1 < b.1 { c } else { b },
                );
            best.0 != usize::MAX && reference[best.0].y == t.y
        })
        .count();
    correct as f64 / test.len().max(1) as f64
}

/// Held-out evaluation: `objective` = mean pair loss on seeded held-out pairs, `accuracy`
/// = 1-NN accuracy in the learned metric (reference: up to `max_reference` training
/// samples; queries: up to `max_test` held-out samples); extras `knn_accuracy` (the same)
/// and `knn_accuracy_euclidean` (computed once).
#[derive(Debug, Clone)]
pub struct DmlEvaluator {
    reference: Vec<Example>,
    test: Vec<Example>,
    pairs: Vec<(usize, usize, bool)>,
    features: usize,
    margin: f32,
    euclidean: f64,
}

impl DmlEvaluator {
    /// Default cap on reference and query samples (1-NN is quadratic).
    pub const MAX_SAMPLES: usize = 2000;

    /// An evaluator over (the first [`MAX_SAMPLES`](Self::MAX_SAMPLES) of) `train` as
    /// reference and `test` as queries.
    pub fn new(
        train: &[Example],
        test: &[Example],
        features: usize,
        margin: f32,
        seed: u64,
    ) -> Self {
        let reference: Vec<Example> = train.iter().take(Self::MAX_SAMPLES).cloned().collect();
        let test: Vec<Example> = test.iter().take(Self::MAX_SAMPLES).cloned().collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xe7a1);
        let mut pairs = Vec::new();
        if test.len() > 1 {
            for i in 0..test.len() {
                for _ in 0..4 {
                    let j = rng.random_range(0..test.len());
                    if j != i {
                        pairs.push((i, j, test[i].y == test[j].y));
                    }
                }
            }
        }
        let euclidean = one_nn_accuracy(None, &reference, &test, features);
        Self {
            reference,
            test,
            pairs,
            features,
            margin,
            euclidean,
        }
    }
}

impl Evaluator for DmlEvaluator {
    fn evaluate(&mut self, l: ArrayView2<'_, f32>) -> Evaluation {
        let emb: Vec<Vec<f32>> = self
            .test
            .iter()
            .map(|e| {
                let x = e.x.to_dense(self.features);
                l.rows()
                    .into_iter()
                    .map(|r| r.iter().zip(&x).map(|(a, b)| a * b).sum())
                    .collect()
            })
            .collect();
        let loss: f64 = self
            .pairs
            .iter()
            .map(|&(i, j, same)| {
                let dist: f32 = emb[i]
                    .iter()
                    .zip(&emb[j])
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum();
                f64::from(if same {
                    dist
                } else {
                    (self.margin - dist).max(0.0)
                })
            })
            .sum();
        let acc = one_nn_accuracy(Some(l), &self.reference, &self.test, self.features);
        Evaluation::new(loss / self.pairs.len().max(1) as f64, Some(acc))
            .with("knn_accuracy", acc)
            .with("knn_accuracy_euclidean", self.euclidean)
    }
}
