//! Local search over Q-out graphs: arc redirections evaluated with incremental
//! shortest-path updates, guided by the worst-served pairs, under simulated annealing.

use std::time::Instant;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::analysis::{UNREACHABLE, bfs_into};

/// Mutable search state: the graph, its distance matrix and row sums.
#[derive(Debug, Clone)]
pub(crate) struct Search {
    p: usize,
    q: usize,
    out: Vec<usize>,
    inn: Vec<Vec<usize>>,
    /// Row-major P × P distances (exact for the current graph).
    dist: Vec<u32>,
    /// Σ of each row (over reached peers).
    rows: Vec<u64>,
    /// Peers reached from each source.
    reached: Vec<usize>,
    /// Number of sources that do not reach everyone.
    broken: usize,
    total: u64,
    queue: Vec<usize>,
    /// Pending evaluation: the move, the affected sources and their new rows.
    pending: Option<Pending>,
    affected: Vec<usize>,
    rowbuf: Vec<u32>,
    sums: Vec<(u64, usize)>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    u: usize,
    slot: usize,
    w: usize,
}

impl Search {
    /// Builds the state for the row-major `P × Q` table `out`.
    pub(crate) fn new(p: usize, q: usize, out: Vec<usize>) -> Self {
        let mut inn = vec![Vec::with_capacity(q + 2); p];
        for u in 0..p {
            for &v in &out[u * q..(u + 1) * q] {
                inn[v].push(u);
            }
        }
        let mut s = Self {
            p,
            q,
            out,
            inn,
            dist: vec![0; p * p],
            rows: vec![0; p],
            reached: vec![0; p],
            broken: 0,
            total: 0,
            queue: Vec::with_capacity(p),
            pending: None,
            affected: Vec::with_capacity(p),
            rowbuf: Vec::new(),
            sums: Vec::with_capacity(p),
        };
        for src in 0..p {
            let (sum, _, reached) = bfs_into(
                &s.out,
                q,
                src,
                &mut s.dist[src * p..(src + 1) * p],
                &mut s.queue,
            );
            s.rows[src] = sum;
            s.reached[src] = reached;
            if reached != p {
                s.broken += 1;
            }
            s.total += sum;
        }
        s
    }

    pub(crate) fn p(&self) -> usize {
        self.p
    }

    pub(crate) fn q(&self) -> usize {
        self.q
    }

    /// Current cost, or `None` if the graph is not strongly connected.
    pub(crate) fn cost(&self) -> Option<u64> {
        (self.broken == 0).then_some(self.total)
    }

    pub(crate) fn out(&self) -> &[usize] {
        &self.out
    }

    pub(crate) fn dist(&self, s: usize, t: usize) -> u32 {
        self.dist[s * self.p + t]
    }

    pub(crate) fn row_sum(&self, s: usize) -> u64 {
        self.rows[s]
    }

    /// Whether `u → w` may replace one of `u`'s arcs (no self loop, no duplicate).
    pub(crate) fn can_target(&self, u: usize, w: usize) -> bool {
        w != u && !self.out[u * self.q..(u + 1) * self.q].contains(&w)
    }

    /// Evaluates replacing arc `u → out[u][slot]` by `u → w` without committing it.
    ///
    /// Only sources whose distances can change are re-searched: those for which the old
    /// arc was the unique shortest-path parent of its head, and those for which the new
    /// arc is a shortcut. Returns the change of the cost, or `None` if the move breaks
    /// strong connectivity. Call [`commit`](Self::commit) to apply it.
    pub(crate) fn evaluate(&mut self, u: usize, slot: usize, w: usize) -> Option<i64> {
        debug_assert!(self.can_target(u, w));
        let (p, q) = (self.p, self.q);
        let v = self.out[u * q + slot];
        self.affected.clear();
        for s in 0..p {
            let row = &self.dist[s * p..(s + 1) * p];
            let du = row[u];
            if du == UNREACHABLE {
                continue;
            }
            let removal = row[v] == du + 1 && !self.inn[v].iter().any(|&x| x != u && row[x] == du);
            if removal || du + 1 < row[w] {
                self.affected.push(s);
            }
        }
        self.out[u * q + slot] = w;
        if self.rowbuf.len() < self.affected.len() * p {
            self.rowbuf.resize(self.affected.len() * p, 0);
        }
        self.sums.clear();
        let mut delta = 0i64;
        let mut broken = self.broken as i64;
        for (k, &s) in self.affected.iter().enumerate() {
            let row = &mut self.rowbuf[k * p..(k + 1) * p];
            let (sum, _, reached) = bfs_into(&self.out, q, s, row, &mut self.queue);
            delta += sum as i64 - self.rows[s] as i64;
            broken += i64::from(reached != p) - i64::from(self.reached[s] != p);
            self.sums.push((sum, reached));
        }
        self.out[u * q + slot] = v;
        self.pending = Some(Pending { u, slot, w });
        (broken == 0).then_some(delta)
    }

    /// Applies the move last passed to [`evaluate`](Self::evaluate).
    pub(crate) fn commit(&mut self) {
        let Pending { u, slot, w } = self.pending.take().expect("evaluate before commit");
        let (p, q) = (self.p, self.q);
        let v = self.out[u * q + slot];
        self.out[u * q + slot] = w;
        let pos = self.inn[v]
            .iter()
            .position(|&x| x == u)
            .expect("arc present");
        self.inn[v].swap_remove(pos);
        self.inn[w].push(u);
        for (k, &s) in self.affected.iter().enumerate() {
            self.dist[s * p..(s + 1) * p].copy_from_slice(&self.rowbuf[k * p..(k + 1) * p]);
            let (sum, reached) = self.sums[k];
            self.total = self.total - self.rows[s] + sum;
            self.rows[s] = sum;
            self.broken =
                self.broken + usize::from(reached != p) - usize::from(self.reached[s] != p);
            self.reached[s] = reached;
        }
    }
}

/// Simulated-annealing parameters and budget.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    pub deadline: Instant,
    pub max_moves: Option<u64>,
    /// Stop as soon as the cost reaches this value (the lower bound).
    pub target: u64,
}

/// Outcome of [`anneal`].
#[derive(Debug)]
pub(crate) struct Outcome {
    pub best_out: Vec<usize>,
    pub best_cost: u64,
    pub moves: u64,
}

/// Improves `search` by simulated annealing over guided and random arc redirections.
///
/// Moves: (a) pick a source `s` and one of its farthest peers `t`; pick `u` two levels
/// closer to `s` than `t` (so `u → t` shortens `s → t`); try every slot of `u` and keep
/// the best; (b) a uniformly random redirection. Accepts improvements and sideways moves
/// always, uphill moves with probability `exp(−Δ/T)`, `T` decaying geometrically over the
/// budget. Returns the best graph seen.
pub(crate) fn anneal(search: &mut Search, rng: &mut ChaCha8Rng, budget: &Budget) -> Outcome {
    let (p, q) = (search.p(), search.q());
    let start_cost = search.cost().expect("start is strongly connected");
    let mut best_cost = start_cost;
    let mut best_out = search.out().to_vec();
    let mut moves = 0u64;
    if best_cost <= budget.target || p < 3 || q + 1 >= p {
        return Outcome {
            best_out,
            best_cost,
            moves,
        };
    }
    let start = Instant::now();
    let total_time = budget
        .deadline
        .saturating_duration_since(start)
        .as_secs_f64()
        .max(1e-3);
    // Temperature in cost units: a few per-row units early, near zero at the end.
    let mean_row = start_cost as f64 / p as f64;
    let t0 = (mean_row * 0.01).max(0.5);
    let t1 = 0.05f64;
    let mut temp = t0;
    let mut level_buf: Vec<usize> = Vec::with_capacity(p);
    let mut far_buf: Vec<usize> = Vec::with_capacity(p);
    loop {
        if moves % 64 == 0 {
            let now = Instant::now();
            if now >= budget.deadline {
                break;
            }
            let frac = match budget.max_moves {
                Some(m) => moves as f64 / m as f64,
                None => now.duration_since(start).as_secs_f64() / total_time,
            };
            temp = t0 * (t1 / t0).powf(frac.min(1.0));
        }
        if budget.max_moves.is_some_and(|m| moves >= m) {
            break;
        }
        moves += 1;
        let guided = rng.random_bool(0.8);
        let mut best_move: Option<(usize, usize, usize, i64)> = None;
        if guided {
            let s = rng.random_range(0..p);
            let ecc = (0..p).map(|t| search.dist(s, t)).max().unwrap_or(0);
            if ecc < 2 {
                continue;
            }
            far_buf.clear();
            far_buf.extend((0..p).filter(|&t| search.dist(s, t) == ecc));
            let t = far_buf[rng.random_range(0..far_buf.len())];
            level_buf.clear();
            level_buf.extend((0..p).filter(|&u| search.dist(s, u) == ecc - 2));
            let u = level_buf[rng.random_range(0..level_buf.len())];
            if !search.can_target(u, t) {
                continue;
            }
            for slot in 0..q {
                if let Some(d) = search.evaluate(u, slot, t)
                    && best_move.is_none_or(|b| d < b.3)
                {
                    best_move = Some((u, slot, t, d));
                }
            }
        } else {
            let u = rng.random_range(0..p);
            let w = rng.random_range(0..p);
            if !search.can_target(u, w) {
                continue;
            }
            let slot = rng.random_range(0..q);
            if let Some(d) = search.evaluate(u, slot, w) {
                best_move = Some((u, slot, w, d));
            }
        }
        let Some((u, slot, w, d)) = best_move else {
            continue;
        };
        let accept = d <= 0 || rng.random::<f64>() < (-(d as f64) / temp).exp();
        if !accept {
            continue;
        }
        // Re-evaluate if the kept move was not the last one evaluated.
        search.evaluate(u, slot, w);
        search.commit();
        let cost = search.cost().expect("accepted moves keep connectivity");
        if cost < best_cost {
            best_cost = cost;
            best_out.copy_from_slice(search.out());
            if best_cost <= budget.target {
                break;
            }
        }
    }
    Outcome {
        best_out,
        best_cost,
        moves,
    }
}
