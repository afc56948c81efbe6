//! Low-rank re-compression of a peer's factors with error feedback (`--compress rank:R`).
//!
//! A batch of K pairs already *is* a rank-≤K matrix `A = s·Σ_i u_i v_iᵀ = s·U Vᵀ`
//! (`U` is J×K, `V` is D×K), so its best rank-R approximation is a K×K problem, not a J×D
//! one: thin QR of both halves, `U = Q_u R_u`, `V = Q_v R_v`; SVD of the small core
//! `R_u R_vᵀ = X Σ Yᵀ`; then `A = (Q_u X) Σ (Q_v Y)ᵀ` and the first R singular triples are
//! the best rank-R approximation (Eckart–Young). The peer sends those R pairs, each
//! `(Q_u x_i √σ_i / s, Q_v y_i √σ_i)` under the batch's own scale `s` (so the optimizer
//! sees the same kind of batch: the approximated gradient pairs and the step's scale), and
//! keeps the rest as factor pairs — the **residual** — which it adds to the next clock's
//! pairs before compressing them (error feedback: nothing is lost, it is sent later). The
//! residual is kept in the scaled domain (`s` changes under a learning-rate schedule) and
//! its rank is bounded: at most `max(K, R)` pairs, the smallest singular values beyond that
//! dropped (and counted).
//!
//! Exact when R is at least the rank of (pairs + residual): then nothing is kept back.
//! The receiver's apply is unchanged: it gets pairs.
//!
//! **Sparse `v`** (MLR on sparse data): the decomposition densifies `V`, and the pairs sent
//! are dense. Compression then pays only when `R·(J + D)` is below the batch's stored
//! size (`K·J` plus the nonzeros); a batch that is not worth compressing and has no
//! residual waiting is sent as it is. A dense `v` is always compressed.
//!
//! **Optimizers**: the sent pairs stand for the approximated raw gradient, under the same
//! scale, so every method applies its own rule to them as it would to the originals. For
//! the factored (row/column) statistics they are better than raw pairs: their `v`s are
//! orthogonal, so `Σ_i u_ij² ‖v_i‖²` is exactly the row's sum of squares of the
//! approximated gradient.

use faer::Mat;

use crate::{FactorBatch, VFactors};

/// Relative size below which a singular value counts as zero (of the largest, times the
/// number of columns).
const RANK_TOL: f64 = 64.0 * f64::EPSILON;

/// A factor batch's best rank-R form, and what was kept back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompressStats {
    /// Pairs in (the batch's and the residual's).
    pub pairs_in: usize,
    /// Pairs sent.
    pub pairs_out: usize,
    /// Pairs kept back for the next clock.
    pub residual_pairs: usize,
    /// Squared Frobenius norm of what was dropped beyond the residual's bound (lost).
    pub dropped_sq: f64,
}

/// Which library computes the QR and SVD.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decomposition {
    /// faer (pure Rust): the default.
    #[default]
    Faer,
    /// LAPACK through ndarray-linalg and the system's OpenBLAS (cargo feature `lapack`).
    #[cfg(feature = "lapack")]
    Lapack,
    /// Cholesky factors of the halves' Gram matrices instead of Householder QRs
    /// ([`low_rank_gram`]): `O((J+D)·n²)` in parallel GEMMs and one small SVD; the leading
    /// directions accurate to about 1e-6 of the largest singular value. What
    /// [aggregated apply](crate::aggregate) uses.
    Gram,
}

/// Low-rank re-compression with error feedback, one per sending peer.
#[derive(Debug, Clone)]
pub struct Compressor {
    rank: usize,
    decomposition: Decomposition,
    /// Residual pairs in the scaled domain: `R = res_u · res_vᵀ` (J×m, D×m).
    res_u: Mat<f64>,
    res_v: Mat<f64>,
    /// Squared norm dropped so far (the residual's bound).
    dropped_sq: f64,
    /// The residual's bound in pairs; none: `max(K, R)` for a batch of K pairs.
    cap: Option<usize>,
}

impl Compressor {
    /// A compressor sending at most `rank` pairs per batch (at least 1).
    pub fn new(rank: usize) -> Self {
        Self {
            rank: rank.max(1),
            decomposition: Decomposition::Faer,
            res_u: Mat::zeros(0, 0),
            res_v: Mat::zeros(0, 0),
            dropped_sq: 0.0,
            cap: None,
        }
    }

    /// The same compressor keeping at most `cap` residual pairs, whatever the batch's
    /// size (the rest of what is not sent is dropped and counted).
    pub fn with_residual_cap(mut self, cap: usize) -> Self {
        self.cap = Some(cap);
        self
    }

    /// The same compressor computing its decompositions with `d`.
    pub fn with_decomposition(mut self, d: Decomposition) -> Self {
        self.decomposition = d;
        self
    }

    /// Pairs sent per batch at most.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Keeps pairs up to `rank` from the next batch on (the residual stays).
    pub fn set_rank(&mut self, rank: usize) {
        self.rank = rank;
    }

    /// Pairs kept back for the next batch.
    pub fn residual_pairs(&self) -> usize {
        self.res_u.ncols()
    }

    /// Squared Frobenius norm lost to the residual's rank bound so far.
    pub fn dropped_sq(&self) -> f64 {
        self.dropped_sq
    }

    /// What was kept back, as bytes (for checkpoints): the residual pairs and the squared
    /// norm dropped so far.
    pub fn save_state(&self) -> Vec<u8> {
        let (j, d, m) = (self.res_u.nrows(), self.res_v.nrows(), self.res_u.ncols());
        let mut u = Vec::with_capacity(j * m);
        let mut v = Vec::with_capacity(d * m);
        for p in 0..m {
            u.extend((0..j).map(|i| self.res_u[(i, p)]));
            v.extend((0..d).map(|c| self.res_v[(c, p)]));
        }
        crate::checkpoint::ByteWriter::new()
            .f64s(&[j as f64, d as f64, m as f64, self.dropped_sq])
            .f64s(&u)
            .f64s(&v)
            .finish()
    }

    /// Takes back what [`save_state`](Self::save_state) wrote, for a `j × d` replica; an
    /// empty state is none kept back.
    ///
    /// # Errors
    /// [`crate::Error::Checkpoint`] for bytes of another shape or not finite.
    pub fn restore_state(&mut self, bytes: &[u8], j: usize, d: usize) -> crate::Result<()> {
        let bad = |reason: String| crate::Error::Checkpoint { reason };
        if bytes.is_empty() {
            *self = Self {
                cap: self.cap,
                ..Self::new(self.rank).with_decomposition(self.decomposition)
            };
            return Ok(());
        }
        let mut r = crate::checkpoint::ByteReader::new(bytes);
        let read = |r: &mut crate::checkpoint::ByteReader<'_>, n: Option<usize>| {
            r.f64s(n)
                .map_err(|e| bad(format!("the compressor's state: {e}")))
        };
        let head = read(&mut r, Some(4))?;
        let (sj, sd, m) = (head[0] as usize, head[1] as usize, head[2] as usize);
        let m_ok = m <= j.max(d).max(1) * 1024;
        if (m > 0 && (sj != j || sd != d)) || !m_ok {
            return Err(bad(format!(
                "the compressor's residual is {sj}×{sd} with {m} pairs; W is {j}×{d}"
            )));
        }
        let u = read(&mut r, Some(j * m))?;
        let v = read(&mut r, Some(d * m))?;
        r.finish()
            .map_err(|e| bad(format!("the compressor's state: {e}")))?;
        if !(u.iter().chain(&v).all(|x| x.is_finite()) && head[3].is_finite()) {
            return Err(bad("the compressor's residual is not finite".into()));
        }
        self.res_u = Mat::from_fn(j, m, |i, p| u[p * j + i]);
        self.res_v = Mat::from_fn(d, m, |c, p| v[p * d + c]);
        self.dropped_sq = head[3];
        Ok(())
    }

    /// The residual as a dense J×D matrix (for tests and diagnostics).
    pub fn residual_dense(&self) -> Mat<f64> {
        if self.res_u.ncols() == 0 {
            return Mat::zeros(self.res_u.nrows(), self.res_v.nrows());
        }
        &self.res_u * self.res_v.transpose()
    }

    /// Replaces `fb`'s pairs (plus the residual) by the best rank-`rank` approximation of
    /// their sum, keeping the rest as the new residual; see the [module docs](self).
    pub fn compress(&mut self, fb: FactorBatch) -> (FactorBatch, CompressStats) {
        let (j, d, k) = (fb.j, fb.d, fb.len());
        let m = self.residual_pairs();
        let mut stats = CompressStats {
            pairs_in: k + m,
            pairs_out: k,
            ..CompressStats::default()
        };
        if fb.scale == 0.0 || !fb.scale.is_finite() || (k + m) == 0 {
            return (fb, stats);
        }
        let dense_cost = self.rank * (j + d);
        let stored = fb.u.len() + fb.v.stored_len();
        if m == 0 && (k <= self.rank && matches!(fb.v, VFactors::Dense(_)) || dense_cost >= stored)
        {
            // Exact as it is, or not worth densifying.
            return (fb, stats);
        }
        let s = f64::from(fb.scale);
        let n = k + m;
        let mut u = Mat::<f64>::zeros(j, n);
        let mut v = Mat::<f64>::zeros(d, n);
        for p in 0..k {
            for (i, &x) in fb.u_row(p).iter().enumerate() {
                u[(i, p)] = s * f64::from(x);
            }
            for (c, x) in fb.v_row(p).entries() {
                v[(c, p)] = f64::from(x);
            }
        }
        for q in 0..m {
            for i in 0..j {
                u[(i, k + q)] = self.res_u[(i, q)];
            }
            for c in 0..d {
                v[(c, k + q)] = self.res_v[(c, q)];
            }
        }
        // The residual's bound: the largest max(K, R) of what was not sent (or the cap).
        let cap = self.cap.unwrap_or(k.max(self.rank));
        let split = match self.decomposition {
            Decomposition::Faer => low_rank(&u, &v, self.rank),
            #[cfg(feature = "lapack")]
            Decomposition::Lapack => lapack::low_rank(&u, &v, self.rank),
            Decomposition::Gram => low_rank_gram(&u, &v, self.rank, self.rank + cap),
        };
        let rest = split.sigma.len().saturating_sub(split.kept);
        let keep_back = rest.min(cap);
        let dropped: f64 = split.sigma[split.kept + keep_back..]
            .iter()
            .map(|x| x * x)
            .sum();
        self.dropped_sq += dropped;
        stats.dropped_sq = dropped;
        self.res_u = split.u.subcols(split.kept, keep_back).to_owned();
        self.res_v = split.v.subcols(split.kept, keep_back).to_owned();
        stats.residual_pairs = keep_back;
        stats.pairs_out = split.kept;
        let mut out_u = Vec::with_capacity(split.kept * j);
        let mut out_v = Vec::with_capacity(split.kept * d);
        for p in 0..split.kept {
            out_u.extend((0..j).map(|i| (split.u[(i, p)] / s) as f32));
            out_v.extend((0..d).map(|c| split.v[(c, p)] as f32));
        }
        let out = FactorBatch {
            origin: fb.origin,
            clock: fb.clock,
            scale: fb.scale,
            j,
            d,
            u: out_u,
            v: VFactors::Dense(out_v),
        };
        (out, stats)
    }
}

/// `U Vᵀ` as balanced singular pairs `(u_i √σ_i, v_i √σ_i)`, by decreasing σ, of which the
/// first `kept` are the best rank-`rank` approximation; zero singular values left out.
#[derive(Debug)]
pub(crate) struct Split {
    pub(crate) u: Mat<f64>,
    pub(crate) v: Mat<f64>,
    pub(crate) sigma: Vec<f64>,
    pub(crate) kept: usize,
}

/// Thin QR of both halves, SVD of the small core (module docs). Sequential: these are
/// small problems, and every peer of an in-memory run (or a peer beside its own apply)
/// decomposes at once; faer's default rayon parallelism made a 3 ms decomposition take
/// 60 ms per clock with 8 peers on 2 cores (measured with `--prioritize`).
pub(crate) fn low_rank(u: &Mat<f64>, v: &Mat<f64>, rank: usize) -> Split {
    let qr_u = SeqQr::of(u);
    let qr_v = SeqQr::of(v);
    let core = &qr_u.r * qr_v.r.transpose();
    let (su, sigma, sv) = seq_svd(&core);
    let nonzero = nonzero(&sigma, u.ncols());
    // Q·X without forming Q: the Householder sequence applied to [X; 0].
    let lu = apply_q(&qr_u, su.subcols(0, nonzero));
    let lv = apply_q(&qr_v, sv.subcols(0, nonzero));
    scaled(lu, lv, &sigma[..nonzero], rank)
}

/// Ridge added to a Gram matrix before its Cholesky factorization, relative to its mean
/// diagonal: makes a rank-deficient half factorizable. It cancels out of the product (see
/// [`low_rank_gram`]); it only blurs singular values below about √(ridge) of the largest.
const GRAM_RIDGE: f64 = 1e-12;

/// Singular values below this share of the largest count as zero in [`low_rank_gram`]
/// (well above the ridge's √δ = 1e-6, well below what an update's apply would notice).
const GRAM_ZERO: f64 = 1e-5;

/// [`low_rank`] through the Gram matrices of the halves: with `UᵀU + δI = L_u L_uᵀ`
/// (Cholesky), `U = (U L_u⁻ᵀ) L_uᵀ`, and likewise for `V`, so `U Vᵀ = Q_u (L_uᵀ L_v) Q_vᵀ`
/// and one SVD of the `n×n` core `L_uᵀ L_v = X Σ Yᵀ` gives the pairs `U L_u⁻ᵀ X √Σ` and
/// `V L_v⁻ᵀ Y √Σ`. The big work is two Gram products and the `columns` leading vectors
/// (parallel GEMMs), not Householder sweeps. The ridge δ cancels in the product of all
/// pairs (`L_u⁻ᵀ X Σ Yᵀ L_v⁻¹ = L_u⁻ᵀ L_uᵀ L_v L_v⁻¹`), so only the choice of the leading
/// directions is approximate, to about √δ of the largest singular value.
pub(crate) fn low_rank_gram(u: &Mat<f64>, v: &Mat<f64>, rank: usize, columns: usize) -> Split {
    use faer::linalg::matmul::matmul;
    let n = u.ncols();
    // The lower Cholesky factor of `aᵀa + δI`.
    let factor = |a: &Mat<f64>| -> Mat<f64> {
        let mut g = Mat::<f64>::zeros(n, n);
        matmul(
            g.as_mut(),
            faer::Accum::Replace,
            a.transpose(),
            a.as_ref(),
            1.0,
            faer::Par::rayon(0),
        );
        let mean = (0..n).map(|i| g[(i, i)]).sum::<f64>() / n.max(1) as f64;
        let ridge = GRAM_RIDGE * mean.max(f64::MIN_POSITIVE);
        cholesky(&g, ridge)
    };
    let (lu, lv) = (factor(u), factor(v));
    let core = lu.transpose() * &lv;
    let (x, sigma, y) = seq_svd(&core);
    // The ridge's own directions come out near √δ of the largest: zero here.
    let top = sigma.first().copied().unwrap_or(0.0);
    let nonzero = sigma
        .iter()
        .take_while(|&&x| x > top * GRAM_ZERO && x > 0.0)
        .count();
    let c = nonzero.min(columns);
    // U L_u⁻ᵀ X: solve L_uᵀ M = X for the c leading columns, then one GEMM.
    let left = u * upper_solve(&lu, x.subcols(0, c));
    let right = v * upper_solve(&lv, y.subcols(0, c));
    let mut split = scaled(left, right, &sigma[..c], rank);
    split.sigma = sigma[..nonzero].to_vec();
    split
}

/// The lower Cholesky factor of `g + ridge·I` (`g` symmetric positive semi-definite).
/// A pivot that still comes out non-positive (rounding) is set to the ridge's root.
fn cholesky(g: &Mat<f64>, ridge: f64) -> Mat<f64> {
    let n = g.nrows();
    let mut l = Mat::<f64>::zeros(n, n);
    for j in 0..n {
        let mut diag = g[(j, j)] + ridge;
        for k in 0..j {
            diag -= l[(j, k)] * l[(j, k)];
        }
        let pivot = if diag > ridge * 1e-3 {
            diag.sqrt()
        } else {
            ridge.sqrt()
        };
        l[(j, j)] = pivot;
        for i in j + 1..n {
            let mut x = g[(i, j)];
            for k in 0..j {
                x -= l[(i, k)] * l[(j, k)];
            }
            l[(i, j)] = x / pivot;
        }
    }
    l
}

/// `M` with `Lᵀ M = X` (`L` lower triangular with a positive diagonal).
fn upper_solve(l: &Mat<f64>, x: faer::MatRef<'_, f64>) -> Mat<f64> {
    let n = l.nrows();
    let mut m = x.to_owned();
    for col in 0..m.ncols() {
        for i in (0..n).rev() {
            let mut s = m[(i, col)];
            for k in i + 1..n {
                s -= l[(k, i)] * m[(k, col)];
            }
            m[(i, col)] = s / l[(i, i)];
        }
    }
    m
}

/// A thin QR computed without parallelism: the Householder basis (unit lower
/// trapezoidal), its block coefficients, and the upper-triangular `R` (min(m, n) × n).
struct SeqQr {
    basis: Mat<f64>,
    coeff: Mat<f64>,
    r: Mat<f64>,
}

impl SeqQr {
    fn of(a: &Mat<f64>) -> Self {
        use faer::dyn_stack::{MemBuffer, MemStack};
        use faer::linalg::qr::no_pivoting::factor;
        let (m, n) = a.shape();
        let size = m.min(n);
        let block = factor::recommended_block_size::<f64>(m, n);
        let mut qr = a.clone();
        let mut coeff = Mat::<f64>::zeros(block, size);
        factor::qr_in_place(
            qr.as_mut(),
            coeff.as_mut(),
            faer::Par::Seq,
            MemStack::new(&mut MemBuffer::new(factor::qr_in_place_scratch::<f64>(
                m,
                n,
                block,
                faer::Par::Seq,
                Default::default(),
            ))),
            Default::default(),
        );
        let r = Mat::from_fn(size, n, |i, j| if i <= j { qr[(i, j)] } else { 0.0 });
        let basis = Mat::from_fn(m, size, |i, j| match i.cmp(&j) {
            std::cmp::Ordering::Greater => qr[(i, j)],
            std::cmp::Ordering::Equal => 1.0,
            std::cmp::Ordering::Less => 0.0,
        });
        Self { basis, coeff, r }
    }
}

/// Thin SVD `a = U diag(σ) Vᵀ` (σ decreasing), without parallelism.
fn seq_svd(a: &Mat<f64>) -> (Mat<f64>, Vec<f64>, Mat<f64>) {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::svd::{self, ComputeSvdVectors};
    let (m, n) = a.shape();
    let size = m.min(n);
    let mut u = Mat::<f64>::zeros(m, size);
    let mut v = Mat::<f64>::zeros(n, size);
    let mut s = faer::diag::Diag::<f64>::zeros(size);
    svd::svd(
        a.as_ref(),
        s.as_mut(),
        Some(u.as_mut()),
        Some(v.as_mut()),
        faer::Par::Seq,
        MemStack::new(&mut MemBuffer::new(svd::svd_scratch::<f64>(
            m,
            n,
            ComputeSvdVectors::Thin,
            ComputeSvdVectors::Thin,
            faer::Par::Seq,
            Default::default(),
        ))),
        Default::default(),
    )
    .expect("the SVD of a small finite matrix converges");
    let sv = s.column_vector();
    let sigma = (0..size).map(|i| sv[i]).collect();
    (u, sigma, v)
}

/// `Q_thin · x` for the QR `qr` of a J×n matrix (x has min(J, n) rows).
fn apply_q(qr: &SeqQr, x: faer::MatRef<'_, f64>) -> Mat<f64> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::householder;
    let (rows, cols) = (qr.basis.nrows(), x.ncols());
    let mut out = Mat::<f64>::zeros(rows, cols);
    out.as_mut().subrows_mut(0, x.nrows()).copy_from(x);
    let blocks = qr.coeff.nrows();
    householder::apply_block_householder_sequence_on_the_left_in_place_with_conj(
        qr.basis.as_ref(),
        qr.coeff.as_ref(),
        faer::Conj::No,
        out.as_mut(),
        faer::Par::Seq,
        MemStack::new(&mut MemBuffer::new(
            householder::apply_block_householder_sequence_on_the_left_in_place_scratch::<f64>(
                rows, blocks, cols,
            ),
        )),
    );
    out
}

/// How many singular values count as nonzero (the largest first).
fn nonzero(all: &[f64], columns: usize) -> usize {
    let top = all.first().copied().unwrap_or(0.0);
    all.iter()
        .take_while(|&&x| x > top * RANK_TOL * columns as f64 && x > 0.0)
        .count()
}

/// Balanced pairs from `(Q_u X, Q_v Y)` and the singular values: each scaled by `√σ`.
fn scaled(mut lu: Mat<f64>, mut lv: Mat<f64>, sigma: &[f64], rank: usize) -> Split {
    for (p, &sg) in sigma.iter().enumerate() {
        let r = sg.sqrt();
        lu.col_mut(p).iter_mut().for_each(|x| *x *= r);
        lv.col_mut(p).iter_mut().for_each(|x| *x *= r);
    }
    Split {
        u: lu,
        v: lv,
        kept: sigma.len().min(rank),
        sigma: sigma.to_vec(),
    }
}

/// The split from `U Vᵀ = (Q_u X) Σ (Q_v Y)ᵀ` with Q formed: zero singular values left
/// out, each pair scaled by `√σ`.
#[cfg(feature = "lapack")]
fn balanced(
    qu: &Mat<f64>,
    qv: &Mat<f64>,
    x: faer::MatRef<'_, f64>,
    y: faer::MatRef<'_, f64>,
    all: &[f64],
    columns: usize,
    rank: usize,
) -> Split {
    let nonzero = nonzero(all, columns);
    let lu = qu * x.subcols(0, nonzero);
    let lv = qv * y.subcols(0, nonzero);
    scaled(lu, lv, &all[..nonzero], rank)
}

/// The same decompositions through LAPACK (ndarray-linalg, system OpenBLAS).
#[cfg(feature = "lapack")]
mod lapack {
    use faer::Mat;
    use ndarray::Array2;
    use ndarray_linalg::{QR, SVD};

    use super::Split;

    fn to_nd(m: &Mat<f64>) -> Array2<f64> {
        Array2::from_shape_fn((m.nrows(), m.ncols()), |(i, j)| m[(i, j)])
    }

    fn to_faer(a: &Array2<f64>) -> Mat<f64> {
        Mat::from_fn(a.nrows(), a.ncols(), |i, j| a[(i, j)])
    }

    pub(super) fn low_rank(u: &Mat<f64>, v: &Mat<f64>, rank: usize) -> Split {
        let (qu, ru) = to_nd(u).qr().expect("LAPACK QR of a finite matrix");
        let (qv, rv) = to_nd(v).qr().expect("LAPACK QR of a finite matrix");
        let core = ru.dot(&rv.t());
        let (x, s, yt) = core
            .svd(true, true)
            .expect("LAPACK SVD of a small finite matrix");
        let (x, yt) = (x.expect("U was asked for"), yt.expect("Vᵀ was asked for"));
        let y = yt.t().to_owned();
        let all: Vec<f64> = s.to_vec();
        let (x, y) = (to_faer(&x), to_faer(&y));
        super::balanced(
            &to_faer(&qu),
            &to_faer(&qv),
            x.as_ref(),
            y.as_ref(),
            &all,
            u.ncols(),
            rank,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PeerId;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A batch of `k` dense pairs whose sum has rank `r` (each pair a random combination of
    /// `r` base pairs).
    fn batch(j: usize, d: usize, k: usize, r: usize, seed: u64) -> FactorBatch {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut g = || rng.random_range(-1.0f32..1.0);
        let base_u: Vec<Vec<f32>> = (0..r).map(|_| (0..j).map(|_| g()).collect()).collect();
        let base_v: Vec<Vec<f32>> = (0..r).map(|_| (0..d).map(|_| g()).collect()).collect();
        let mut u = Vec::new();
        let mut v = Vec::new();
        for p in 0..k {
            // Pair p: u = base_u[p mod r] · c, v = base_v[p mod r].
            let c = g();
            u.extend(base_u[p % r].iter().map(|x| x * c));
            v.extend(base_v[p % r].iter().copied());
        }
        FactorBatch {
            origin: PeerId(0),
            clock: 0,
            scale: -0.05,
            j,
            d,
            u,
            v: VFactors::Dense(v),
        }
    }

    fn dense(fb: &FactorBatch) -> Mat<f64> {
        let mut a = Mat::<f64>::zeros(fb.j, fb.d);
        for p in 0..fb.len() {
            let VFactors::Dense(v) = &fb.v else {
                unreachable!()
            };
            for i in 0..fb.j {
                for c in 0..fb.d {
                    a[(i, c)] += f64::from(fb.scale)
                        * f64::from(fb.u[p * fb.j + i])
                        * f64::from(v[p * fb.d + c]);
                }
            }
        }
        a
    }

    fn rel(a: &Mat<f64>, b: &Mat<f64>) -> f64 {
        (a - b).norm_l2() / b.norm_l2()
    }

    #[test]
    fn a_batch_of_rank_at_most_r_is_sent_exactly_with_nothing_kept_back() {
        for (j, d, k, r, rank) in [(30, 40, 16, 3, 4), (64, 20, 16, 4, 4), (8, 100, 12, 2, 8)] {
            let fb = batch(j, d, k, r, 7);
            let want = dense(&fb);
            let mut c = Compressor::new(rank);
            let (out, stats) = c.compress(fb);
            assert_eq!(stats.pairs_out, r, "{j}×{d}");
            assert_eq!(out.len(), r);
            assert!(
                rel(&dense(&out), &want) < 1e-6,
                "{}",
                rel(&dense(&out), &want)
            );
            assert_eq!(c.residual_pairs(), 0);
        }
    }

    #[test]
    fn applying_a_compressed_rank_r_batch_gives_the_same_replica() {
        // J = D = 256, K = 16 pairs of rank 4, sent as 4 pairs: W after the apply within
        // 1e-6 (relative) of W after the original batch.
        let fb = batch(256, 256, 16, 4, 3);
        let w0 = ndarray::Array2::from_shape_fn((256, 256), |(i, c)| {
            ((i * 31 + c * 17) % 97) as f32 / 97.0 - 0.5
        });
        let mut a = crate::Replica::new(w0.clone()).unwrap();
        let mut b = crate::Replica::new(w0).unwrap();
        let (out, stats) = Compressor::new(4).compress(fb.clone());
        assert_eq!(stats.pairs_out, 4);
        a.apply(&[&fb]).unwrap();
        b.apply(&[&out]).unwrap();
        let diff = (&a.w() - &b.w())
            .mapv(|x| f64::from(x).powi(2))
            .sum()
            .sqrt();
        let norm = a.w().mapv(|x| f64::from(x).powi(2)).sum().sqrt();
        assert!(diff / norm < 1e-6, "{}", diff / norm);
    }

    #[test]
    fn error_feedback_sends_everything_eventually() {
        // Σ sent + residual = Σ computed, clock after clock, while the residual is within
        // its bound (rank-3 batches, 2 pairs sent: the residual grows by one a clock).
        let (j, d) = (24, 18);
        let mut c = Compressor::new(2);
        let mut sent = Mat::<f64>::zeros(j, d);
        let mut computed = Mat::<f64>::zeros(j, d);
        for clock in 0..6 {
            let fb = batch(j, d, 8, 3, 100 + clock);
            computed += dense(&fb);
            let (out, stats) = c.compress(fb);
            assert!(stats.pairs_out <= 2);
            sent += dense(&out);
            assert_eq!(c.residual_pairs(), (clock + 1) as usize, "clock {clock}");
        }
        assert_eq!(c.dropped_sq(), 0.0);
        // Up to the f32 rounding of the pairs sent.
        let err = rel(&(&sent + c.residual_dense()), &computed);
        assert!(err < 1e-6, "{err}");
        // Full-rank batches: the residual is capped at max(K, R) pairs; what is missing
        // is what the cap dropped.
        let mut c = Compressor::new(2);
        let (mut sent, mut computed) = (Mat::<f64>::zeros(j, d), Mat::<f64>::zeros(j, d));
        let mut dropped = 0.0;
        for clock in 0..6 {
            let fb = batch(j, d, 8, 8, 200 + clock);
            computed += dense(&fb);
            let (out, stats) = c.compress(fb);
            sent += dense(&out);
            assert!(c.residual_pairs() <= 8);
            dropped += stats.dropped_sq.sqrt();
        }
        let missing = (&computed - &sent - c.residual_dense()).norm_l2();
        assert!(dropped > 0.0);
        assert!(
            missing <= dropped + 1e-6 * computed.norm_l2(),
            "{missing} > {dropped}"
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            // Seeded: the same cases on every run.
            rng_seed: proptest::test_runner::RngSeed::Fixed(48),
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::with_cases(48)
        })]
        /// Eckart–Young against a dense SVD of the J×D sum (the reference), for shapes
        /// where K exceeds J or D too.
        #[test]
        fn the_approximation_is_the_best_of_its_rank(
            j in 1usize..24, d in 1usize..24, k in 1usize..20, r in 1usize..8,
            rank in 1usize..8, seed in 0u64..1000,
        ) {
            let fb = batch(j, d, k, r.min(k), seed);
            let a = dense(&fb);
            let svd = a.thin_svd().unwrap();
            let s = svd.S().column_vector();
            let want: f64 = (rank.min(s.nrows())..s.nrows()).map(|i| s[i] * s[i]).sum::<f64>().sqrt();
            let (out, stats) = Compressor::new(rank).compress(fb.clone());
            proptest::prop_assert!(stats.pairs_out <= rank.max(k.min(rank)));
            let got = (&a - dense(&out)).norm_l2();
            proptest::prop_assert!((got - want).abs() <= 1e-5 * a.norm_l2().max(1e-12), "{} vs {}", got, want);
            // Through the Gram matrices (aggregated apply): singular values below 1e-5 of
            // the largest count as zero, so the bound is looser.
            let (out, _) = Compressor::new(rank)
                .with_decomposition(Decomposition::Gram)
                .compress(fb);
            let got = (&a - dense(&out)).norm_l2();
            proptest::prop_assert!((got - want).abs() <= 1e-4 * a.norm_l2().max(1e-12), "gram: {} vs {}", got, want);
        }
    }

    #[test]
    fn the_approximation_is_the_best_of_its_rank_at_fixed_shapes() {
        // Eckart–Young against a dense SVD of the J×D sum.
        for seed in 0..5 {
            let fb = batch(20, 15, 10, 10, seed);
            let a = dense(&fb);
            let svd = a.thin_svd().unwrap();
            let s = svd.S().column_vector();
            for rank in [1, 3, 6] {
                let want: f64 = (rank..s.nrows()).map(|i| s[i] * s[i]).sum::<f64>().sqrt();
                let (out, _) = Compressor::new(rank).compress(fb.clone());
                let got = (&a - dense(&out)).norm_l2();
                assert!((got - want).abs() <= 1e-5 * a.norm_l2(), "{got} vs {want}");
            }
        }
    }

    /// faer and LAPACK give the same pairs (up to the signs of singular vectors: compared
    /// as the matrices they sum to, pair by pair) and the same residual.
    #[cfg(feature = "lapack")]
    #[test]
    fn faer_and_lapack_agree() {
        for (j, d, k, r, rank) in [(40, 30, 16, 16, 4), (8, 64, 12, 5, 3), (100, 7, 20, 20, 6)] {
            let mut a = Compressor::new(rank);
            let mut b = Compressor::new(rank).with_decomposition(Decomposition::Lapack);
            for clock in 0..3 {
                let fb = batch(j, d, k, r, 40 + clock);
                let (x, _) = a.compress(fb.clone());
                let (y, _) = b.compress(fb);
                assert_eq!(x.len(), y.len());
                for p in 0..x.len() {
                    let pair = |fb: &FactorBatch| {
                        let mut one = fb.clone();
                        let VFactors::Dense(v) = &fb.v else {
                            unreachable!()
                        };
                        one.u = fb.u_row(p).to_vec();
                        one.v = VFactors::Dense(v[p * d..(p + 1) * d].to_vec());
                        dense(&one)
                    };
                    let e = rel(&pair(&x), &pair(&y));
                    assert!(e < 1e-5, "{j}×{d} clock {clock} pair {p}: {e}");
                }
                let e = rel(&a.residual_dense(), &b.residual_dense());
                assert!(e < 1e-6 || b.residual_pairs() == 0, "residual: {e}");
            }
        }
    }
}
