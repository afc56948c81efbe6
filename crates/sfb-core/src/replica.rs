//! The parameter replica and its one apply kernel.
//!
//! Every update a peer ever applies goes through [`Replica::apply`]: all batches that are
//! ready at one step are stacked into `Ū` (R×J, scaled) and `V̄` (R×D) and applied as a
//! single GEMM `W += Ūᵀ V̄` (faer on ndarray views); pairs with sparse `v` are applied by a
//! per-row scatter over their non-zeros.
//!
//! The FMS baseline with dense push ships whole `ΔW` matrices instead of factors; the
//! parameter server adds those with [`Replica::add_dense`], the only other way W changes.
//!
//! Determinism: W is cut into row blocks of a size that depends only on W's shape; each
//! block is updated by a sequential GEMM followed by the sparse scatter, and blocks run in
//! parallel on rayon. The bits of the result therefore depend on the inputs and their order
//! only, never on the number of threads.

use faer::linalg::matmul::matmul;
use faer::{Accum, Par};
use faer_ext::IntoFaer;
use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use rayon::prelude::*;

use crate::{Error, FactorBatch, PeerId, Result, VFactors};

/// Rows of W per independently-updated block. A function of nothing but this constant, so
/// results are identical on every machine with the same SIMD width, whatever the threads.
pub const BLOCK_ROWS: usize = 128;

/// What one call of [`Replica::apply`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Batches applied.
    pub batches: usize,
    /// Pairs applied with dense `v` (rows of the GEMM).
    pub dense_pairs: usize,
    /// Pairs applied with sparse `v`.
    pub sparse_pairs: usize,
}

/// A full replica of the `J × D` parameter matrix W, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Replica {
    w: Array2<f32>,
}

impl Replica {
    /// A replica holding `w` (copied into standard row-major layout if it is not already).
    ///
    /// # Errors
    /// [`Error::NonFinite`] if `w` holds a NaN or infinity.
    pub fn new(w: Array2<f32>) -> Result<Self> {
        if w.iter().any(|x| !x.is_finite()) {
            return Err(Error::NonFinite {
                origin: crate::PeerId(u32::MAX),
                pair: usize::MAX,
                what: "initial W",
            });
        }
        let w = if w.is_standard_layout() {
            w
        } else {
            w.as_standard_layout().into_owned()
        };
        Ok(Self { w })
    }

    /// A `j × d` replica of zeros.
    pub fn zeros(j: usize, d: usize) -> Self {
        Self {
            w: Array2::zeros((j, d)),
        }
    }

    /// `(J, D)`.
    pub fn dim(&self) -> (usize, usize) {
        self.w.dim()
    }

    /// Read view of W.
    pub fn w(&self) -> ArrayView2<'_, f32> {
        self.w.view()
    }

    /// Mutable view of W, for a model's `prox`.
    pub fn w_mut(&mut self) -> ArrayViewMut2<'_, f32> {
        self.w.view_mut()
    }

    /// Consumes the replica, returning W.
    pub fn into_inner(self) -> Array2<f32> {
        self.w
    }

    /// Applies `W += Σ_b scale_b Σ_i u_{b,i} v_{b,i}ᵀ` for all `batches`, in the order given,
    /// as one stacked GEMM plus a sparse scatter.
    ///
    /// Every batch is validated first; if any fails, W is left untouched.
    ///
    /// # Errors
    /// The first validation error of [`FactorBatch::validate`].
    ///
    /// # Complexity
    /// `O(J·D·R_dense + J·nnz)` flops, one pass over W.
    pub fn apply(&mut self, batches: &[&FactorBatch]) -> Result<ApplyStats> {
        let (j, d) = self.w.dim();
        for b in batches {
            b.validate(j, d)?;
        }
        Ok(apply_unchecked(&mut self.w, batches))
    }

    /// Adds dense updates, `W += Σ_i deltas[i]`, entry by entry in the order given (the
    /// FMS server's dense-push path; factor pushes go through [`apply`](Self::apply)).
    ///
    /// Every delta is validated first; if any fails, W is left untouched. Each entry's sum
    /// is formed in the same order whatever the number of threads, so the result is
    /// deterministic.
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`] or [`Error::NonFinite`] from [`validate_dense`] (the
    /// `origin` of the pair `(origin, delta)` names who sent it).
    ///
    /// # Complexity
    /// `O(J·D·n)` additions, one pass over W.
    pub fn add_dense(&mut self, deltas: &[(PeerId, ArrayView2<'_, f32>)]) -> Result<()> {
        let (j, d) = self.w.dim();
        for (origin, m) in deltas {
            validate_dense(*m, j, d, *origin, "dense ΔW")?;
        }
        if j == 0 || d == 0 || deltas.is_empty() {
            return Ok(());
        }
        let rows: Vec<std::borrow::Cow<'_, [f32]>> = deltas
            .iter()
            .map(|(_, m)| match m.as_slice() {
                Some(s) => std::borrow::Cow::Borrowed(s),
                None => std::borrow::Cow::Owned(m.iter().copied().collect()),
            })
            .collect();
        let chunk = BLOCK_ROWS * d;
        let wslice = self.w.as_slice_mut().expect("replica is standard layout");
        wslice
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(blk, wb)| {
                let (a, n) = (blk * chunk, wb.len());
                for m in &rows {
                    for (x, &y) in wb.iter_mut().zip(&m[a..a + n]) {
                        *x += y;
                    }
                }
            });
        Ok(())
    }

    /// A 64-bit hash of W's shape and the bits of every entry (FNV-1a over 32-bit words),
    /// as 16 hex digits. Equal checksums mean bitwise-equal replicas (up to hash collisions).
    pub fn checksum(&self) -> String {
        checksum(self.w.view())
    }
}

/// Checks a dense `J × D` matrix that came from `origin` (a full W or a dense ΔW, named
/// `what`): exact shape and finite entries.
///
/// # Errors
/// [`Error::DimensionMismatch`] for a wrong shape; [`Error::NonFinite`] naming the first
/// row holding a NaN or infinity (as `pair`).
pub fn validate_dense(
    m: ArrayView2<'_, f32>,
    j: usize,
    d: usize,
    origin: PeerId,
    what: &'static str,
) -> Result<()> {
    let (mj, md) = m.dim();
    if mj != j {
        return Err(Error::DimensionMismatch {
            what: format!("rows of {what} from {origin}"),
            expected: j,
            got: mj,
        });
    }
    if md != d {
        return Err(Error::DimensionMismatch {
            what: format!("columns of {what} from {origin}"),
            expected: d,
            got: md,
        });
    }
    if let Some(pair) = m
        .rows()
        .into_iter()
        .position(|r| r.iter().any(|x| !x.is_finite()))
    {
        return Err(Error::NonFinite { origin, pair, what });
    }
    Ok(())
}

/// Hash of a matrix's shape and bits; see [`Replica::checksum`].
pub fn checksum(w: ArrayView2<'_, f32>) -> String {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let (j, d) = w.dim();
    for word in [j as u64, d as u64] {
        h = (h ^ word).wrapping_mul(PRIME);
    }
    for &x in w.iter() {
        h = (h ^ u64::from(x.to_bits())).wrapping_mul(PRIME);
    }
    format!("{h:016x}")
}

struct SparsePair<'a> {
    scale: f32,
    u: &'a [f32],
    indices: &'a [u32],
    values: &'a [f32],
}

fn apply_unchecked(w: &mut Array2<f32>, batches: &[&FactorBatch]) -> ApplyStats {
    let (j, d) = w.dim();
    let mut stats = ApplyStats {
        batches: batches.len(),
        ..ApplyStats::default()
    };
    // Stack the dense pairs: Ut is J × R (row-major), scaled; Vbar is R × D.
    let dense: Vec<&FactorBatch> = batches
        .iter()
        .copied()
        .filter(|b| matches!(b.v, VFactors::Dense(_)) && !b.is_empty())
        .collect();
    let r: usize = dense.iter().map(|b| b.len()).sum();
    stats.dense_pairs = r;
    let mut ut = vec![0f32; j * r];
    let mut col = 0;
    for b in &dense {
        for i in 0..b.len() {
            for (row, &x) in b.u_row(i).iter().enumerate() {
                ut[row * r + col] = b.scale * x;
            }
            col += 1;
        }
    }
    let stacked;
    let vbar: &[f32] = match dense.as_slice() {
        [] => &[],
        [one] => match &one.v {
            VFactors::Dense(v) => v,
            VFactors::Sparse { .. } => unreachable!("filtered to dense"),
        },
        many => {
            let mut s = Vec::with_capacity(r * d);
            for b in many {
                if let VFactors::Dense(v) = &b.v {
                    s.extend_from_slice(v);
                }
            }
            stacked = s;
            &stacked
        }
    };
    let mut sparse = Vec::new();
    for b in batches {
        if let VFactors::Sparse {
            indptr,
            indices,
            values,
        } = &b.v
        {
            for i in 0..b.len() {
                let (a, e) = (indptr[i] as usize, indptr[i + 1] as usize);
                sparse.push(SparsePair {
                    scale: b.scale,
                    u: b.u_row(i),
                    indices: &indices[a..e],
                    values: &values[a..e],
                });
            }
        }
    }
    stats.sparse_pairs = sparse.len();
    if (r == 0 && sparse.is_empty()) || j == 0 || d == 0 {
        return stats;
    }
    let vbar = ArrayView2::from_shape((r, d), vbar).expect("validated shape");
    let ut = ArrayView2::from_shape((j, r), &ut[..]).expect("stacked shape");
    let wslice = w.as_slice_mut().expect("replica is standard layout");
    wslice
        .par_chunks_mut(BLOCK_ROWS * d)
        .enumerate()
        .for_each(|(blk, wb)| {
            let r0 = blk * BLOCK_ROWS;
            let rows = wb.len() / d;
            let mut wv = ArrayViewMut2::from_shape((rows, d), wb).expect("block shape");
            if r > 0 {
                let lhs = ut.slice(ndarray::s![r0..r0 + rows, ..]);
                matmul(
                    wv.view_mut().into_faer(),
                    Accum::Add,
                    lhs.into_faer(),
                    vbar.view().into_faer(),
                    1.0f32,
                    Par::Seq,
                );
            }
            for p in &sparse {
                for row in 0..rows {
                    let a = p.scale * p.u[r0 + row];
                    if a == 0.0 {
                        continue;
                    }
                    let wr = wv.row_mut(row).into_slice().expect("contiguous row");
                    for (&c, &x) in p.indices.iter().zip(p.values) {
                        wr[c as usize] += a * x;
                    }
                }
            }
        });
    stats
}

/// The slow, obviously-correct reference: every pair's outer product added entry by entry,
/// accumulated in f64. For tests and benchmarks only.
///
/// # Errors
/// As [`Replica::apply`]; W is untouched on error.
pub fn apply_reference(w: &mut Array2<f32>, batches: &[&FactorBatch]) -> Result<()> {
    let (j, d) = w.dim();
    for b in batches {
        b.validate(j, d)?;
    }
    let mut acc: Array2<f64> = w.mapv(f64::from);
    for b in batches {
        for i in 0..b.len() {
            let u = b.u_row(i);
            let mut add = |c: usize, x: f32| {
                for (row, &ur) in u.iter().enumerate() {
                    acc[[row, c]] += f64::from(b.scale) * f64::from(ur) * f64::from(x);
                }
            };
            match &b.v {
                VFactors::Dense(v) => {
                    for (c, &x) in v[i * d..(i + 1) * d].iter().enumerate() {
                        add(c, x);
                    }
                }
                VFactors::Sparse {
                    indptr,
                    indices,
                    values,
                } => {
                    let (a, e) = (indptr[i] as usize, indptr[i + 1] as usize);
                    for (&c, &x) in indices[a..e].iter().zip(&values[a..e]) {
                        add(c as usize, x);
                    }
                }
            }
        }
    }
    w.zip_mut_with(&acc, |x, &y| *x = y as f32);
    Ok(())
}

/// The naive per-pair loop in f32 (one outer product after another, no stacking): what a
/// straightforward implementation would do. For benchmarks.
///
/// # Errors
/// As [`Replica::apply`].
pub fn apply_naive(w: &mut Array2<f32>, batches: &[&FactorBatch]) -> Result<()> {
    let (j, d) = w.dim();
    for b in batches {
        b.validate(j, d)?;
    }
    let ws = w.as_slice_mut().expect("standard layout");
    for b in batches {
        for i in 0..b.len() {
            let u = b.u_row(i);
            match &b.v {
                VFactors::Dense(v) => {
                    let v = &v[i * d..(i + 1) * d];
                    for (row, &ur) in u.iter().enumerate() {
                        let a = b.scale * ur;
                        for (x, &vc) in ws[row * d..(row + 1) * d].iter_mut().zip(v) {
                            *x += a * vc;
                        }
                    }
                }
                VFactors::Sparse {
                    indptr,
                    indices,
                    values,
                } => {
                    let (a0, e) = (indptr[i] as usize, indptr[i + 1] as usize);
                    for (row, &ur) in u.iter().enumerate() {
                        let a = b.scale * ur;
                        for (&c, &x) in indices[a0..e].iter().zip(&values[a0..e]) {
                            ws[row * d + c as usize] += a * x;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
