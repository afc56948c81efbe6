//! Sufficient factors: the `(u, v)` pairs of rank-one updates, batched per peer and clock.

use crate::{Error, PeerId, Result};

/// The `v` halves of a batch: one row of length `D` per pair, dense or sparse (CSR).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum VFactors {
    /// `K × D` values, row-major.
    Dense(Vec<f32>),
    /// Compressed sparse rows: pair `i` owns `indices[indptr[i]..indptr[i+1]]`.
    Sparse {
        /// `K + 1` row pointers into `indices`/`values`, starting at 0.
        indptr: Vec<u32>,
        /// Column indices, each `< D`.
        indices: Vec<u32>,
        /// Values matching `indices`.
        values: Vec<f32>,
    },
}

impl VFactors {
    /// Sparse rows from each pair's `(indices, values)`, in order.
    pub fn from_sparse_rows<I, V>(rows: impl IntoIterator<Item = (I, V)>) -> Self
    where
        I: AsRef<[u32]>,
        V: AsRef<[f32]>,
    {
        let mut indptr = vec![0u32];
        let (mut indices, mut values) = (Vec::new(), Vec::new());
        for (i, v) in rows {
            indices.extend_from_slice(i.as_ref());
            values.extend_from_slice(v.as_ref());
            indptr.push(indices.len() as u32);
        }
        VFactors::Sparse {
            indptr,
            indices,
            values,
        }
    }

    /// Number of stored values (K·D for dense, nnz for sparse).
    pub fn stored_len(&self) -> usize {
        match self {
            VFactors::Dense(v) => v.len(),
            VFactors::Sparse { values, .. } => values.len(),
        }
    }
}

/// K sufficient-factor pairs computed by one peer at one clock.
///
/// Represents the update `ΔW = scale · Σ_i u_i v_iᵀ` to a `J × D` parameter matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct FactorBatch {
    /// The peer that computed the factors.
    pub origin: PeerId,
    /// The origin's clock (iteration index) when it computed them.
    pub clock: u64,
    /// Multiplier applied to every pair (for SGD: `-lr / K`).
    pub scale: f32,
    /// Rows of W (`J`).
    pub j: usize,
    /// Columns of W (`D`).
    pub d: usize,
    /// `K × J` values, row-major: pair `i`'s `u` is `u[i*J..(i+1)*J]`.
    pub u: Vec<f32>,
    /// The `v` halves.
    pub v: VFactors,
}

/// One pair's `v` ([`FactorBatch::v_row`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum VRow<'a> {
    /// All D values.
    Dense(&'a [f32]),
    /// Column indices and their values.
    Sparse(&'a [u32], &'a [f32]),
}

impl<'a> VRow<'a> {
    /// The stored values.
    pub fn values(self) -> &'a [f32] {
        match self {
            VRow::Dense(v) | VRow::Sparse(_, v) => v,
        }
    }

    /// `(column, value)` for every stored value.
    pub fn entries(self) -> impl Iterator<Item = (usize, f32)> + 'a {
        let (idx, vals) = match self {
            VRow::Dense(v) => (None, v),
            VRow::Sparse(i, v) => (Some(i), v),
        };
        vals.iter()
            .enumerate()
            .map(move |(n, &x)| (idx.map_or(n, |i| i[n] as usize), x))
    }
}

impl FactorBatch {
    /// The size of the batch's step, `|scale| · Σᵢ ‖uᵢ‖ ‖vᵢ‖`: an upper bound of the
    /// Frobenius norm of `scale · Σᵢ uᵢ vᵢᵀ` ([`crate::bound`]).
    ///
    /// # Complexity
    /// O(K·J + nnz(V)).
    pub fn step_norm(&self) -> f64 {
        let norm = |x: &[f32]| {
            x.iter()
                .map(|&a| f64::from(a) * f64::from(a))
                .sum::<f64>()
                .sqrt()
        };
        let k = self.len();
        let u = |i: usize| norm(self.u.get(i * self.j..(i + 1) * self.j).unwrap_or(&[]));
        let sum: f64 = match &self.v {
            VFactors::Dense(v) => (0..k)
                .map(|i| u(i) * norm(v.get(i * self.d..(i + 1) * self.d).unwrap_or(&[])))
                .sum(),
            VFactors::Sparse { indptr, values, .. } => (0..k)
                .map(|i| {
                    let (a, b) = (indptr[i] as usize, indptr[i + 1] as usize);
                    u(i) * norm(values.get(a..b).unwrap_or(&[]))
                })
                .sum(),
        };
        f64::from(self.scale.abs()) * sum
    }

    /// A batch of no pairs with `like`'s origin, clock, scale, shape and kind of `v`: what
    /// a clock's parts are appended to ([`append`](Self::append)).
    pub fn empty_like(like: &FactorBatch) -> Self {
        FactorBatch {
            origin: like.origin,
            clock: like.clock,
            scale: like.scale,
            j: like.j,
            d: like.d,
            u: Vec::new(),
            v: match like.v {
                VFactors::Dense(_) => VFactors::Dense(Vec::new()),
                VFactors::Sparse { .. } => VFactors::Sparse {
                    indptr: vec![0],
                    indices: Vec::new(),
                    values: Vec::new(),
                },
            },
        }
    }

    /// Appends `later`'s pairs after this batch's: the next part of the same origin's
    /// clock ([`crate::Config::send_parts`]). Both batches must be of one origin, clock,
    /// scale and shape; where one is dense in `v` and the other sparse, the whole goes
    /// dense. On an error `self` is unchanged.
    ///
    /// # Errors
    /// [`Error::BadPart`] naming what differs.
    ///
    /// # Complexity
    /// O(size of `later`).
    pub fn append(&mut self, later: &FactorBatch) -> Result<()> {
        let differs = if later.origin != self.origin {
            Some("its origin")
        } else if later.clock != self.clock {
            Some("its clock")
        } else if later.scale.to_bits() != self.scale.to_bits() {
            Some("its scale")
        } else if (later.j, later.d) != (self.j, self.d) {
            Some("its shape")
        } else {
            None
        };
        if let Some(what) = differs {
            return Err(Error::BadPart {
                origin: later.origin,
                clock: later.clock,
                reason: format!("a part differs from the clock's earlier parts in {what}"),
            });
        }
        if later.is_empty() {
            return Ok(());
        }
        if self.is_empty() {
            // Nothing yet (an empty part's `v` says nothing of the kind).
            self.u.clone_from(&later.u);
            self.v.clone_from(&later.v);
            return Ok(());
        }
        match (&mut self.v, &later.v) {
            (VFactors::Dense(v), VFactors::Dense(w)) => v.extend_from_slice(w),
            (
                VFactors::Sparse {
                    indptr,
                    indices,
                    values,
                },
                VFactors::Sparse {
                    indptr: p,
                    indices: i,
                    values: x,
                },
            ) => {
                let base = indices.len() as u32;
                indptr.extend(p.iter().skip(1).map(|&r| base + r));
                indices.extend_from_slice(i);
                values.extend_from_slice(x);
            }
            (VFactors::Sparse { .. }, VFactors::Dense(w)) => {
                // A dense part after sparse ones (a prioritized part that carries a merged,
                // dense pair): the clock's batch goes dense, as the prioritizer's own
                // batches do.
                let mut v = self.dense_v();
                v.extend_from_slice(w);
                self.v = VFactors::Dense(v);
            }
            (VFactors::Dense(v), VFactors::Sparse { .. }) => v.extend_from_slice(&later.dense_v()),
        }
        self.u.extend_from_slice(&later.u);
        Ok(())
    }

    /// Number of pairs `K`.
    pub fn len(&self) -> usize {
        match self.u.len().checked_div(self.j) {
            Some(k) => k,
            None => match &self.v {
                VFactors::Dense(v) => v.len().checked_div(self.d).unwrap_or(0),
                VFactors::Sparse { indptr, .. } => indptr.len().saturating_sub(1),
            },
        }
    }

    /// Whether the batch holds no pairs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `v` as K × D dense rows (a copy).
    fn dense_v(&self) -> Vec<f32> {
        match &self.v {
            VFactors::Dense(v) => v.clone(),
            VFactors::Sparse { .. } => {
                let mut out = vec![0.0f32; self.len() * self.d];
                for (p, row) in out.chunks_exact_mut(self.d.max(1)).enumerate() {
                    if let VRow::Sparse(idx, vals) = self.v_row(p) {
                        for (&c, &x) in idx.iter().zip(vals) {
                            row[c as usize] = x;
                        }
                    }
                }
                out
            }
        }
    }

    /// `u` of pair `i`.
    pub fn u_row(&self, i: usize) -> &[f32] {
        &self.u[i * self.j..(i + 1) * self.j]
    }

    /// `v` of pair `i`: its `(column, value)` entries, every column for a dense `v`.
    pub fn v_row(&self, i: usize) -> VRow<'_> {
        match &self.v {
            VFactors::Dense(v) => VRow::Dense(&v[i * self.d..(i + 1) * self.d]),
            VFactors::Sparse {
                indptr,
                indices,
                values,
            } => {
                let (a, b) = (indptr[i] as usize, indptr[i + 1] as usize);
                VRow::Sparse(&indices[a..b], &values[a..b])
            }
        }
    }

    /// Checks the batch against a `j × d` replica: lengths, sparse structure, index range,
    /// finite values. A batch that passes can be applied without panicking.
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`], [`Error::MalformedSparse`], [`Error::IndexOutOfRange`],
    /// [`Error::NonFinite`].
    pub fn validate(&self, j: usize, d: usize) -> Result<()> {
        let origin = self.origin;
        if self.j != j {
            return Err(mismatch(format!("J of batch from {origin}"), j, self.j));
        }
        if self.d != d {
            return Err(mismatch(format!("D of batch from {origin}"), d, self.d));
        }
        if !self.scale.is_finite() {
            return Err(Error::NonFinite {
                origin,
                pair: usize::MAX,
                what: "scale",
            });
        }
        if j > 0 && !self.u.len().is_multiple_of(j) {
            return Err(mismatch(
                format!("u length of batch from {origin} (multiple of J)"),
                self.u.len().div_ceil(j) * j,
                self.u.len(),
            ));
        }
        let k = self.len();
        if let Some(pair) = first_non_finite(&self.u, j) {
            return Err(Error::NonFinite {
                origin,
                pair,
                what: "u",
            });
        }
        match &self.v {
            VFactors::Dense(v) => {
                if v.len() != k * d {
                    return Err(mismatch(
                        format!("v length of batch from {origin}"),
                        k * d,
                        v.len(),
                    ));
                }
                if let Some(pair) = first_non_finite(v, d) {
                    return Err(Error::NonFinite {
                        origin,
                        pair,
                        what: "v",
                    });
                }
            }
            VFactors::Sparse {
                indptr,
                indices,
                values,
            } => {
                if indptr.len() != k + 1 {
                    return Err(mismatch(
                        format!("sparse row pointers of batch from {origin}"),
                        k + 1,
                        indptr.len(),
                    ));
                }
                if indptr[0] != 0 {
                    return Err(Error::MalformedSparse {
                        origin,
                        reason: "first row pointer is not 0",
                    });
                }
                if indptr.windows(2).any(|w| w[0] > w[1]) {
                    return Err(Error::MalformedSparse {
                        origin,
                        reason: "row pointers decrease",
                    });
                }
                if indices.len() != values.len() || indptr[k] as usize != indices.len() {
                    return Err(Error::MalformedSparse {
                        origin,
                        reason: "row pointers, indices and values disagree in length",
                    });
                }
                for pair in 0..k {
                    let (a, b) = (indptr[pair] as usize, indptr[pair + 1] as usize);
                    if let Some(&index) = indices[a..b].iter().find(|&&c| c as usize >= d) {
                        return Err(Error::IndexOutOfRange {
                            origin,
                            pair,
                            index,
                            d,
                        });
                    }
                    if values[a..b].iter().any(|x| !x.is_finite()) {
                        return Err(Error::NonFinite {
                            origin,
                            pair,
                            what: "v",
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

fn mismatch(what: String, expected: usize, got: usize) -> Error {
    Error::DimensionMismatch {
        what,
        expected,
        got,
    }
}

/// Index of the first row (of length `row`) holding a non-finite value.
fn first_non_finite(xs: &[f32], row: usize) -> Option<usize> {
    // Scan in chunks with a branch-free test that vectorizes (even at the x86-64 baseline):
    // the exponent field is all ones exactly for ±inf and NaN, and adding one unit of
    // exponent carries into the sign bit only then. Locate the offender only if a chunk
    // holds one.
    const CHUNK: usize = 256;
    let (exp, one) = (0x7f80_0000u32, 0x0080_0000u32);
    for (c, chunk) in xs.chunks(CHUNK).enumerate() {
        let any = chunk
            .iter()
            .fold(0u32, |acc, x| acc | (x.to_bits() & exp).wrapping_add(one));
        if any & 0x8000_0000 != 0 {
            let i = chunk
                .iter()
                .position(|x| !x.is_finite())
                .expect("found above");
            return Some((c * CHUNK + i) / row.max(1));
        }
    }
    None
}

/// The buffer a model's `compute_sv` writes its factors into.
///
/// Each call to a `push_*` method adds one pair. All pairs of one iteration are either dense
/// or sparse in `v`. The engine turns the list into a [`FactorBatch`] when the iteration
/// ends ("commit") and clears it for the next one.
#[derive(Debug, Clone)]
pub struct SvList {
    j: usize,
    d: usize,
    u: Vec<f32>,
    dense_v: Vec<f32>,
    indptr: Vec<u32>,
    indices: Vec<u32>,
    values: Vec<f32>,
    kind: Option<bool>, // Some(true) = sparse
    k: usize,
}

impl SvList {
    /// An empty list for a `j × d` parameter matrix.
    pub fn new(j: usize, d: usize) -> Self {
        Self {
            j,
            d,
            u: Vec::new(),
            dense_v: Vec::new(),
            indptr: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
            kind: None,
            k: 0,
        }
    }

    /// Rows of W (length of every `u`).
    pub fn j(&self) -> usize {
        self.j
    }

    /// Columns of W (length of every dense `v`).
    pub fn d(&self) -> usize {
        self.d
    }

    /// Number of pairs pushed so far.
    pub fn len(&self) -> usize {
        self.k
    }

    /// Whether no pair was pushed.
    pub fn is_empty(&self) -> bool {
        self.k == 0
    }

    fn set_kind(&mut self, sparse: bool) -> Result<()> {
        match self.kind {
            None => {
                self.kind = Some(sparse);
                Ok(())
            }
            Some(s) if s == sparse => Ok(()),
            Some(_) => Err(Error::MixedFactorKinds),
        }
    }

    /// Adds a pair with dense `v`.
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`] if `u.len() != J` or `v.len() != D`;
    /// [`Error::MixedFactorKinds`] after sparse pairs.
    pub fn push_dense(&mut self, u: &[f32], v: &[f32]) -> Result<()> {
        self.check_u(u)?;
        if v.len() != self.d {
            return Err(mismatch(format!("v of pair {}", self.k), self.d, v.len()));
        }
        self.set_kind(false)?;
        self.u.extend_from_slice(u);
        self.dense_v.extend_from_slice(v);
        self.k += 1;
        Ok(())
    }

    /// Adds a pair with dense `v` and returns zeroed `u` (length J) and `v` (length D) to
    /// fill in place, avoiding a copy.
    ///
    /// # Errors
    /// [`Error::MixedFactorKinds`] after sparse pairs.
    pub fn next_dense(&mut self) -> Result<(&mut [f32], &mut [f32])> {
        self.set_kind(false)?;
        let (j, d) = (self.j, self.d);
        self.u.resize(self.u.len() + j, 0.0);
        self.dense_v.resize(self.dense_v.len() + d, 0.0);
        self.k += 1;
        let ul = self.u.len();
        let vl = self.dense_v.len();
        Ok((&mut self.u[ul - j..], &mut self.dense_v[vl - d..]))
    }

    /// Adds a pair with sparse `v` given as parallel `indices`/`values`.
    ///
    /// # Errors
    /// [`Error::DimensionMismatch`] for a wrong `u` length or unequal index/value lengths,
    /// [`Error::IndexOutOfRange`] for an index `≥ D`, [`Error::MixedFactorKinds`] after dense
    /// pairs.
    pub fn push_sparse(&mut self, u: &[f32], indices: &[u32], values: &[f32]) -> Result<()> {
        self.check_u(u)?;
        if indices.len() != values.len() {
            return Err(mismatch(
                format!("sparse values of pair {}", self.k),
                indices.len(),
                values.len(),
            ));
        }
        if let Some(&index) = indices.iter().find(|&&i| i as usize >= self.d) {
            return Err(Error::IndexOutOfRange {
                origin: PeerId(u32::MAX),
                pair: self.k,
                index,
                d: self.d,
            });
        }
        self.set_kind(true)?;
        self.u.extend_from_slice(u);
        self.indices.extend_from_slice(indices);
        self.values.extend_from_slice(values);
        self.indptr.push(self.indices.len() as u32);
        self.k += 1;
        Ok(())
    }

    fn check_u(&self, u: &[f32]) -> Result<()> {
        if u.len() != self.j {
            return Err(mismatch(format!("u of pair {}", self.k), self.j, u.len()));
        }
        Ok(())
    }

    /// Turns the pushed pairs into a batch and leaves the list empty (the engine does this
    /// after `compute_sv`).
    pub(crate) fn commit(&mut self, origin: PeerId, clock: u64, scale: f32) -> FactorBatch {
        let v = if self.kind == Some(true) {
            VFactors::Sparse {
                indptr: std::mem::replace(&mut self.indptr, vec![0]),
                indices: std::mem::take(&mut self.indices),
                values: std::mem::take(&mut self.values),
            }
        } else {
            VFactors::Dense(std::mem::take(&mut self.dense_v))
        };
        self.kind = None;
        self.k = 0;
        FactorBatch {
            origin,
            clock,
            scale,
            j: self.j,
            d: self.d,
            u: std::mem::take(&mut self.u),
            v,
        }
    }

    /// A copy of the pairs pushed so far as a batch from `origin` at `clock` with `scale`,
    /// leaving the list as it is: for checking a model's factors outside an engine (a
    /// gradient test, a hand-built batch). The engine takes its batches itself.
    pub fn to_batch(&self, origin: PeerId, clock: u64, scale: f32) -> FactorBatch {
        let v = if self.kind == Some(true) {
            VFactors::Sparse {
                indptr: self.indptr.clone(),
                indices: self.indices.clone(),
                values: self.values.clone(),
            }
        } else {
            VFactors::Dense(self.dense_v.clone())
        };
        FactorBatch {
            origin,
            clock,
            scale,
            j: self.j,
            d: self.d,
            u: self.u.clone(),
            v,
        }
    }

    /// Drops every pair pushed so far.
    pub fn clear(&mut self) {
        self.u.clear();
        self.dense_v.clear();
        self.indptr.truncate(1);
        self.indices.clear();
        self.values.clear();
        self.kind = None;
        self.k = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(v: VFactors, pairs: usize) -> FactorBatch {
        FactorBatch {
            origin: PeerId(1),
            clock: 3,
            scale: -0.5,
            j: 2,
            d: 3,
            u: (0..pairs * 2).map(|x| x as f32).collect(),
            v,
        }
    }

    fn sparse() -> FactorBatch {
        // Rows {0: 1.0} and {1: 2.0, 2: 3.0}.
        batch(
            VFactors::Sparse {
                indptr: vec![0, 1, 3],
                indices: vec![0, 1, 2],
                values: vec![1.0, 2.0, 3.0],
            },
            2,
        )
    }

    /// A clock's parts may mix sparse and dense `v` (a prioritized part carries merged,
    /// dense pairs): the whole goes dense, every pair's values where they were.
    #[test]
    fn parts_of_both_kinds_append_to_one_dense_batch() {
        let dense = batch(VFactors::Dense(vec![4.0, 5.0, 6.0]), 1);
        let want = vec![1.0, 0.0, 0.0, 0.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut a = sparse();
        a.append(&dense).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a.v, VFactors::Dense(want.clone()));
        assert_eq!(a.u, [0.0, 1.0, 2.0, 3.0, 0.0, 1.0]);
        let mut b = batch(VFactors::Dense(vec![4.0, 5.0, 6.0]), 1);
        b.append(&sparse()).unwrap();
        assert_eq!(b.v, VFactors::Dense([&want[6..], &want[..6]].concat()));
        // Sparse after sparse stays sparse; another clock is refused and changes nothing.
        let mut c = sparse();
        c.append(&sparse()).unwrap();
        assert!(matches!(c.v, VFactors::Sparse { .. }));
        let mut other = dense.clone();
        other.clock = 4;
        let before = c.clone();
        assert!(c.append(&other).is_err());
        assert_eq!(c, before);
    }
}
