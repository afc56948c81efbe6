//! Distance metric learning: neighbourhood components analysis (NCA, Goldberger et al.
//! 2004) on a linear projection, trained by sufficient factors.
//!
//! W is the projection `L ∈ R^{k×d}`; the learned distance is `d(x, y) = ‖L(x − y)‖²`.
//! Each clock a peer draws `candidates` samples of its shard that are not in the
//! mini-batch ([`DEFAULT_CANDIDATES`] unless given); with the batch they form the set `Z`.
//! A batch sample `x` picks another member `c` of `Z` as its stochastic nearest neighbour
//! with probability `p_c = exp(−d(x, c)) / Σ_{c'} exp(−d(x, c'))`;
//! `p = Σ_{c of x's class} p_c` is the probability that this stochastic 1-NN rule labels
//! `x` correctly. The loss is `−ln p` (samples with no neighbour of their class are
//! skipped). Its gradient in L is `2 L Σ_c g_c δ_c δ_cᵀ`, `δ_c = x − c`, with
//! `g_c = [c of x's class] p_c / p − p_c`. Summed over the batch that is `2 L X A Xᵀ`, X the
//! members of Z as columns and `A = Σ g_c (e_x − e_c)(e_x − e_c)ᵀ` a symmetric |Z|×|Z|
//! matrix, so it is exactly one pair per member `z` of Z: `(2 (L X A)_z, z)` — K + C pairs
//! for K samples and C candidates, fewer when a member's column of `L X A` is exactly 0.
//! The members are first centred on their mean, which leaves `X A Xᵀ` unchanged (A's rows
//! sum to 0). The engine's step is averaged over the samples that had a neighbour of
//! their class. The candidates set the bytes per clock; the batch's own samples are
//! neighbours for free.
//!
//! The projection starts at the Euclidean metric ([`init_projection`]): a scaled identity
//! (or, for `k < d`, the top-`k` principal directions), scaled so the median squared
//! distance from a sample to its nearest of 256 others is the `margin` (0.3 by default), which
//! sets how soft the neighbour choice is at the start. Training can then only move away
//! from Euclidean where the neighbour loss improves.
//!
//! Evaluation ([`DmlEvaluator`]) measures the same loss on held-out samples (queries),
//! with seeded candidate sets of the same size drawn from the training set, and classifies
//! every held-out sample by its nearest neighbour among *all* training samples (1-NN),
//! in the learned metric and, for comparison, the Euclidean one.

use std::collections::HashSet;
use std::sync::Arc;

use faer::Accum;
use faer::linalg::matmul::matmul;
use faer_ext::IntoFaer;
use ndarray::{Array2, ArrayView2, Axis};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sfb_core::{Evaluation, Evaluator, Model, ModelError, SvList};

use crate::Example;

/// Candidates drawn per clock besides the mini-batch when none are given (`--candidates`):
/// with a batch of 16, 2K pairs per clock. Of 0, 8, 16, 32, 64, 128 and 256 measured on
/// the five sets of docs/concepts.md (`scripts/dml_table.sh --candidates`), 0 fell below
/// Euclidean 1-NN; 8 and 16 stayed at or above it (16 with the wider margins) and under an
/// FMS client's bytes per clock on the 200-feature set; 32 and more went over.
pub const DEFAULT_CANDIDATES: usize = 16;
/// Seeded samples whose nearest one sets the starting scale ([`init_projection`]).
pub const INIT_CANDIDATES: usize = 256;
/// The latent rank chosen when it is given as 0: `min(d, AUTO_LATENT)`.
pub const AUTO_LATENT: usize = 64;

/// The rows of the projection for requested rank `latent` (0: `min(features,`
/// [`AUTO_LATENT`]`)`) on `features` features.
pub fn latent_for(latent: usize, features: usize) -> usize {
    if latent == 0 {
        features.clamp(1, AUTO_LATENT)
    } else {
        latent
    }
}

/// Metric learning for one peer; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Dml {
    latent: usize,
    features: usize,
    candidates: usize,
    pool: Arc<Vec<Example>>,
    rng: ChaCha8Rng,
    counted: usize,
}

impl Dml {
    /// A `latent × features` projection learned from neighbours drawn out of `pool` (this
    /// peer's shard): the rest of the mini-batch and `candidates` more samples per clock;
    /// `seed` drives the candidate sampling.
    ///
    /// # Errors
    /// [`crate::Error::Parameter`] for a pool with fewer than two classes.
    pub fn new(
        latent: usize,
        features: usize,
        candidates: usize,
        pool: Arc<Vec<Example>>,
        seed: u64,
    ) -> crate::Result<Self> {
        let mut classes: Vec<u32> = pool.iter().map(|e| e.y).collect();
        classes.sort_unstable();
        classes.dedup();
        if classes.len() < 2 {
            return Err(crate::Error::Parameter {
                name: "labels",
                value: format!("{} class(es)", classes.len()),
                reason: "metric learning needs samples of at least two classes".into(),
            });
        }
        Ok(Self {
            latent,
            features,
            candidates,
            pool,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0xd31_0000_beef),
            counted: 0,
        })
    }
}

/// The rows of `rows` as a dense `n × d` matrix.
fn dense<'a>(rows: impl ExactSizeIterator<Item = &'a Example>, d: usize) -> Array2<f32> {
    let mut x = Array2::zeros((rows.len(), d));
    for (mut row, e) in x.rows_mut().into_iter().zip(rows) {
        e.x.write_dense(row.as_slice_mut().expect("standard layout"));
    }
    x
}

/// `a · bᵀ` (one GEMM).
fn gemm_nt(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>) -> Array2<f32> {
    let mut out = Array2::zeros((a.nrows(), b.nrows()));
    matmul(
        out.view_mut().into_faer(),
        Accum::Replace,
        a.into_faer(),
        b.t().into_faer(),
        1.0f32,
        crate::mlr::gemm_par(a.nrows() * b.nrows() * a.ncols()),
    );
    out
}

/// The neighbour loss of one query: `q` and the candidates `cands` are embedded (rows of
/// length k); `same(c)` is `Some(true)` for a candidate of the query's class, `Some(false)`
/// for another class, `None` for one to leave out (the query itself). Writes the weights
/// `g_c = [same] p_c / p − p_c` into `g` (0 for those left out) and returns `−ln p`, or
/// `None` when no candidate is of the query's class (then `g` is all 0).
fn neighbour_loss(
    q: &[f32],
    cands: ArrayView2<'_, f32>,
    same: impl Fn(usize) -> Option<bool>,
    g: &mut Vec<f32>,
) -> Option<f64> {
    let m = cands.nrows();
    g.clear();
    g.resize(m, 0.0);
    // Squared distances (as f64 for the softmax); left-out ones stay +∞.
    let mut dist = vec![f64::INFINITY; m];
    let mut any_same = false;
    for (c, row) in cands.rows().into_iter().enumerate() {
        match same(c) {
            None => continue,
            Some(s) => any_same |= s,
        }
        dist[c] = row
            .iter()
            .zip(q)
            .map(|(a, b)| f64::from(a - b) * f64::from(a - b))
            .sum();
    }
    if !any_same {
        return None;
    }
    // Log-sum-exp over all candidates and over the query's class, each from its own
    // minimum, so nothing underflows.
    let is_same = |c: usize| same(c) == Some(true);
    let min_all = dist.iter().copied().fold(f64::INFINITY, f64::min);
    let min_own = (0..m)
        .filter(|&c| is_same(c))
        .map(|c| dist[c])
        .fold(f64::INFINITY, f64::min);
    let (mut all, mut own) = (0f64, 0f64);
    for (c, &dc) in dist.iter().enumerate() {
        all += (min_all - dc).exp();
        if is_same(c) {
            own += (min_own - dc).exp();
        }
    }
    for (c, gc) in g.iter_mut().enumerate() {
        let p = (min_all - dist[c]).exp() / all;
        *gc = if is_same(c) {
            ((min_own - dist[c]).exp() / own - p) as f32
        } else {
            -p as f32
        };
    }
    // −ln p = (min_own − ln own) − (min_all − ln all).
    Some((min_own - own.ln()) - (min_all - all.ln()))
}

/// The starting projection, the same on every peer: rows of the identity (for
/// `latent ≥ features`; rows past `features` are 0) or, for `latent < features`, the top
/// `latent` principal directions of (up to 2,000 seeded samples of) `train`; scaled so that
/// the median, over 64 seeded samples, of the squared distance to the nearest of
/// [`INIT_CANDIDATES`] seeded others is `margin`. A projection that starts at the (scaled)
/// Euclidean metric, so training starts from Euclidean 1-NN.
pub fn init_projection(
    train: &[Example],
    latent: usize,
    features: usize,
    margin: f32,
    seed: u64,
) -> Array2<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x001a_7e17);
    let n = train.len();
    let mut base = Array2::<f32>::zeros((latent, features));
    if latent >= features || n < 2 {
        for i in 0..latent.min(features) {
            base[[i, i]] = 1.0;
        }
    } else {
        let idx = rand::seq::index::sample(&mut rng, n, n.min(2000)).into_vec();
        let mut x = dense(idx.iter().map(|&i| &train[i]), features);
        let mean = x.mean_axis(Axis(0)).expect("rows");
        x -= &mean;
        match x.view().into_faer().thin_svd() {
            Ok(svd) => {
                let v = svd.V();
                for r in 0..latent.min(v.ncols()) {
                    for c in 0..features {
                        base[[r, c]] = v[(c, r)];
                    }
                }
            }
            Err(_) => {
                for i in 0..latent {
                    base[[i, i]] = 1.0;
                }
            }
        }
    }
    if n < 2 {
        return base;
    }
    let queries = rand::seq::index::sample(&mut rng, n, n.min(64)).into_vec();
    let cands = rand::seq::index::sample(&mut rng, n, n.min(INIT_CANDIDATES)).into_vec();
    let zq = gemm_nt(
        dense(queries.iter().map(|&i| &train[i]), features).view(),
        base.view(),
    );
    let zc = gemm_nt(
        dense(cands.iter().map(|&i| &train[i]), features).view(),
        base.view(),
    );
    let mut nearest: Vec<f32> = queries
        .iter()
        .zip(zq.rows())
        .filter_map(|(&qi, q)| {
            cands
                .iter()
                .zip(zc.rows())
                .filter(|&(&ci, _)| ci != qi)
                .map(|(_, c)| c.iter().zip(&q).map(|(a, b)| (a - b) * (a - b)).sum())
                .filter(|&d: &f32| d > 0.0)
                .reduce(f32::min)
        })
        .collect();
    nearest.sort_by(f32::total_cmp);
    let median = nearest.get(nearest.len() / 2).copied().unwrap_or(1.0);
    base *= (margin / median.max(1e-12)).sqrt();
    base
}

impl Model for Dml {
    /// The candidate sampler's position in its stream (its seed is the constructor's).
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
        for (i, e) in batch.iter().enumerate() {
            if e.x.min_dim() > d {
                return Err(ModelError::msg(format!(
                    "sample {i} (id {}) has more than {d} features",
                    e.id
                )));
            }
        }
        self.counted = 0;
        // Z: the batch, then up to `candidates` samples of the shard not in the batch.
        let n = self.pool.len();
        let in_batch: HashSet<u32> = batch.iter().map(|e| e.id).collect();
        let extra = self.candidates.min(n);
        let mut members: Vec<&Example> = batch.to_vec();
        members.extend(
            rand::seq::index::sample(&mut self.rng, n, (extra + batch.len()).min(n))
                .into_iter()
                .map(|i| &self.pool[i])
                .filter(|c| !in_batch.contains(&c.id))
                .take(extra),
        );
        let m = members.len();
        let mut x = dense(members.iter().copied(), d);
        // Centred on Z's mean: A's rows sum to 0, so Z A Zᵀ is unchanged, and the rank-1
        // terms below do not cancel large offsets in f32.
        let mean = x.mean_axis(Axis(0)).expect("a member");
        x -= &mean;
        let z = gemm_nt(x.view(), w);
        // A = Σ_i Σ_j g_ij (e_i − e_j)(e_i − e_j)ᵀ over batch samples i and their
        // neighbours j ∈ Z \ {i}: Σ_ij g_ij δ_ij δ_ijᵀ = X A Xᵀ.
        let mut a = Array2::<f32>::zeros((m, m));
        let mut g = Vec::new();
        for (i, e) in batch.iter().enumerate() {
            let q = z.row(i);
            let q = q.as_slice().expect("standard layout");
            let same = |c: usize| {
                let p = members[c];
                (p.id != e.id).then_some(p.y == e.y)
            };
            if neighbour_loss(q, z.view(), same, &mut g).is_none() {
                continue;
            }
            self.counted += 1;
            for (j, &gj) in g.iter().enumerate() {
                if gj != 0.0 {
                    a[[i, i]] += gj;
                    a[[j, j]] += gj;
                    a[[i, j]] -= gj;
                    a[[j, i]] -= gj;
                }
            }
        }
        // ∇ = 2 L X A Xᵀ = Σ_j (2 (A Z)_j) x_jᵀ: one pair per member of Z, none for a
        // member whose column of A Z is exactly 0.
        let az = a.dot(&z);
        for (j, u_j) in az.rows().into_iter().enumerate() {
            if u_j.iter().all(|&v| v == 0.0) {
                continue;
            }
            let (u, v) = sv.next_dense()?;
            for (uo, &val) in u.iter_mut().zip(&u_j) {
                *uo = 2.0 * val;
            }
            v.copy_from_slice(x.row(j).as_slice().expect("standard layout"));
        }
        Ok(())
    }

    /// What `compute_sv` sends at most: one pair per sample and one per candidate.
    fn timing_sv(
        &mut self,
        (j, d): (usize, usize),
        batch: &[&Example],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let (u, v) = (vec![0.0; j], vec![0.0; d]);
        for _ in 0..batch.len() + self.pool.len().min(self.candidates) {
            sv.push_dense(&u, &v)?;
        }
        Ok(())
    }

    /// `−lr / (samples counted)`: the mean over the batch's samples that had a candidate
    /// of their class.
    fn scale(&self, _clock: u64, lr: f32, _pairs: usize) -> f32 {
        if self.counted == 0 {
            0.0
        } else {
            -lr / self.counted as f32
        }
    }
}

/// Fraction of `test` (rows, labels `test_y`) whose nearest row of `reference` (labels
/// `ref_y`) has the same label; squared Euclidean distances, computed by GEMM in blocks of
/// 256 queries; ties go to the first reference row.
///
/// # Complexity
/// `O(q · n · k)` time for `q` queries, `n` reference rows of length `k`; `O(256 · n)`
/// extra memory.
pub fn one_nn_accuracy(
    reference: ArrayView2<'_, f32>,
    ref_y: &[u32],
    test: ArrayView2<'_, f32>,
    test_y: &[u32],
) -> f64 {
    if test.nrows() == 0 || reference.nrows() == 0 {
        return 0.0;
    }
    let norms: Vec<f32> = reference
        .rows()
        .into_iter()
        .map(|r| r.iter().map(|v| v * v).sum())
        .collect();
    let mut correct = 0usize;
    for (b, block) in test.axis_chunks_iter(Axis(0), 256).enumerate() {
        let dots = gemm_nt(block, reference);
        for (i, row) in dots.rows().into_iter().enumerate() {
            let best = row
                .iter()
                .zip(&norms)
                .map(|(dot, nr)| nr - 2.0 * dot)
                .enumerate()
                .fold((0, f32::INFINITY), |b, c| if c.1 < b.1 { c } else { b });
            correct += usize::from(ref_y[best.0] == test_y[b * 256 + i]);
        }
    }
    correct as f64 / test.nrows() as f64
}

/// Held-out evaluation. `objective`: the training loss (mean `−ln p`, see the
/// [module docs](self)) of the held-out samples, each against a seeded set of
/// `15 + candidates` training samples (one set per 16 queries, fixed for the run: a
/// training sample's neighbours in a batch of 16), over the samples with a candidate of
/// their class. `accuracy`: 1-NN accuracy of every held-out
/// sample against *every* training sample in the learned metric. Extras:
/// `knn_accuracy` (the same), `knn_accuracy_euclidean` (computed once),
/// `knn_reference` (the reference set's size), `neighbour_p` (mean `p`, the stochastic
/// 1-NN rule's held-out accuracy).
#[derive(Debug, Clone)]
pub struct DmlEvaluator {
    reference: Array2<f32>,
    ref_y: Vec<u32>,
    test: Array2<f32>,
    test_y: Vec<u32>,
    candidates: Vec<Vec<usize>>,
    euclidean: f64,
}

impl DmlEvaluator {
    /// Queries per candidate set: the default mini-batch.
    pub const BLOCK: usize = 16;

    /// An evaluator with all of `train` as reference and `test` as queries; each block of
    /// [`BLOCK`](Self::BLOCK) queries shares `BLOCK − 1 + candidates` neighbours, as many
    /// as a training sample has in a default mini-batch with [`Dml`]'s `candidates`;
    /// `seed` draws the candidate sets.
    pub fn new(
        train: &[Example],
        test: &[Example],
        features: usize,
        candidates: usize,
        seed: u64,
    ) -> Self {
        let reference = dense(train.iter(), features);
        let test_m = dense(test.iter(), features);
        let ref_y: Vec<u32> = train.iter().map(|e| e.y).collect();
        let test_y: Vec<u32> = test.iter().map(|e| e.y).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xe7a1);
        let n = train.len();
        let candidates = (0..test.len().div_ceil(Self::BLOCK))
            .map(|_| {
                rand::seq::index::sample(&mut rng, n, n.min(Self::BLOCK - 1 + candidates))
                    .into_vec()
            })
            .collect();
        let euclidean = one_nn_accuracy(reference.view(), &ref_y, test_m.view(), &test_y);
        Self {
            reference,
            ref_y,
            test: test_m,
            test_y,
            candidates,
            euclidean,
        }
    }
}

impl Evaluator for DmlEvaluator {
    fn evaluate(&mut self, l: ArrayView2<'_, f32>) -> Evaluation {
        let zr = gemm_nt(self.reference.view(), l);
        let zt = gemm_nt(self.test.view(), l);
        let acc = one_nn_accuracy(zr.view(), &self.ref_y, zt.view(), &self.test_y);
        let (mut loss, mut p, mut counted) = (0f64, 0f64, 0usize);
        let mut g = Vec::new();
        for (b, cand) in self.candidates.iter().enumerate() {
            let zc = zr.select(Axis(0), cand);
            for i in b * Self::BLOCK..((b + 1) * Self::BLOCK).min(zt.nrows()) {
                let y = self.test_y[i];
                let same = |c: usize| Some(self.ref_y[cand[c]] == y);
                let q = zt.row(i);
                if let Some(li) = neighbour_loss(
                    q.as_slice().expect("standard layout"),
                    zc.view(),
                    same,
                    &mut g,
                ) {
                    loss += li;
                    p += (-li).exp();
                    counted += 1;
                }
            }
        }
        let c = counted.max(1) as f64;
        Evaluation::new(loss / c, Some(acc))
            .with("knn_accuracy", acc)
            .with("knn_accuracy_euclidean", self.euclidean)
            .with("knn_reference", self.ref_y.len() as f64)
            .with("neighbour_p", p / c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Features, synthetic};
    use rand::Rng;
    use sfb_core::PeerId;

    fn example(x: Vec<f32>, y: u32, id: u32) -> Example {
        Example::new(Features::Dense(x), y, id)
    }

    /// Two classes told apart by feature 0 (means ±1, sd 0.5) and three noise features of
    /// sd 5 that swamp the Euclidean distance; unscaled.
    fn noisy(n: usize, seed: u64, id0: u32) -> Vec<Example> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|i| {
                let y = (i % 2) as u32;
                let mut x = vec![if y == 0 { -1.0 } else { 1.0 }];
                x[0] += 0.5 * synthetic::normal(&mut rng);
                x.extend((0..3).map(|_| 5.0 * synthetic::normal(&mut rng)));
                example(x, y, id0 + i as u32)
            })
            .collect()
    }

    /// `Σ_queries −ln p` against every other sample of `pool`, in f64, straight from the
    /// definition (the slow reference for the factors and the evaluator).
    fn reference_loss(l: &Array2<f64>, queries: &[Example], pool: &[Example]) -> (f64, usize) {
        let d = l.ncols();
        let emb = |e: &Example| {
            let x: Vec<f64> = e.x.to_dense(d).iter().map(|&v| f64::from(v)).collect();
            l.rows()
                .into_iter()
                .map(|r| r.iter().zip(&x).map(|(a, b)| a * b).sum::<f64>())
                .collect::<Vec<f64>>()
        };
        let (mut total, mut counted) = (0f64, 0usize);
        for q in queries {
            let zq = emb(q);
            let (mut all, mut own) = (0f64, 0f64);
            for c in pool.iter().filter(|c| c.id != q.id) {
                let zc = emb(c);
                let e = (-zq
                    .iter()
                    .zip(&zc)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum::<f64>())
                .exp();
                all += e;
                if c.y == q.y {
                    own += e;
                }
            }
            if own > 0.0 {
                total -= (own / all).ln();
                counted += 1;
            }
        }
        (total, counted)
    }

    /// The factors of a batch are the exact gradient of its summed loss, one pair per
    /// member of Z at most: Σ u vᵀ against central differences of the reference loss, with
    /// every other sample of a 40-sample shard as a neighbour (32 candidates besides a
    /// batch of 8) and with the batch alone (no candidates).
    #[test]
    fn factors_are_the_gradient_of_the_neighbour_loss() {
        let pool = noisy(40, 3, 0);
        let (k, d) = (3, 4);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let w = Array2::from_shape_fn((k, d), |_| 0.3 * synthetic::normal(&mut rng));
        let batch: Vec<&Example> = pool.iter().step_by(5).collect();
        let queries: Vec<Example> = batch.iter().map(|&e| e.clone()).collect();
        for (candidates, neighbours) in [(32, &pool), (0, &queries)] {
            let mut model = Dml::new(k, d, candidates, Arc::new(pool.clone()), 7).unwrap();
            let mut sv = SvList::new(k, d);
            model.compute_sv(w.view(), &batch, &mut sv).unwrap();
            let fb = sv.to_batch(PeerId(0), 0, 1.0);
            assert!(fb.len() <= batch.len() + candidates, "{} pairs", fb.len());
            let mut grad = Array2::<f64>::zeros((k, d));
            for p in 0..fb.len() {
                for (r, &u) in fb.u_row(p).iter().enumerate() {
                    for (c, v) in fb.v_row(p).entries() {
                        grad[[r, c]] += f64::from(u) * f64::from(v);
                    }
                }
            }
            let w64 = w.mapv(f64::from);
            let h = 1e-5;
            let largest = grad.iter().fold(0f64, |m, g| m.max(g.abs()));
            assert!(largest > 0.0);
            for r in 0..k {
                for c in 0..d {
                    let (mut plus, mut minus) = (w64.clone(), w64.clone());
                    plus[[r, c]] += h;
                    minus[[r, c]] -= h;
                    let numeric = (reference_loss(&plus, &queries, neighbours).0
                        - reference_loss(&minus, &queries, neighbours).0)
                        / (2.0 * h);
                    // f32 arithmetic.
                    assert!(
                        (numeric - grad[[r, c]]).abs() <= 1e-4 * largest,
                        "C = {candidates}, ∂/∂L[{r},{c}]: factors {} vs numeric {numeric} \
                         (largest {largest})",
                        grad[[r, c]]
                    );
                }
            }
            let (_, counted) = reference_loss(&w64, &queries, neighbours);
            assert_eq!(model.counted, counted);
        }
    }

    /// The held-out objective is the training loss: with 64 candidates (sets of 79) and 60
    /// training samples every one is a neighbour, and the evaluator's mean `−ln p` matches the reference.
    #[test]
    fn evaluation_reports_the_training_loss() {
        let (train, test) = (noisy(60, 1, 0), noisy(30, 2, 1000));
        let l = init_projection(&train, 4, 4, 0.3, 1);
        let ev = DmlEvaluator::new(&train, &test, 4, 64, 1).evaluate(l.view());
        let (total, counted) = reference_loss(&l.mapv(f64::from), &test, &train);
        let want = total / counted as f64;
        assert!(
            (ev.objective - want).abs() < 1e-4 * want.max(1.0),
            "evaluator {} vs reference {want}",
            ev.objective
        );
        assert_eq!(ev.extra.get("knn_reference"), Some(60.0));
    }

    /// The starting metric is the Euclidean one: same 1-NN accuracy, and the median
    /// nearest-candidate squared distance is the margin.
    #[test]
    fn training_starts_at_the_euclidean_metric() {
        let spec: synthetic::ClusterSpec = "classes=4,features=12,informative=3,samples=600"
            .parse()
            .unwrap();
        let (train, test) = synthetic::clusters(&spec, 4);
        let mut ev = DmlEvaluator::new(&train, &test, 12, DEFAULT_CANDIDATES, 4);
        let full = init_projection(&train, 12, 12, 0.3, 4);
        let e = ev.evaluate(full.view());
        assert_eq!(e.accuracy, e.extra.get("knn_accuracy_euclidean"));
        // Off the diagonal 0, the diagonal one scale.
        let s = full[[0, 0]];
        assert!(s > 0.0);
        for ((r, c), &v) in full.indexed_iter() {
            assert_eq!(v, if r == c { s } else { 0.0 });
        }
        // Principal directions: orthogonal rows of one length.
        let pca = init_projection(&train, 5, 12, 0.3, 4);
        let gram = pca.dot(&pca.t());
        let s2 = gram[[0, 0]];
        for ((r, c), &v) in gram.indexed_iter() {
            let want = if r == c { s2 } else { 0.0 };
            assert!((v - want).abs() < 1e-4 * s2, "LLᵀ[{r},{c}] = {v}");
        }
    }

    /// GEMM 1-NN against a brute-force scan on seeded data.
    #[test]
    fn one_nn_matches_brute_force() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let r = Array2::from_shape_fn((700, 6), |_| synthetic::normal(&mut rng));
        let t = Array2::from_shape_fn((300, 6), |_| synthetic::normal(&mut rng));
        let ry: Vec<u32> = (0..700).map(|i| (i % 3) as u32).collect();
        let ty: Vec<u32> = (0..300).map(|i| (i % 3) as u32).collect();
        let brute = t
            .rows()
            .into_iter()
            .zip(&ty)
            .filter(|(q, y)| {
                let best = r
                    .rows()
                    .into_iter()
                    .map(|x| x.iter().zip(q.iter()).map(|(a, b)| (a - b) * (a - b)).sum())
                    .enumerate()
                    .fold((0, f32::INFINITY), |b, c| if c.1 < b.1 { c } else { b });
                ry[best.0] == **y
            })
            .count() as f64
            / 300.0;
        let fast = one_nn_accuracy(r.view(), &ry, t.view(), &ty);
        assert!((fast - brute).abs() < 1e-12, "{fast} vs {brute}");
    }

    /// Learning: on the noisy two-class problem (Euclidean 1-NN near chance), plain SGD on
    /// the factors learns a metric whose held-out 1-NN accuracy beats Euclidean by a wide
    /// margin, and the held-out loss falls.
    #[test]
    fn learned_metric_beats_euclidean_with_a_noisy_feature() {
        let (train, test) = (noisy(400, 21, 0), noisy(200, 22, 10_000));
        let (k, d) = (4, 4);
        let mut w = init_projection(&train, k, d, 0.3, 1);
        let mut ev = DmlEvaluator::new(&train, &test, d, DEFAULT_CANDIDATES, 1);
        let start = ev.evaluate(w.view());
        let mut model = Dml::new(k, d, DEFAULT_CANDIDATES, Arc::new(train.clone()), 1).unwrap();
        let mut pick = ChaCha8Rng::seed_from_u64(2);
        let mut sv = SvList::new(k, d);
        for _ in 0..300 {
            let batch: Vec<&Example> = (0..16)
                .map(|_| &train[pick.random_range(0..train.len())])
                .collect();
            sv.clear();
            model.compute_sv(w.view(), &batch, &mut sv).unwrap();
            let fb = sv.to_batch(PeerId(0), 0, model.scale(0, 0.002, sv.len()));
            for p in 0..fb.len() {
                for (r, &u) in fb.u_row(p).iter().enumerate() {
                    for (c, v) in fb.v_row(p).entries() {
                        w[[r, c]] += fb.scale * u * v;
                    }
                }
            }
        }
        let end = ev.evaluate(w.view());
        let (learned, euclid) = (
            end.accuracy.unwrap(),
            end.extra.get("knn_accuracy_euclidean").unwrap(),
        );
        assert!(
            learned > euclid + 0.15,
            "learned {learned} vs Euclidean {euclid}"
        );
        assert!(end.objective < start.objective);
    }
}
