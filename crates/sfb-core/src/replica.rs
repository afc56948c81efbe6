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
//! block is updated by a sequential dense update followed by the sparse scatter, and blocks
//! run in parallel on rayon. The bits of the result therefore depend on the inputs and their
//! order only, never on the number of threads.
//!
//! The dense update has two paths, chosen by the stacked rank `R` alone:
//! - `R ≤` [`SMALL_RANK_MAX`]: a register-blocked rank-`R` update (pulp, runtime SIMD
//!   dispatch) that reads and writes each entry of W once and adds all `R` terms in a single
//!   pass, `w ← fma(ū_R, v̄_R, … fma(ū_1, v̄_1, w))` in stacking order. Every entry gets
//!   exactly that chain of fused multiply-adds whatever the SIMD width or its position in a
//!   tile, so these bits do not even depend on the instruction set. At small `R` the update
//!   is bound by memory traffic over W, and a general GEMM's packing and epilogue cost more
//!   than the arithmetic.
//! - larger `R`: a sequential faer GEMM per block, `W_blk += Ū_blkᵀ V̄`.

use faer::linalg::matmul::matmul;
use faer::{Accum, Par};
use faer_ext::IntoFaer;
use ndarray::{Array2, ArrayView2, ArrayViewMut2};
use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::{Error, FactorBatch, PeerId, Result, VFactors};

/// Rows of W per independently-updated block. A function of nothing but this constant, so
/// results are identical on every machine with the same SIMD width, whatever the threads
/// (for `R ≤` [`SMALL_RANK_MAX`] they do not depend on the SIMD width either).
pub const BLOCK_ROWS: usize = 128;

/// Largest stacked dense rank `R` applied by the register-blocked small-rank kernel; larger
/// ranks go through faer's GEMM. A function of `R` only.
pub const SMALL_RANK_MAX: usize = 32;

/// Rows of W updated together by the small-rank kernel (divides [`BLOCK_ROWS`]).
const MR: usize = 8;
/// SIMD vectors per row in one tile of the small-rank kernel.
const NV: usize = 1;

/// What one call of [`Replica::apply`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Batches applied.
    pub batches: usize,
    /// Pairs applied with dense `v` (rows of the GEMM).
    pub dense_pairs: usize,
    /// Pairs applied with sparse `v`.
    pub sparse_pairs: usize,
    /// Dense pairs received that were re-compressed into `dense_pairs` before applying
    /// ([`crate::aggregate`]); 0 when applied as they are.
    pub aggregated_from: usize,
}

impl ApplyStats {
    /// What applying `batches` would do, counted without applying them (timing-only
    /// runs; aggregation aside).
    pub fn counted(batches: &[&FactorBatch]) -> Self {
        let mut s = Self {
            batches: batches.len(),
            ..Self::default()
        };
        for b in batches {
            match &b.v {
                VFactors::Dense(_) => s.dense_pairs += b.len(),
                VFactors::Sparse { .. } => s.sparse_pairs += b.len(),
            }
        }
        s
    }

    /// Pairs applied (the stacked rank `R`).
    pub fn pairs(&self) -> usize {
        self.dense_pairs + self.sparse_pairs
    }
}

/// A full replica of the `J × D` parameter matrix W, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Replica {
    w: Array2<f32>,
    /// `(J, D)`: `w`'s shape, or the shape alone of a [`shape_only`](Self::shape_only)
    /// replica.
    dim: (usize, usize),
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
        let dim = w.dim();
        Ok(Self { w, dim })
    }

    /// A `j × d` replica of zeros.
    pub fn zeros(j: usize, d: usize) -> Self {
        Self {
            w: Array2::zeros((j, d)),
            dim: (j, d),
        }
    }

    /// A replica of W's shape `j × d` that holds no entries (a timing-only node's,
    /// [`Config::timing_only`](crate::Config::timing_only)): [`dim`](Self::dim) is
    /// `(j, d)`, [`w`](Self::w) is empty, and applying to it fails as a shape mismatch.
    pub fn shape_only(j: usize, d: usize) -> Self {
        Self {
            w: Array2::zeros((0, 0)),
            dim: (j, d),
        }
    }

    /// `(J, D)`.
    pub fn dim(&self) -> (usize, usize) {
        self.dim
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
        let scales: Vec<f32> = batches.iter().map(|b| b.scale).collect();
        self.apply_scaled(batches, &scales)
    }

    /// [`apply`](Self::apply) with batch `b`'s scale replaced by `scales[b]`: `W += Σ_b
    /// scales[b] Σ_i u_{b,i} v_{b,i}ᵀ` (how a step-size schedule rescales batches without
    /// copying their factors).
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`] if `scales` and `batches` differ in length or a batch has
    /// the wrong shape; [`Error::NonFinite`] for a non-finite scale; the errors of
    /// [`FactorBatch::validate`]. If any check fails, W is left untouched.
    pub fn apply_scaled(&mut self, batches: &[&FactorBatch], scales: &[f32]) -> Result<ApplyStats> {
        let (j, d) = self.w.dim();
        check_scales(batches, scales)?;
        for b in batches {
            b.validate(j, d)?;
        }
        Ok(apply_unchecked(&mut self.w, batches, scales, None))
    }

    /// [`apply_scaled`](Self::apply_scaled) for batches already validated against this
    /// replica's shape (or derived from validated ones by finite rescaling, as the
    /// optimizer's preconditioned pairs are): only the scales are checked, so a hot path
    /// does not scan every factor twice.
    ///
    /// # Errors
    /// [`check_scales`]'s; W is then untouched.
    pub(crate) fn apply_validated(
        &mut self,
        batches: &[&FactorBatch],
        scales: &[f32],
    ) -> Result<ApplyStats> {
        check_scales(batches, scales)?;
        debug_assert!({
            let (j, d) = self.w.dim();
            batches.iter().all(|b| b.validate(j, d).is_ok())
        });
        Ok(apply_unchecked(&mut self.w, batches, scales, None))
    }

    /// [`apply_validated`](Self::apply_validated) with every dense pair `(u, v)` applied
    /// as `(u ⊙ rows, v ⊙ cols)` — a per-row and per-column rescaling folded into the
    /// stacking of `Ū` and `V̄` the kernel does anyway (the factored optimizer's
    /// preconditioning, without copying the pairs first). Sparse pairs are applied as
    /// given.
    ///
    /// # Errors
    /// [`check_scales`]'s, or [`Error::DimensionMismatch`] for multipliers of the wrong
    /// length; W is then untouched.
    pub(crate) fn apply_folded(
        &mut self,
        batches: &[&FactorBatch],
        scales: &[f32],
        rows: &[f32],
        cols: &[f32],
    ) -> Result<ApplyStats> {
        check_scales(batches, scales)?;
        let (j, d) = self.w.dim();
        for (what, len, want) in [
            ("row multipliers", rows.len(), j),
            ("column multipliers", cols.len(), d),
        ] {
            if len != want {
                return Err(Error::DimensionMismatch {
                    what: what.into(),
                    expected: want,
                    got: len,
                });
            }
        }
        Ok(apply_unchecked(
            &mut self.w,
            batches,
            scales,
            Some((rows, cols)),
        ))
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
        for_each_block(wslice, chunk, |blk, wb| {
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

/// `scales` has one finite value per batch.
pub(crate) fn check_scales(batches: &[&FactorBatch], scales: &[f32]) -> Result<()> {
    if scales.len() != batches.len() {
        return Err(Error::DimensionMismatch {
            what: "scales (one per batch)".into(),
            expected: batches.len(),
            got: scales.len(),
        });
    }
    if let Some((b, _)) = batches.iter().zip(scales).find(|(_, s)| !s.is_finite()) {
        return Err(Error::NonFinite {
            origin: b.origin,
            pair: usize::MAX,
            what: "scale",
        });
    }
    Ok(())
}

/// Adds `Σ_b scales[b] Σ_i u_{b,i} v_{b,i}ᵀ` to `w` with the replica's kernel, for batches
/// already validated against `w`'s shape (the optimizer layer's dense paths use it to
/// materialize updates into scratch matrices).
pub(crate) fn accumulate(
    w: &mut Array2<f32>,
    batches: &[&FactorBatch],
    scales: &[f32],
) -> ApplyStats {
    debug_assert_eq!(batches.len(), scales.len());
    apply_unchecked(w, batches, scales, None)
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

fn apply_unchecked(
    w: &mut Array2<f32>,
    batches: &[&FactorBatch],
    scales: &[f32],
    fold: Option<(&[f32], &[f32])>,
) -> ApplyStats {
    let (j, d) = w.dim();
    let mut stats = ApplyStats {
        batches: batches.len(),
        ..ApplyStats::default()
    };
    // Stack the dense pairs: Ut holds J × R scaled values (row-major for the GEMM path, grouped
    // as below for the small-rank path); Vbar is R × D.
    let dense: Vec<(&FactorBatch, f32)> = batches
        .iter()
        .copied()
        .zip(scales.iter().copied())
        .filter(|(b, _)| matches!(b.v, VFactors::Dense(_)) && !b.is_empty())
        .collect();
    let r: usize = dense.iter().map(|(b, _)| b.len()).sum();
    stats.dense_pairs = r;
    let small = r <= SMALL_RANK_MAX;
    // Small ranks: rows in groups of MR, each group's R×MR values interleaved by pair
    // ([group][pair][row in group]); rows past the last full group stay row-major. Groups
    // never straddle a block because MR divides BLOCK_ROWS.
    let full = if small { j / MR * MR } else { 0 };
    let mut ut = vec![0f32; j * r];
    let mut col = 0;
    for &(b, scale) in &dense {
        for i in 0..b.len() {
            for (row, &x) in b.u_row(i).iter().enumerate() {
                let at = if row < full {
                    (row - row % MR) * r + col * MR + row % MR
                } else {
                    row * r + col
                };
                ut[at] = match fold {
                    None => scale * x,
                    Some((rows, _)) => scale * (x * rows[row]),
                };
            }
            col += 1;
        }
    }
    let stacked;
    let vbar: &[f32] = match (dense.as_slice(), fold) {
        ([], _) => &[],
        (many, Some((_, cols))) => {
            let mut s = Vec::with_capacity(r * d);
            for (b, _) in many {
                if let VFactors::Dense(v) = &b.v {
                    for row in v.chunks(d) {
                        s.extend(row.iter().zip(cols).map(|(x, c)| x * c));
                    }
                }
            }
            stacked = s;
            &stacked
        }
        ([(one, _)], None) => match &one.v {
            VFactors::Dense(v) => v,
            VFactors::Sparse { .. } => unreachable!("filtered to dense"),
        },
        (many, None) => {
            let mut s = Vec::with_capacity(r * d);
            for (b, _) in many {
                if let VFactors::Dense(v) = &b.v {
                    s.extend_from_slice(v);
                }
            }
            stacked = s;
            &stacked
        }
    };
    let mut sparse = Vec::new();
    for (b, &scale) in batches.iter().zip(scales) {
        if let VFactors::Sparse {
            indptr,
            indices,
            values,
        } = &b.v
        {
            for i in 0..b.len() {
                let (a, e) = (indptr[i] as usize, indptr[i + 1] as usize);
                sparse.push(SparsePair {
                    scale,
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
    let arch = pulp::Arch::new();
    let panels = if small && r > 0 {
        pack_panels(vbar, r, d, arch.dispatch(Lanes) * NV)
    } else {
        Vec::new()
    };
    let vbar_rows = vbar;
    let vbar = ArrayView2::from_shape((r, d), vbar).expect("validated shape");
    let ut_flat = &ut[..];
    let ut = ArrayView2::from_shape((j, r), ut_flat).expect("stacked shape");
    let wslice = w.as_slice_mut().expect("replica is standard layout");
    for_each_block(wslice, BLOCK_ROWS * d, |blk, wb| {
        let r0 = blk * BLOCK_ROWS;
        let rows = wb.len() / d;
        if small && r > 0 {
            arch.dispatch(SmallRank {
                w: &mut *wb,
                d,
                r,
                ut: &ut_flat[r0 * r..(r0 + rows) * r],
                panels: &panels,
                vbar: vbar_rows,
            });
        }
        let mut wv = ArrayViewMut2::from_shape((rows, d), wb).expect("block shape");
        if r > 0 && !small {
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

/// Runs `f(block index, block)` on every `chunk`-long block of `w`: on rayon when there
/// are several, inline when there is one (handing a single block to the pool only adds a
/// cross-thread wake-up per call, which dominated the simulator's many small applies).
fn for_each_block(w: &mut [f32], chunk: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    if w.len() <= chunk {
        f(0, w);
    } else {
        w.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(blk, wb)| f(blk, wb));
    }
}

/// `S::F32_LANES` of the dispatched instruction set.
struct Lanes;

impl WithSimd for Lanes {
    type Output = usize;

    #[inline(always)]
    fn with_simd<S: Simd>(self, _simd: S) -> usize {
        S::F32_LANES
    }
}

/// `V̄` (R×D, row-major) as column panels `cw` wide: panel `g` holds columns
/// `g·cw..(g+1)·cw` of all R rows, row after row. Columns past the last full panel are left
/// out (the kernel reads them from `V̄` itself).
fn pack_panels(vbar: &[f32], r: usize, d: usize, cw: usize) -> Vec<f32> {
    let ng = d / cw;
    let mut p = Vec::with_capacity(ng * r * cw);
    for g in 0..ng {
        for k in 0..r {
            p.extend_from_slice(&vbar[k * d + g * cw..k * d + (g + 1) * cw]);
        }
    }
    p
}

/// One row block of the small-rank kernel: `W_blk += Ū_blkᵀ V̄` with every entry updated by
/// the chain `w ← fma(ū_k, v̄_k, w)`, `k = 1..R`, in one pass over the block.
struct SmallRank<'a> {
    /// The block of W, `rows × d`, row-major.
    w: &'a mut [f32],
    d: usize,
    r: usize,
    /// The block's rows of `Ū` (scaled), in the grouped layout of `apply_unchecked`.
    ut: &'a [f32],
    /// [`pack_panels`] of `V̄` with `cw = S::F32_LANES · NV`.
    panels: &'a [f32],
    /// `V̄`, R×D row-major, for the columns past the last panel.
    vbar: &'a [f32],
}

impl WithSimd for SmallRank<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let SmallRank {
            w,
            d,
            r,
            ut,
            panels,
            vbar,
        } = self;
        let split = d / (S::F32_LANES * NV) * (S::F32_LANES * NV);
        let (panels, _) = S::as_simd_f32s(panels);
        let full = w.len() / d / MR * MR;
        let (w_full, w_rest) = w.split_at_mut(full * d);
        let (u_full, u_rest) = ut.split_at(full * r);
        // Groups of MR rows: an MR × NV tile of accumulators per panel, all R pairs added
        // while the tile sits in registers.
        for (wg, u) in w_full
            .chunks_exact_mut(MR * d)
            .zip(u_full.chunks_exact(MR * r))
        {
            let mut it = wg.chunks_exact_mut(d);
            let mut wr: [&mut [S::f32s]; MR] = std::array::from_fn(|_| {
                let row = it.next().expect("MR rows per group");
                S::as_mut_simd_f32s(&mut row[..split]).0
            });
            for (g, panel) in panels.chunks_exact(r * NV).enumerate() {
                let cols = g * NV..(g + 1) * NV;
                let mut acc: [[S::f32s; NV]; MR] =
                    std::array::from_fn(|i| std::array::from_fn(|v| wr[i][g * NV + v]));
                for (vk, uk) in panel.chunks_exact(NV).zip(u.chunks_exact(MR)) {
                    for (acc_i, &ui) in acc.iter_mut().zip(uk) {
                        let s = simd.splat_f32s(ui);
                        for (a, &v) in acc_i.iter_mut().zip(vk) {
                            *a = simd.mul_add_f32s(s, v, *a);
                        }
                    }
                }
                for (row, acc_i) in wr.iter_mut().zip(&acc) {
                    row[cols.clone()].copy_from_slice(acc_i);
                }
            }
            for (i, row) in wg.chunks_exact_mut(d).enumerate() {
                tail_columns(row, u.iter().skip(i).step_by(MR), vbar, split, d);
            }
        }
        // Rows past the last full group (only at the end of W): one row at a time.
        for (row, u) in w_rest.chunks_exact_mut(d).zip(u_rest.chunks_exact(r)) {
            let (head, _) = S::as_mut_simd_f32s(&mut row[..split]);
            for (g, panel) in panels.chunks_exact(r * NV).enumerate() {
                let mut acc: [S::f32s; NV] = std::array::from_fn(|v| head[g * NV + v]);
                for (vk, &uk) in panel.chunks_exact(NV).zip(u) {
                    let s = simd.splat_f32s(uk);
                    for (a, &v) in acc.iter_mut().zip(vk) {
                        *a = simd.mul_add_f32s(s, v, *a);
                    }
                }
                head[g * NV..(g + 1) * NV].copy_from_slice(&acc);
            }
            tail_columns(row, u.iter(), vbar, split, d);
        }
    }
}

/// Columns `split..d` of one row of W (those past the last full panel), with the same fused
/// multiply-add chain as the SIMD tiles. `u` yields the row's `ū_k` in pair order.
#[inline(always)]
fn tail_columns<'u>(
    row: &mut [f32],
    u: impl Iterator<Item = &'u f32> + Clone,
    vbar: &[f32],
    split: usize,
    d: usize,
) {
    for (c, x) in row.iter_mut().enumerate().skip(split) {
        let mut a = *x;
        for (&uk, vk) in u.clone().zip(vbar.chunks_exact(d)) {
            a = uk.mul_add(vk[c], a);
        }
        *x = a;
    }
}

/// The slow, obviously-correct reference: every pair's outer product added entry by entry,
/// accumulated in f64. For tests and benchmarks only (feature `reference`).
///
/// # Errors
/// As [`Replica::apply`]; W is untouched on error.
#[cfg(feature = "reference")]
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
/// straightforward implementation would do. For benchmarks only (feature `reference`).
///
/// # Errors
/// As [`Replica::apply`].
#[cfg(feature = "reference")]
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

/// A seeded `J × D` matrix with entries uniform in `[-1, 1)`: a starting W for benchmarks
/// (feature `reference`).
#[cfg(feature = "reference")]
pub fn seeded_w(seed: u64, j: usize, d: usize) -> Array2<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    Array2::from_shape_fn((j, d), |_| rng.random_range(-1.0f32..1.0))
}

/// A seeded workload of `R` factor pairs for a `J × D` replica, split into `batches`
/// batches (as from that many peers, origins `0..batches`, clock 0, scale `-1e-3`), entries
/// uniform in `[-1, 1)`. `nnz_per_pair: None` gives dense `v`; `Some(n)` gives sparse `v`
/// with `n` distinct sorted columns per pair (capped at `D`). For benchmarks and tests
/// (feature `reference`); the same seed always gives the same batches.
///
/// # Panics
/// If `batches` is 0 or greater than `R` (when `R > 0`).
#[cfg(feature = "reference")]
pub fn seeded_batches(
    seed: u64,
    j: usize,
    d: usize,
    r: usize,
    batches: usize,
    nnz_per_pair: Option<usize>,
) -> Vec<FactorBatch> {
    use rand::{Rng, SeedableRng};
    assert!(batches > 0 && (r == 0 || batches <= r), "1 ≤ batches ≤ R");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..batches)
        .map(|b| {
            let k = r / batches + usize::from(b < r % batches);
            let u = (0..k * j).map(|_| rng.random_range(-1.0..1.0)).collect();
            let v = match nnz_per_pair {
                None => VFactors::Dense((0..k * d).map(|_| rng.random_range(-1.0..1.0)).collect()),
                Some(n) => {
                    let n = n.min(d);
                    let rows: Vec<(Vec<u32>, Vec<f32>)> = (0..k)
                        .map(|_| {
                            let mut cols: Vec<u32> = rand::seq::index::sample(&mut rng, d, n)
                                .into_iter()
                                .map(|c| c as u32)
                                .collect();
                            cols.sort_unstable();
                            (
                                cols,
                                (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect(),
                            )
                        })
                        .collect();
                    VFactors::from_sparse_rows(rows)
                }
            };
            FactorBatch {
                origin: PeerId(b as u32),
                clock: 0,
                scale: -1e-3,
                j,
                d,
                u,
                v,
            }
        })
        .collect()
}
