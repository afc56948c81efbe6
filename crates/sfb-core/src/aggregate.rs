//! Aggregated apply (`--aggregate rank:R`): a peer re-compresses what it *applies*.
//!
//! Each clock a replica applies every received pair — `P·K` of them under full broadcast —
//! as one stacked GEMM, `O(J·D·P·K)`. Those pairs are a rank-≤`P·K` matrix, so, as for
//! [sending](crate::compress), their best rank-`R` approximation is a small problem: the
//! Gram matrices of the stacked `J×n` and `D×n` halves and SVDs of `n×n` matrices,
//! `O((J+D)·n²)` ([`Decomposition::Gram`]). When that plus a rank-`R` GEMM costs less than
//! the rank-`P·K` GEMM the replica applies the `R` leading pairs instead, and keeps the next `R` as a **residual** it adds to the
//! next clock's pairs (error feedback; beyond that bound the smallest singular values are
//! dropped and counted in [`Aggregator::dropped_sq`]). Exact when the pairs (plus the
//! residual) have rank at most `R`.
//!
//! The pairs aggregated are the final ones: scaled by the step and, for the factored
//! optimizer, preconditioned; the optimizer's statistics still see every raw pair. Only
//! dense pairs are aggregated (sparse ones are cheap to scatter).
//!
//! **The choice is deterministic**: [`Aggregator::worth`] compares two cost estimates
//! that depend only on `J`, `D`, the number of pairs and the residual's size, never on a
//! clock reading, so under BSP with full broadcast every replica applies the same
//! batches, makes the same choice and keeps the same residual, and the replicas stay
//! bitwise equal. The estimates' constants were fitted to measurements on this project's
//! 2-core machine (`sfb bench --scenario kernel` prints measured times next to the
//! model's): at J = D = 4096 aggregating up to ~200 pairs into 16 is cheaper, at
//! J = D ≤ 1024 it never is.

use crate::compress::{CompressStats, Compressor, Decomposition};
use crate::{FactorBatch, PeerId, VFactors};

/// Seconds per flop of the replica's stacked f32 GEMM (two threads).
pub const GEMM_S_PER_FLOP: f64 = 9.0e-12;
/// Seconds per flop of the f64 Gram products and leading vectors.
pub const GRAM_S_PER_FLOP: f64 = 4.0e-11;
/// Seconds per `n³` of the small sequential work on `n×n` matrices (two Cholesky
/// factorizations, the core's SVD, the triangular solves).
pub const CORE_S_PER_CUBE: f64 = 2.4e-9;
/// Seconds per entry of copying the stacked pairs into f64 and the result back.
pub const COPY_S_PER_ENTRY: f64 = 4.0e-9;

/// Re-compression of a replica's applies with error feedback; see the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct Aggregator {
    compressor: Compressor,
    /// Applies aggregated so far.
    aggregated: u64,
}

impl Aggregator {
    /// Applies at most `rank` pairs (at least 1) when that is cheaper, keeping at most
    /// `rank` residual pairs.
    pub fn new(rank: usize) -> Self {
        let rank = rank.max(1);
        Self {
            compressor: Compressor::new(rank)
                .with_residual_cap(rank)
                .with_decomposition(Decomposition::Gram),
            aggregated: 0,
        }
    }

    /// Pairs applied per aggregated apply at most.
    pub fn rank(&self) -> usize {
        self.compressor.rank()
    }

    /// Residual pairs waiting for the next apply.
    pub fn residual_pairs(&self) -> usize {
        self.compressor.residual_pairs()
    }

    /// Squared Frobenius norm dropped so far by the residual's bound.
    pub fn dropped_sq(&self) -> f64 {
        self.compressor.dropped_sq()
    }

    /// Applies aggregated so far.
    pub fn aggregated(&self) -> u64 {
        self.aggregated
    }

    /// The model's estimate of applying `pairs` dense pairs to a `j × d` W directly, and
    /// through the aggregation (with the residual waiting), in seconds.
    pub fn costs(&self, pairs: usize, j: usize, d: usize) -> (f64, f64) {
        let (j, d) = (j as f64, d as f64);
        let n = (pairs + self.residual_pairs()) as f64;
        let rank = self.rank() as f64;
        let direct = GEMM_S_PER_FLOP * 2.0 * j * d * pairs as f64;
        // Two Gram products (2mn² each) and the 2R leading vectors of both halves; the n×n
        // work; the copies in and out; then the rank-R apply.
        let gram = GRAM_S_PER_FLOP * (2.0 * (j + d) * n * n + 4.0 * (j + d) * n * rank);
        let core = CORE_S_PER_CUBE * n * n * n;
        let copy = COPY_S_PER_ENTRY * (j + d) * (n + 2.0 * rank);
        let aggregated = gram + core + copy + GEMM_S_PER_FLOP * 2.0 * j * d * rank;
        (direct, aggregated)
    }

    /// Whether `pairs` dense pairs on a `j × d` W are cheaper applied through the
    /// aggregation ([`costs`](Self::costs)); never for `pairs ≤ rank` with nothing kept
    /// back (nothing to gain). Deterministic: see the [module docs](self).
    pub fn worth(&self, pairs: usize, j: usize, d: usize) -> bool {
        if pairs <= self.rank() && self.residual_pairs() == 0 {
            return false;
        }
        let (direct, aggregated) = self.costs(pairs, j, d);
        aggregated < direct
    }

    /// The dense pairs of `batches` (each scaled by `scales[b]`, and with `fold`'s row and
    /// column multipliers applied) plus the residual, as their best rank-R approximation:
    /// one batch of scale 1 to apply in their place.
    pub(crate) fn merge(
        &mut self,
        batches: &[&FactorBatch],
        scales: &[f32],
        fold: Option<(&[f32], &[f32])>,
        j: usize,
        d: usize,
    ) -> (FactorBatch, CompressStats) {
        let mut u = Vec::new();
        let mut v = Vec::new();
        for (b, &scale) in batches.iter().zip(scales) {
            let VFactors::Dense(bv) = &b.v else {
                continue;
            };
            for i in 0..b.len() {
                match fold {
                    None => u.extend(b.u_row(i).iter().map(|&x| scale * x)),
                    Some((rows, _)) => {
                        u.extend(b.u_row(i).iter().zip(rows).map(|(&x, &m)| scale * (x * m)))
                    }
                }
                let row = &bv[i * d..(i + 1) * d];
                match fold {
                    None => v.extend_from_slice(row),
                    Some((_, cols)) => v.extend(row.iter().zip(cols).map(|(&x, &c)| x * c)),
                }
            }
        }
        let merged = FactorBatch {
            origin: PeerId(0),
            clock: 0,
            scale: 1.0,
            j,
            d,
            u,
            v: VFactors::Dense(v),
        };
        self.aggregated += 1;
        self.compressor.compress(merged)
    }

    /// Applies `batches` (validated, at their own scales) to `replica` through the
    /// aggregation, whatever [`worth`](Self::worth) says (for benchmarks and tests).
    ///
    /// # Errors
    /// The replica's validation errors; W is then untouched.
    pub fn apply_to(
        &mut self,
        replica: &mut crate::Replica,
        batches: &[&FactorBatch],
    ) -> crate::Result<crate::ApplyStats> {
        let (j, d) = replica.dim();
        for b in batches {
            b.validate(j, d)?;
        }
        let scales: Vec<f32> = batches.iter().map(|b| b.scale).collect();
        let (merged, _) = self.merge(batches, &scales, None, j, d);
        let mut refs: Vec<&FactorBatch> = vec![&merged];
        refs.extend(
            batches
                .iter()
                .copied()
                .filter(|b| matches!(b.v, VFactors::Sparse { .. })),
        );
        replica.apply(&refs)
    }

    /// What is kept back, as bytes (as [`Compressor::save_state`]).
    pub fn save_state(&self) -> Vec<u8> {
        self.compressor.save_state()
    }

    /// Takes back what [`save_state`](Self::save_state) wrote.
    ///
    /// # Errors
    /// As [`Compressor::restore_state`].
    pub fn restore_state(&mut self, bytes: &[u8], j: usize, d: usize) -> crate::Result<()> {
        self.compressor.restore_state(bytes, j, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Replica;
    use crate::replica::{seeded_batches, seeded_w};

    fn rel_diff(a: &Replica, b: &Replica) -> f32 {
        let diff: f32 = (&a.w() - &b.w()).mapv(|x| x * x).sum().sqrt();
        diff / b.w().mapv(|x| x * x).sum().sqrt()
    }

    #[test]
    fn aggregating_pairs_of_rank_at_most_r_is_exact() {
        let (j, d) = (48, 40);
        let w0 = seeded_w(1, j, d);
        // 24 pairs in 4 batches whose u's span only 6 directions: rank ≤ 6.
        let mut batches = seeded_batches(2, j, d, 24, 4, None);
        let basis = seeded_batches(3, j, d, 6, 1, None).remove(0);
        for b in &mut batches {
            for i in 0..b.len() {
                let row: Vec<f32> = basis.u_row(i % 6).to_vec();
                b.u[i * j..(i + 1) * j].copy_from_slice(&row);
            }
        }
        let refs: Vec<&FactorBatch> = batches.iter().collect();
        let mut direct = Replica::new(w0.clone()).unwrap();
        direct.apply(&refs).unwrap();
        let mut agg = Aggregator::new(8);
        let mut merged = Replica::new(w0).unwrap();
        let stats = agg.apply_to(&mut merged, &refs).unwrap();
        assert_eq!(
            stats.dense_pairs,
            6,
            "the rank of the sum ({stats:?}, {} kept back)",
            agg.residual_pairs()
        );
        assert_eq!(agg.residual_pairs(), 0);
        assert!(
            rel_diff(&merged, &direct) < 1e-5,
            "{}",
            rel_diff(&merged, &direct)
        );
    }

    #[test]
    fn what_is_not_applied_is_kept_back_up_to_the_bound_and_the_rest_counted() {
        let (j, d) = (64, 64);
        let w0 = Replica::new(seeded_w(4, j, d)).unwrap();
        let batches = seeded_batches(5, j, d, 32, 4, None);
        let refs: Vec<&FactorBatch> = batches.iter().collect();
        let mut agg = Aggregator::new(4);
        let mut once = w0.clone();
        let stats = agg.apply_to(&mut once, &refs).unwrap();
        assert_eq!(stats.dense_pairs, 4);
        assert_eq!(agg.residual_pairs(), 4);
        assert!(agg.dropped_sq() > 0.0);
        // Applying nothing more hands the residual over: the next apply holds it.
        let mut direct = w0.clone();
        direct.apply(&refs).unwrap();
        let before = rel_diff(&once, &direct);
        agg.apply_to(&mut once, &[]).unwrap();
        assert_eq!(agg.residual_pairs(), 0);
        assert!(
            rel_diff(&once, &direct) < before,
            "the residual brings it closer"
        );
        // The state round-trips.
        let mut other = Aggregator::new(4);
        agg.apply_to(&mut once, &refs).unwrap();
        other.restore_state(&agg.save_state(), j, d).unwrap();
        assert_eq!(other.residual_pairs(), agg.residual_pairs());
    }

    #[test]
    fn the_model_aggregates_only_big_ws() {
        let agg = Aggregator::new(16);
        assert!(!agg.worth(128, 1024, 1024));
        assert!(agg.worth(128, 4096, 4096));
        assert!(!agg.worth(16, 4096, 4096), "nothing to gain at R pairs");
        assert!(!agg.worth(1024, 4096, 4096));
    }
}
