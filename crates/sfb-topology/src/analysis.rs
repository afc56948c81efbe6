//! Delay analysis: hop distances, the eq. 3 cost, diameter, mean delay, and the Moore-type
//! lower bound.

use crate::topology::Topology;

/// Distance value for "not reachable".
pub(crate) const UNREACHABLE: u32 = u32::MAX;

/// The BFS kernel every part of the crate uses.
///
/// Fills `row` (length P) with hop distances from `src` over the row-major `P × Q` table
/// `out`, using `queue` as scratch. Returns `(Σ distances, max distance, peers reached)`;
/// unreached entries are [`UNREACHABLE`] and excluded from the sum and max.
pub(crate) fn bfs_into(
    out: &[usize],
    q: usize,
    src: usize,
    row: &mut [u32],
    queue: &mut Vec<usize>,
) -> (u64, u32, usize) {
    row.fill(UNREACHABLE);
    queue.clear();
    row[src] = 0;
    queue.push(src);
    let mut head = 0;
    let mut sum = 0u64;
    let mut max = 0u32;
    while head < queue.len() {
        let x = queue[head];
        head += 1;
        let d = row[x] + 1;
        for &y in &out[x * q..(x + 1) * q] {
            if row[y] == UNREACHABLE {
                row[y] = d;
                sum += u64::from(d);
                max = d;
                queue.push(y);
            }
        }
    }
    (sum, max, queue.len())
}

/// Distances from `src` as a fresh vector (see [`bfs_into`]).
pub(crate) fn bfs_distances(out: &[usize], q: usize, src: usize) -> Vec<u32> {
    let p = out.len() / q.max(1);
    let mut row = vec![0; p];
    let mut queue = Vec::with_capacity(p);
    bfs_into(out, q, src, &mut row, &mut queue);
    row
}

/// Σ of all pairwise distances, or `None` if some pair is unreachable.
pub(crate) fn total_cost(out: &[usize], p: usize, q: usize) -> Option<u64> {
    let mut row = vec![0; p];
    let mut queue = Vec::with_capacity(p);
    let mut total = 0;
    for s in 0..p {
        let (sum, _, reached) = bfs_into(out, q, s, &mut row, &mut queue);
        if reached != p {
            return None;
        }
        total += sum;
    }
    Some(total)
}

/// Per-source Moore-type bound: the least possible Σ_q dist(p, q) for one source `p`.
pub(crate) fn row_lower_bound(peers: usize, out_degree: usize) -> u64 {
    if peers <= 1 {
        return 0;
    }
    if out_degree == 0 {
        return u64::MAX;
    }
    let mut remaining = (peers - 1) as u64;
    let mut level: u64 = out_degree as u64;
    let mut k = 1u64;
    let mut sum = 0u64;
    while remaining > 0 {
        let n = level.min(remaining);
        sum += k * n;
        remaining -= n;
        level = level.saturating_mul(out_degree as u64);
        k += 1;
    }
    sum
}

/// The Moore-type lower bound on the cost of any Q-out topology over P peers.
///
/// From any peer at most `Q^k` peers lie at distance `k`, so its distance sum is at least
/// `Σ_k k·n_k` with `n_k = min(Q^k, peers not yet reached)`; the bound is P times that.
///
/// # Arguments
/// * `peers` — P; `out_degree` — Q.
///
/// # Returns
/// The bound; 0 for P ≤ 1, `u64::MAX` for Q = 0 with P ≥ 2 (no topology exists).
///
/// # Complexity
/// O(log_Q P).
///
/// # Example
/// ```
/// // P = 12, Q = 3: from each peer 3 at distance 1 and the other 8 at distance 2.
/// assert_eq!(sfb_topology::lower_bound(12, 3), 12 * (3 + 2 * 8));
/// ```
pub fn lower_bound(peers: usize, out_degree: usize) -> u64 {
    let row = row_lower_bound(peers, out_degree);
    if row == u64::MAX {
        return row;
    }
    row * peers as u64
}

/// Relative gap `(cost − bound) / bound` (0 when the bound is 0).
pub fn gap(cost: u64, lower_bound: u64) -> f64 {
    if lower_bound == 0 {
        0.0
    } else {
        (cost as f64 - lower_bound as f64) / lower_bound as f64
    }
}

/// The delay analysis of a topology: all-pairs hop distances and summary numbers.
///
/// Built by [`Topology::analyze`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Analysis {
    /// Number of peers P.
    pub peers: usize,
    /// Out-degree Q.
    pub out_degree: usize,
    /// Σ over ordered pairs p ≠ q of the hop distance p → q (SFB eq. 3).
    pub cost: u64,
    /// The Moore-type lower bound ([`lower_bound`]).
    pub lower_bound: u64,
    /// The largest hop distance.
    pub diameter: u32,
    /// Mean hop distance over ordered pairs p ≠ q: `cost / (P (P − 1))`.
    pub mean_delay: f64,
    /// Per peer, the largest hop distance from it.
    pub eccentricity: Vec<u32>,
    distances: Vec<u32>,
}

impl Analysis {
    pub(crate) fn of(t: &Topology) -> Self {
        let p = t.peers();
        let q = t.out_degree();
        let mut distances = vec![0u32; p * p];
        let mut queue = Vec::with_capacity(p);
        let mut cost = 0;
        let mut eccentricity = Vec::with_capacity(p);
        for (s, row) in distances.chunks_mut(p).enumerate() {
            let (sum, max, reached) = bfs_into(t.flat(), q, s, row, &mut queue);
            debug_assert_eq!(reached, p, "a Topology is strongly connected");
            cost += sum;
            eccentricity.push(max);
        }
        Self {
            peers: p,
            out_degree: q,
            cost,
            lower_bound: lower_bound(p, q),
            diameter: eccentricity.iter().copied().max().unwrap_or(0),
            mean_delay: cost as f64 / (p * (p - 1)) as f64,
            eccentricity,
            distances,
        }
    }

    /// Hop distance `from → to`.
    ///
    /// # Panics
    /// If either id is ≥ P.
    pub fn distance(&self, from: usize, to: usize) -> u32 {
        assert!(to < self.peers, "peer {to} out of range");
        self.distances[from * self.peers + to]
    }

    /// The row-major `P × P` distance matrix.
    pub fn distances(&self) -> &[u32] {
        &self.distances
    }

    /// Relative gap of the cost to the lower bound, e.g. `0.046` for 4.6 %.
    pub fn gap(&self) -> f64 {
        gap(self.cost, self.lower_bound)
    }
}
