//! Exact branch-and-bound over Q-out graphs for small P.
//!
//! **Assignment order and symmetry breaking.** Out-sets are assigned peer by peer in a
//! canonical BFS labelling: peer 0 is the root; when peer `i`'s out-set is chosen, every
//! target not seen before gets the next unused label, so peer `i`'s options are "k new
//! labels `seen..seen+k`" plus `Q − k` of the labels already seen. Every strongly connected
//! graph has such a labelling (label peers in BFS order from any root), so the search is
//! complete while ignoring the order of new labels and all relabellings that do not
//! respect BFS order. Peer `i` must already be seen when its turn comes (else it is
//! unreachable from 0), which prunes disconnected branches.
//!
//! **Bound.** For a partial assignment (peers `0..i` fixed), every source's distance sum
//! is bounded below by an optimistic BFS: arcs of assigned peers are followed exactly;
//! every unassigned peer in the frontier, and every "wildcard" peer reached through one,
//! contributes Q wildcards at the next level, which may be any unreached peers. The ball
//! sizes this yields are upper bounds on the true ones in every completion, so
//! Σ_k (P − |ball_k|) is a lower bound. With nothing assigned it is the Moore bound; with
//! everything assigned it is the exact cost.

use std::time::Instant;

/// Largest P the exact search supports (peers are bits of a `u64`).
pub(crate) const MAX_PEERS: usize = 64;

/// Branch-and-bound state.
#[derive(Debug)]
pub(crate) struct Exact {
    p: usize,
    q: usize,
    out: Vec<usize>,
    best_cost: u64,
    best_out: Option<Vec<usize>>,
    /// Stop when `best_cost` reaches this (the global lower bound).
    target: u64,
    deadline: Instant,
    /// Stop after this many nodes (a budget in work: the same result on any machine).
    max_nodes: u64,
    pub(crate) nodes: u64,
    pub(crate) aborted: bool,
    /// Out-sets of fixed peers as bit masks (P ≤ 64).
    mask: Vec<u64>,
    /// Set by `row_bound`: whether the next peer to fix entered the ball.
    saw: bool,
}

/// Result of [`Exact::run`].
#[derive(Debug)]
pub(crate) struct ExactOutcome {
    /// Best graph found that beats the incumbent, if any.
    pub best_out: Option<Vec<usize>>,
    pub best_cost: u64,
    /// True if the whole tree was explored (or the bound was met): `best_cost` is optimal.
    pub proven: bool,
    pub nodes: u64,
}

impl Exact {
    /// `incumbent`: cost of the best known graph (the search looks for strictly better).
    ///
    /// # Panics
    /// If `p > 64` (peers are bits of a `u64`).
    pub(crate) fn new(p: usize, q: usize, incumbent: u64, target: u64, deadline: Instant) -> Self {
        assert!(
            p <= MAX_PEERS,
            "exact search supports at most {MAX_PEERS} peers"
        );
        Self {
            p,
            q,
            out: vec![usize::MAX; p * q],
            best_cost: incumbent,
            best_out: None,
            target,
            deadline,
            max_nodes: u64::MAX,
            nodes: 0,
            aborted: false,
            mask: vec![0; p],
            saw: false,
        }
    }

    pub(crate) fn run(mut self) -> ExactOutcome {
        if self.best_cost > self.target {
            self.branch(0, 1);
        }
        ExactOutcome {
            proven: !self.aborted,
            best_out: self.best_out,
            best_cost: self.best_cost,
            nodes: self.nodes,
        }
    }

    /// Stops the search after `nodes` nodes (checked every 1024).
    pub(crate) fn max_nodes(mut self, nodes: u64) -> Self {
        self.max_nodes = nodes;
        self
    }

    /// Assigns peer `i`'s out-set; labels `0..seen` are in use.
    fn branch(&mut self, i: usize, seen: usize) {
        let (p, q) = (self.p, self.q);
        self.nodes += 1;
        if self.nodes.is_multiple_of(1024)
            && (self.nodes >= self.max_nodes || Instant::now() >= self.deadline)
        {
            self.aborted = true;
        }
        if self.aborted || self.best_cost <= self.target {
            return;
        }
        if i >= seen {
            return; // peer i would be unreachable from peer 0
        }
        // Rows of the bound that do not see peer i are the same for every option.
        let mut fixed = 0u64;
        let mut dependent = Vec::new();
        for s in 0..p {
            let r = self.row_bound(s, i);
            if self.saw {
                dependent.push(s);
            } else {
                fixed = fixed.saturating_add(r);
            }
        }
        // Enumerate options: k new labels plus q − k old ones (excluding i).
        let old: Vec<usize> = (0..seen).filter(|&x| x != i).collect();
        let mut options: Vec<(u64, usize, Vec<usize>)> = Vec::new();
        let kmax = q.min(p - seen);
        for k in (0..=kmax).rev() {
            let need = q - k;
            if need > old.len() {
                continue;
            }
            let mut comb: Vec<usize> = (0..need).collect();
            loop {
                let mut set: Vec<usize> = comb.iter().map(|&c| old[c]).collect();
                set.extend(seen..seen + k);
                self.out[i * q..(i + 1) * q].copy_from_slice(&set);
                self.mask[i] = set.iter().fold(0, |m, &x| m | (1u64 << x));
                let b = self.bound(i + 1, fixed, &dependent);
                if b < self.best_cost {
                    options.push((b, k, set));
                }
                // next combination
                if !next_combination(&mut comb, old.len()) {
                    break;
                }
            }
        }
        options.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        for (b, k, set) in options {
            if self.aborted || b >= self.best_cost {
                break;
            }
            self.out[i * q..(i + 1) * q].copy_from_slice(&set);
            self.mask[i] = set.iter().fold(0, |m, &x| m | (1u64 << x));
            if i + 1 == p {
                // Leaf: the bound is the exact cost (finite only if strongly connected).
                self.best_cost = b;
                self.best_out = Some(self.out.clone());
                if self.best_cost <= self.target {
                    return;
                }
            } else {
                self.branch(i + 1, seen + k);
            }
        }
        self.out[i * q..(i + 1) * q].fill(usize::MAX);
        self.mask[i] = 0;
    }

    /// Lower bound on the cost of any completion with peers `0..assigned` fixed: `fixed`
    /// (the rows known not to change) plus the rows of the `dependent` sources; stops
    /// early (returning `u64::MAX`) once the sum cannot beat the incumbent.
    fn bound(&mut self, assigned: usize, fixed: u64, dependent: &[usize]) -> u64 {
        let mut total = fixed;
        for &s in dependent {
            if total >= self.best_cost {
                return u64::MAX;
            }
            total = total.saturating_add(self.row_bound(s, assigned));
        }
        if total >= self.best_cost {
            return u64::MAX;
        }
        total
    }

    /// Optimistic distance sum from `s` with peers `0..assigned` fixed. Also records in
    /// `self.saw` whether peer `assigned` (the next to be fixed) entered the ball, i.e.
    /// whether fixing it can change this row.
    fn row_bound(&mut self, s: usize, assigned: usize) -> u64 {
        let (p, q) = (self.p, self.q);
        let fixed_mask: u64 = if assigned >= 64 {
            u64::MAX
        } else {
            (1u64 << assigned) - 1
        };
        let mut reached: u64 = 1 << s;
        let mut frontier: u64 = reached;
        let mut determined = 1usize; // |D_k|
        let mut wild_total = 0usize; // Σ_j c_j
        let mut wild_level = 0usize; // c_k
        let mut cost = (p - 1) as u64; // k = 0 term: P − |B_0|
        loop {
            let mut fa = frontier & fixed_mask;
            let fu = frontier & !fixed_mask;
            let mut next = 0u64;
            while fa != 0 {
                let x = fa.trailing_zeros() as usize;
                fa &= fa - 1;
                next |= self.mask[x];
            }
            next &= !reached;
            let free = wild_level
                .saturating_mul(q)
                .saturating_add(fu.count_ones() as usize * q);
            if next == 0 && free == 0 {
                self.saw = true;
                return u64::MAX / 4; // closed ball: some peer unreachable
            }
            reached |= next;
            determined += next.count_ones() as usize;
            wild_level = free.min(p);
            wild_total = (wild_total + wild_level).min(p);
            let ub = (determined + wild_total).min(p);
            if ub == p {
                self.saw = assigned < 64 && reached & (1 << assigned) != 0;
                return cost;
            }
            cost += (p - ub) as u64;
            frontier = next;
        }
    }
}

/// Advances `comb` (strictly increasing indices into `0..n`) to the next combination.
fn next_combination(comb: &mut [usize], n: usize) -> bool {
    let k = comb.len();
    let mut i = k;
    while i > 0 {
        i -= 1;
        if comb[i] < n - k + i {
            comb[i] += 1;
            for j in i + 1..k {
                comb[j] = comb[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Exact;
    use crate::analysis::lower_bound;
    use crate::optimize::{Options, Proof, optimize};

    /// Obviously-correct reference: the minimum cost over every Q-out graph with peer 0's
    /// out-set fixed to {1..Q} (any graph can be relabelled so). Out-sets are bit masks;
    /// distances by level-synchronous BFS on masks; a graph is abandoned once its partial
    /// sum reaches the best so far (which cannot change the minimum).
    fn exhaustive_min(p: usize, q: usize) -> u64 {
        let all = (1u32 << p) - 1;
        let sets: Vec<Vec<u32>> = (0..p)
            .map(|i| {
                (0..=all)
                    .filter(|&m| m.count_ones() as usize == q && m & (1 << i) == 0)
                    .collect()
            })
            .collect();
        let first = ((1u32 << (q + 1)) - 1) & !1;
        let mut idx = vec![0usize; p];
        let mut mask = vec![0u32; p];
        mask[0] = first;
        let mut best = u64::MAX;
        'graphs: loop {
            for i in 1..p {
                mask[i] = sets[i][idx[i]];
            }
            let mut total = 0u64;
            for s in 0..p {
                let mut reached = 1u32 << s;
                let mut frontier = reached;
                let mut d = 0u64;
                while reached != all {
                    let mut next = 0;
                    let mut f = frontier;
                    while f != 0 {
                        next |= mask[f.trailing_zeros() as usize];
                        f &= f - 1;
                    }
                    next &= !reached;
                    if next == 0 {
                        total = u64::MAX;
                        break;
                    }
                    d += 1;
                    total += d * u64::from(next.count_ones());
                    reached |= next;
                    frontier = next;
                }
                if total >= best {
                    break;
                }
            }
            best = best.min(total);
            // odometer over peers 1..p
            let mut i = 1;
            loop {
                if i == p {
                    break 'graphs;
                }
                idx[i] += 1;
                if idx[i] < sets[i].len() {
                    break;
                }
                idx[i] = 0;
                i += 1;
            }
        }
        best
    }

    #[test]
    fn branch_and_bound_matches_exhaustive_enumeration_up_to_7_peers() {
        for p in 2..=7 {
            for q in 1..p {
                let reference = exhaustive_min(p, q);
                // From scratch, with no incumbent and no early stop at the bound.
                let far = Instant::now() + Duration::from_secs(3600);
                let r = Exact::new(p, q, u64::MAX, 0, far).run();
                assert!(r.proven, "P={p} Q={q}");
                assert_eq!(r.best_cost, reference, "P={p} Q={q}");
                let out = r.best_out.expect("a graph");
                let t = crate::Topology::from_flat(p, q, out).expect("valid");
                assert_eq!(t.cost(), reference);
                // Through the public optimizer.
                let o = optimize(p, q, &Options::default().max_moves(Some(200))).unwrap();
                assert!(o.proven_optimal, "P={p} Q={q}");
                assert_eq!(o.cost, reference, "P={p} Q={q}");
                if reference > lower_bound(p, q) {
                    assert_eq!(o.proof, Proof::Exhausted);
                }
            }
        }
    }
}
