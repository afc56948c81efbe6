//! What a topology does to training, not only to delay.
//!
//! SFB's eq. 3 (Σ hop distances) says how soon an update *could* reach every peer. Whether
//! training converges depends on what each replica applies, and this module computes the
//! figures that decide it for the two partial-broadcast modes of `sfb-core`.
//!
//! # The paper's mode (no forwarding)
//! Replica `p` applies its own and its in-neighbours' updates. Linearized around a
//! minimizer with Hessian `H`, the replicas' deviations move as
//! `x ← x − η (A ⊗ H) x` with `A = I + A_in` (`A_in[p][q] = 1` when `q` sends to `p`):
//! - with `Q = P − 1` every replica applies every update: the replicas stay identical
//!   ([`PaperMode::Exact`], full broadcast);
//! - otherwise, if some eigenvalue of `A` has real part `≤ 0`, that disagreement mode
//!   never contracts: the mini-batch noise that drives it accumulates (a random walk at
//!   `0`, exponential growth below), and the objective **rises** the longer the run
//!   ([`PaperMode::Diverges`]). The optimal `P = 12, Q = 3` graph has three zero
//!   eigenvalues;
//! - if every real part is positive the run is stable, but its fixed point has
//!   `Σ_{q ∈ {p} ∪ in(p)} g_q(W_q) = 0` for every `p`; `A` being invertible, each replica
//!   then sits at the minimizer of *its own shard's* loss, not the global one: training
//!   **stalls** above full broadcast's objective ([`PaperMode::Stalls`]).
//!
//! [`Learning::paper_min_real_part`] is `min Re λ(A)`.
//!
//! # The gossip mode (the default)
//! Each replica applies its own batch with weight `α P s_p` and each in-neighbour's batch
//! `q` with weight `(1 − α) P s_q / Q` ([`Learning::gossip_weights`]), and takes a consensus
//! step toward the mean of its in-neighbours' (compressed) replicas:
//! `W_p += γ (mean_{m ∈ in(p)} Ŵ_m − Ŵ_p)`.
//! - **Own weight `α > 1/2`.** The gradient part's disagreement dynamics are driven by
//!   `C = α I + (1 − α) A_in / Q`; `A_in / Q` is column-stochastic, so every eigenvalue of
//!   `C` has real part `≥ 2α − 1 > 0`: the gradients alone contract every disagreement
//!   mode, on any topology, wherever full broadcast's step is stable (`|λ(C)| ≤ 1`). With
//!   `α = 1/(Q+1)` (uniform) `C` is the paper's `A` scaled, zero or negative real parts
//!   included, and only the consensus can hold the replicas together.
//! - **Unbiased.** The consensus matrix `R` (`R[p][m] = 1/|in(p)|`) is row-stochastic; the
//!   replicas agree on the `π`-weighted mean `Σ π_p W_p`, `π` its left Perron vector
//!   ([`Learning::stationary`]). That mean moves by
//!   `Σ_q g_q P s_q (α π_q + (1 − α)/Q Σ_{i ∈ out(q)} π_i)`, so
//!   `s_q = 1 / (P (α π_q + (1 − α)/Q Σ_{i ∈ out(q)} π_i))` makes it move exactly as a full
//!   broadcast replica does (`Σ_q g_q`): no shard counts more than another, whatever the
//!   in-degrees. With every in-degree equal to `Q`, `π` is uniform and `s_q = 1`.
//!
//! Disagreement contracts by about `γ ·` [`Learning::mixing`] a clock through the
//! consensus, where `mixing` is `min Re (1 − λ)` over the eigenvalues `λ ≠ 1` of `R`; it is
//! positive for every strongly connected topology.

use faer::Mat;

use crate::Topology;

/// What the paper's partial broadcast (no forwarding) does on a topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PaperMode {
    /// Full broadcast: every replica applies every update and they stay identical.
    Exact,
    /// Stable, but each replica converges toward its own shard's minimizer, above full
    /// broadcast's objective.
    Stalls,
    /// Some disagreement mode never contracts: the objective rises with training.
    Diverges,
}

impl PaperMode {
    /// `exact`, `stalls` or `diverges` (the JSON value).
    pub fn name(self) -> &'static str {
        match self {
            PaperMode::Exact => "exact",
            PaperMode::Stalls => "stalls",
            PaperMode::Diverges => "diverges",
        }
    }
}

impl std::fmt::Display for PaperMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The learning figures of a topology; see the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Learning {
    /// `min Re λ(I + A_in)`: the paper mode's slowest disagreement mode (≤ 0: diverges).
    pub paper_min_real_part: f64,
    /// What the paper's mode does here.
    pub paper_mode: PaperMode,
    /// `min Re (1 − λ)` over the eigenvalues `λ ≠ 1` of the in-averaging matrix `R`: the
    /// gossip mode's consensus rate per unit step (its contraction a clock is about `γ`
    /// times this).
    pub mixing: f64,
    /// `π`, the left Perron vector of `R` (sums to 1; uniform when every in-degree is Q).
    pub stationary: Vec<f64>,
}

/// Tolerance below which a real part counts as zero (eigenvalues of a `P × P` 0/1 matrix).
const ZERO: f64 = 1e-9;

impl Learning {
    /// The figures of `t`.
    ///
    /// # Complexity
    /// O(P³) time (two dense eigenvalue problems) and O(P²) memory: about a second at
    /// `P = 1024`.
    pub fn of(t: &Topology) -> Self {
        let p = t.peers();
        let full = p <= 1 || t.out_degree() + 1 == p;
        let paper = Mat::<f64>::from_fn(p, p, |i, j| {
            let arc = t.in_neighbours(i).contains(&j);
            f64::from(u8::from(i == j || arc))
        });
        let paper_min_real_part = min_real(&paper, None);
        let paper_mode = if full {
            PaperMode::Exact
        } else if paper_min_real_part <= ZERO {
            PaperMode::Diverges
        } else {
            PaperMode::Stalls
        };
        let r = Mat::<f64>::from_fn(p, p, |i, j| {
            let inn = t.in_neighbours(i);
            if inn.contains(&j) {
                1.0 / inn.len() as f64
            } else {
                0.0
            }
        });
        // 1 − λ over the eigenvalues of R other than its Perron root 1.
        let mixing = if p <= 1 { 1.0 } else { min_real(&r, Some(1.0)) };
        let stationary = stationary(t);
        Self {
            paper_min_real_part,
            paper_mode,
            mixing,
            stationary,
        }
    }

    /// Peer `p`'s weights of the gossip mode with own weight `alpha` (see the
    /// [module docs](self)), indexed by origin: `α P s_p` for its own batches,
    /// `(1 − α) P s_q / Q` for an in-neighbour `q`'s, and for other origins the latter too
    /// (a topology repair can make them in-neighbours). `t` must be the topology these
    /// figures are of.
    pub fn gossip_weights(&self, t: &Topology, p: usize, alpha: f64) -> Vec<f64> {
        let n = t.peers();
        let q = t.out_degree().max(1) as f64;
        let pi = &self.stationary;
        (0..n)
            .map(|o| {
                let mass = alpha * pi[o]
                    + (1.0 - alpha) / q * t.out(o).iter().map(|&i| pi[i]).sum::<f64>();
                let s = 1.0 / (n as f64 * mass);
                let share = if o == p { alpha } else { (1.0 - alpha) / q };
                share * n as f64 * s
            })
            .collect()
    }
}

/// `min Re λ(m)`, or with `skip = Some(s)`: `min Re (s − λ)` over the eigenvalues other
/// than the one closest to `s`.
fn min_real(m: &Mat<f64>, skip: Option<f64>) -> f64 {
    let Ok(mut eig) = m.eigenvalues() else {
        // faer's eigensolver does not fail on finite input; report "unknown" as 0.
        return 0.0;
    };
    match skip {
        None => eig.iter().map(|z| z.re).fold(f64::INFINITY, f64::min),
        Some(s) => {
            let closest = eig
                .iter()
                .enumerate()
                .min_by(|a, b| {
                    let da = (a.1.re - s).hypot(a.1.im);
                    let db = (b.1.re - s).hypot(b.1.im);
                    da.total_cmp(&db)
                })
                .map(|(i, _)| i);
            if let Some(i) = closest {
                eig.swap_remove(i);
            }
            eig.iter().map(|z| s - z.re).fold(f64::INFINITY, f64::min)
        }
    }
}

/// The left Perron vector of the in-averaging matrix, by power iteration on its lazy form
/// (`π ← (π + π R)/2`, which has the same fixed point and converges for every strongly
/// connected topology).
fn stationary(t: &Topology) -> Vec<f64> {
    let p = t.peers();
    let mut pi = vec![1.0 / p as f64; p];
    let mut next = vec![0.0; p];
    for _ in 0..100_000 {
        next.iter_mut().zip(&pi).for_each(|(n, &x)| *n = 0.5 * x);
        for (i, &x) in pi.iter().enumerate() {
            // π R: row i of R spreads π_i over i's in-neighbours.
            let inn = t.in_neighbours(i);
            let share = 0.5 * x / inn.len() as f64;
            for &m in inn {
                next[m] += share;
            }
        }
        let moved: f64 = next.iter().zip(&pi).map(|(a, b)| (a - b).abs()).sum();
        std::mem::swap(&mut pi, &mut next);
        if moved < 1e-15 {
            break;
        }
    }
    let total: f64 = pi.iter().sum();
    pi.iter().map(|x| x / total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Method, generate};
    use proptest::prelude::*;

    /// Runs the paper mode's linear system `x ← x − η A x` (one scalar per replica) from
    /// every unit start and returns the Frobenius norm of `(I − η A)^T`: at least 1 when
    /// some mode does not contract (its spectral radius is then ≥ 1), near 0 when all do.
    fn simulate_paper(t: &Topology, eta: f64, steps: usize) -> f64 {
        let p = t.peers();
        let mut total = 0.0;
        for start in 0..p {
            let mut x = vec![0.0; p];
            x[start] = 1.0;
            for _ in 0..steps {
                let ax: Vec<f64> = (0..p)
                    .map(|i| x[i] + t.in_neighbours(i).iter().map(|&q| x[q]).sum::<f64>())
                    .collect();
                x.iter_mut().zip(&ax).for_each(|(v, a)| *v -= eta * a);
            }
            total += x.iter().map(|v| v * v).sum::<f64>();
        }
        total.sqrt()
    }

    /// `min Re λ ≤ 0` exactly when the simulated system keeps a mode that does not die
    /// out; clearly positive when everything contracts (marginal cases are not asserted).
    fn agrees_with_simulation(t: &Topology) {
        let l = Learning::of(t);
        let norm = simulate_paper(t, 0.01, 20_000);
        let m = l.paper_min_real_part;
        if m > 0.05 {
            assert!(norm < 0.01, "min Re {m} but ‖(I − ηA)^T‖ = {norm}");
        } else if m <= 1e-9 {
            assert!(norm >= 0.99, "min Re {m} but ‖(I − ηA)^T‖ = {norm}");
        }
    }

    #[test]
    fn rings_of_even_and_odd_size_against_the_linear_system() {
        for p in [4, 5, 6, 7, 12, 13] {
            for q in [1, 2] {
                let t = generate(
                    &Method::Circulant(if q == 1 { vec![1] } else { vec![1, p - 1] }),
                    p,
                    q,
                )
                .unwrap();
                agrees_with_simulation(&t);
            }
        }
        // A directed ring, A = I + shift: eigenvalues 1 + e^{2πik/P}; at even P one is 0.
        let even = generate(&Method::Circulant(vec![1]), 6, 1).unwrap();
        assert_eq!(Learning::of(&even).paper_mode, PaperMode::Diverges);
        let odd = generate(&Method::Circulant(vec![1]), 7, 1).unwrap();
        let l = Learning::of(&odd);
        assert_eq!(l.paper_mode, PaperMode::Stalls);
        let expected = 1.0 + (2.0 * std::f64::consts::PI * 3.0 / 7.0).cos();
        assert!((l.paper_min_real_part - expected).abs() < 1e-9, "{l:?}");
    }

    #[test]
    fn complete_graphs_are_exact_and_mix_in_one_step() {
        for p in [2, 3, 6, 12] {
            let t = generate(&Method::Full, p, p - 1).unwrap();
            let l = Learning::of(&t);
            assert_eq!(l.paper_mode, PaperMode::Exact);
            // R = (J − I)/(P − 1): every other eigenvalue is −1/(P − 1).
            assert!(
                (l.mixing - (1.0 + 1.0 / (p as f64 - 1.0))).abs() < 1e-9,
                "{l:?}"
            );
            // Regular: π uniform, own α·P, others (1 − α)·P/Q.
            let w = l.gossip_weights(&t, 0, 0.75);
            assert!((w[0] - 0.75 * p as f64).abs() < 1e-9, "{w:?}");
            assert!(
                (w[1] - 0.25 * p as f64 / (p as f64 - 1.0)).abs() < 1e-9,
                "{w:?}"
            );
        }
    }

    #[test]
    fn the_optimizers_graphs_at_p12_match_the_measured_runs() {
        let opts = crate::Options::default();
        // Q = 3: three zero eigenvalues (held-out objective rose to 10.75 by clock 1,000).
        let q3 = crate::optimize(12, 3, &opts).unwrap().topology;
        let l3 = Learning::of(&q3);
        assert_eq!(l3.paper_mode, PaperMode::Diverges);
        assert!(l3.paper_min_real_part.abs() < 1e-6, "{l3:?}");
        agrees_with_simulation(&q3);
        // Q = 2: every real part positive, smallest 0.132 (the run stalled at 0.296).
        let q2 = crate::optimize(12, 2, &opts).unwrap().topology;
        let l2 = Learning::of(&q2);
        assert_eq!(l2.paper_mode, PaperMode::Stalls);
        agrees_with_simulation(&q2);
        for t in [&q2, &q3] {
            assert!(Learning::of(t).mixing > 0.05);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// On random Q-out graphs: the linear analysis agrees with the simulation, π is
        /// a fixed point of R, and the weights make every batch count the same in the
        /// π-mean.
        #[test]
        fn random_graphs(p in 4usize..14, q in 1usize..4, seed in 0u64..1000) {
            prop_assume!(q < p);
            let t = generate(&Method::Random { seed }, p, q).unwrap();
            agrees_with_simulation(&t);
            let l = Learning::of(&t);
            let total: f64 = l.stationary.iter().sum();
            prop_assert!((total - 1.0).abs() < 1e-9);
            for i in 0..p {
                let inn = t.in_neighbours(i);
                let pr: f64 = (0..p)
                    .filter(|&k| t.in_neighbours(k).contains(&i))
                    .map(|k| l.stationary[k] / t.in_neighbours(k).len() as f64)
                    .sum();
                prop_assert!((pr - l.stationary[i]).abs() < 1e-9, "π R ≠ π at {i} ({inn:?})");
            }
            // Every origin's batches move the π-mean by exactly one full-broadcast step:
            // Σ over the replicas that apply them (itself and its out-neighbours) of π ×
            // their weight is 1, for any own weight.
            for alpha in [1.0 / (q as f64 + 1.0), 0.5, 0.75] {
                let w: Vec<Vec<f64>> = (0..p).map(|r| l.gossip_weights(&t, r, alpha)).collect();
                for (o, own) in w.iter().enumerate() {
                    let moved: f64 = l.stationary[o] * own[o]
                        + t.out(o).iter().map(|&i| l.stationary[i] * w[i][o]).sum::<f64>();
                    prop_assert!((moved - 1.0).abs() < 1e-9, "origin {o}: {moved}");
                }
            }
            prop_assert!(l.mixing > 0.0, "strongly connected yet mixing {}", l.mixing);
        }
    }
}
