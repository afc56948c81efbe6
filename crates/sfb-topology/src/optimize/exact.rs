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
    pub(crate) nodes: u64,
    pub(crate) aborted: bool,
    // scratch for the bound
    mark: Vec<bool>,
    frontier: Vec<usize>,
    next: Vec<usize>,
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
    pub(crate) fn new(p: usize, q: usize, incumbent: u64, target: u64, deadline: Instant) -> Self {
        Self {
            p,
            q,
            out: vec![usize::MAX; p * q],
            best_cost: incumbent,
            best_out: None,
            target,
            deadline,
            nodes: 0,
            aborted: false,
            mark: vec![false; p],
            frontier: Vec::with_capacity(p),
            next: Vec::with_capacity(p),
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

    /// Assigns peer `i`'s out-set; labels `0..seen` are in use.
    fn branch(&mut self, i: usize, seen: usize) {
        let (p, q) = (self.p, self.q);
        self.nodes += 1;
        if self.nodes % 1024 == 0 && Instant::now() >= self.deadline {
            self.aborted = true;
        }
        if self.aborted || self.best_cost <= self.target {
            return;
        }
        if i >= seen {
            return; // peer i would be unreachable from peer 0
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
                let b = self.bound(i + 1);
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
    }

    /// Lower bound on the cost of any completion with peers `0..assigned` fixed; stops
    /// early (returning ≥ `best_cost`) once the sum cannot beat the incumbent.
    fn bound(&mut self, assigned: usize) -> u64 {
        let mut total = 0u64;
        for s in 0..self.p {
            total += self.row_bound(s, assigned);
            if total >= self.best_cost {
                return u64::MAX;
            }
        }
        total
    }

    fn row_bound(&mut self, s: usize, assigned: usize) -> u64 {
        let (p, q) = (self.p, self.q);
        self.mark.fill(false);
        self.mark[s] = true;
        self.frontier.clear();
        self.frontier.push(s);
        let mut determined = 1usize; // |D_k|
        let mut wild_total = 0usize; // Σ_j c_j
        let mut wild_level = 0usize; // c_k
        let mut cost = (p - 1) as u64; // k = 0 term: P − |B_0|
        loop {
            self.next.clear();
            let mut free = wild_level.saturating_mul(q);
            for &x in &self.frontier {
                if x < assigned {
                    for &y in &self.out[x * q..(x + 1) * q] {
                        if !self.mark[y] {
                            self.mark[y] = true;
                            self.next.push(y);
                        }
                    }
                } else {
                    free = free.saturating_add(q);
                }
            }
            if self.next.is_empty() && free == 0 {
                return u64::MAX / 4; // closed ball: some peer unreachable
            }
            determined += self.next.len();
            wild_level = free.min(p);
            wild_total = (wild_total + wild_level).min(p);
            let ub = (determined + wild_total).min(p);
            if ub == p {
                return cost;
            }
            cost += (p - ub) as u64;
            std::mem::swap(&mut self.frontier, &mut self.next);
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
