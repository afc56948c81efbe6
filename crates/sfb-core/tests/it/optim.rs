//! The optimizer layer against straightforward references: the factored adaptive step
//! against dense AdaGrad (exact for rank-1 statistics), dense AdaGrad, AdaRevision and
//! momentum against naive f64 loops, schedules against hand-scaled batches, and refusal of
//! bad input without touching W or the optimizer's state; SAGA (and SGD's weight decay)
//! against a naive loop, and SAGA's linear convergence on a least-squares problem where SGD
//! at the same step stalls.

use ndarray::{Array2, ArrayView2};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sfb_core::replica::seeded_batches;
use sfb_core::{FactorBatch, Method, Optimizer, PeerId, Replica, Schedule, Stepper, VFactors};

const J: usize = 6;
const D: usize = 9;
const LR: f32 = 0.05;

/// One batch of `k` seeded pairs (the kernel's own generator), from `origin` at `clock`,
/// with SGD's scale `−lr/k`; sparse `v` has 4 non-zeros per pair.
fn batch(rng: &mut ChaCha8Rng, origin: u32, clock: u64, k: usize, sparse: bool) -> FactorBatch {
    let mut b = seeded_batches(rng.random(), J, D, k, 1, sparse.then_some(4)).remove(0);
    b.origin = PeerId(origin);
    b.clock = clock;
    b.scale = -LR / k as f32;
    b
}

/// `scale · Σ u vᵀ` in f64.
fn dense(b: &FactorBatch) -> Array2<f64> {
    let mut m = Array2::<f64>::zeros((J, D));
    for i in 0..b.len() {
        let v: Vec<f64> = match &b.v {
            VFactors::Dense(v) => v[i * D..(i + 1) * D].iter().map(|&x| x.into()).collect(),
            VFactors::Sparse {
                indptr,
                indices,
                values,
            } => {
                let mut row = vec![0.0; D];
                for at in indptr[i] as usize..indptr[i + 1] as usize {
                    row[indices[at] as usize] += f64::from(values[at]);
                }
                row
            }
            _ => unreachable!(),
        };
        for r in 0..J {
            for c in 0..D {
                m[[r, c]] += f64::from(b.scale) * f64::from(b.u_row(i)[r]) * v[c];
            }
        }
    }
    m
}

fn max_rel(a: ArrayView2<'_, f32>, b: &Array2<f64>) -> f64 {
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-30);
    a.iter()
        .zip(b.iter())
        .fold(0f64, |m, (x, y)| m.max((f64::from(*x) - y).abs() / scale))
}

fn w0() -> Array2<f32> {
    Array2::from_shape_fn((J, D), |(r, c)| 0.01 * (r as f32) - 0.02 * (c as f32))
}

/// SAGA's `n` in these tests (the other methods ignore it).
const N: usize = 50;

fn stepper(method: Method) -> Stepper {
    let mut o = Optimizer::new(method);
    o.eps = 1e-20;
    o.saga_samples = N;
    Stepper::new(o, LR, 100, (J, D)).unwrap()
}

#[test]
fn factored_equals_dense_adagrad_for_rank_one_statistics() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    // One pair: G is rank 1, the factorization is exact.
    let b = batch(&mut rng, 0, 0, 1, false);
    let (mut wf, mut wd) = (Replica::new(w0()).unwrap(), Replica::new(w0()).unwrap());
    stepper(Method::Factored).apply(&mut wf, &[&b], 1).unwrap();
    stepper(Method::AdaGrad).apply(&mut wd, &[&b], 1).unwrap();
    let d = wd.w().mapv(f64::from);
    assert!(max_rel(wf.w(), &d) < 1e-5, "{}", max_rel(wf.w(), &d));
    // The first AdaGrad step moves every touched entry by lr in the update's direction.
    let step = &wd.w().mapv(f64::from) - &w0().mapv(f64::from);
    let sgd = dense(&b);
    for (s, g) in step.iter().zip(sgd.iter()) {
        if g.abs() > 1e-9 {
            assert!((s - f64::from(LR) * g.signum()).abs() < 1e-6, "{s} vs {g}");
        }
    }
    // Several updates that share v up to scale: G stays rank 1, still exact.
    let mut b2 = b.clone();
    b2.clock = 1;
    b2.u.iter_mut().for_each(|x| *x = *x * 0.5 + 0.1);
    let (mut sf, mut sd) = (stepper(Method::Factored), stepper(Method::AdaGrad));
    let (mut wf, mut wd) = (Replica::new(w0()).unwrap(), Replica::new(w0()).unwrap());
    for g in [&b, &b2] {
        sf.apply(&mut wf, &[g], g.clock + 1).unwrap();
        sd.apply(&mut wd, &[g], g.clock + 1).unwrap();
    }
    // u changes between the two updates, so G = u₁²v² + u₂²v² = (u₁² + u₂²)v²: rank 1.
    let d = wd.w().mapv(f64::from);
    assert!(max_rel(wf.w(), &d) < 1e-5, "{}", max_rel(wf.w(), &d));
}

#[test]
fn factored_matches_a_dense_per_sample_reference() {
    // Row and column sums of Σ_i (a u_i v_iᵀ)², per sample, from the factors (dense and
    // sparse v, several groups) against the same sums over materialized pairs, then
    // W += Σ_b Δ_b ⊘ (ρ γᵀ).
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for sparse in [false, true] {
        let mut s = stepper(Method::Factored);
        let mut w = Replica::new(w0()).unwrap();
        let mut rw = w0().mapv(f64::from);
        let (mut rows, mut cols) = (vec![0f64; J], vec![0f64; D]);
        for clock in 0..5 {
            let group: Vec<FactorBatch> = (0..3)
                .map(|p| batch(&mut rng, p, clock, 4, sparse))
                .collect();
            let refs: Vec<&FactorBatch> = group.iter().collect();
            s.apply(&mut w, &refs, clock + 1).unwrap();
            let mut total = Array2::<f64>::zeros((J, D));
            for b in &group {
                for i in 0..b.len() {
                    let mut one = b.clone();
                    one.u = b.u_row(i).to_vec();
                    one.v = match &b.v {
                        VFactors::Dense(v) => VFactors::Dense(v[i * D..(i + 1) * D].to_vec()),
                        VFactors::Sparse {
                            indptr,
                            indices,
                            values,
                        } => {
                            let (x, y) = (indptr[i] as usize, indptr[i + 1] as usize);
                            VFactors::Sparse {
                                indptr: vec![0, (y - x) as u32],
                                indices: indices[x..y].to_vec(),
                                values: values[x..y].to_vec(),
                            }
                        }
                        _ => unreachable!(),
                    };
                    let x = dense(&one) / f64::from(LR);
                    for r in 0..J {
                        for c in 0..D {
                            rows[r] += x[[r, c]] * x[[r, c]];
                            cols[c] += x[[r, c]] * x[[r, c]];
                        }
                    }
                }
                total += &dense(b);
            }
            let root = rows.iter().sum::<f64>().sqrt().sqrt();
            for r in 0..J {
                for c in 0..D {
                    let (rho, gamma) = (rows[r].sqrt() / root, cols[c].sqrt() / root);
                    if rho > 0.0 && gamma > 0.0 {
                        rw[[r, c]] += total[[r, c]] / (rho * gamma);
                    }
                }
            }
        }
        let rel = max_rel(w.w(), &rw);
        assert!(rel < 1e-4, "sparse {sparse}: {rel}");
    }
    // Dense ΔW carries no factors: refused, nothing changed.
    let mut s = stepper(Method::Factored);
    let mut w = Replica::new(w0()).unwrap();
    let m = Array2::from_elem((J, D), 0.5f32);
    let err = s
        .apply_dense(&mut w, &[(PeerId(0), 0, m.view())], 1)
        .unwrap_err();
    assert!(err.to_string().contains("dense push"), "{err}");
    assert_eq!(w.checksum(), Replica::new(w0()).unwrap().checksum());
}

#[test]
fn dense_adagrad_matches_a_naive_loop() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut s = stepper(Method::AdaGrad);
    let mut w = Replica::new(w0()).unwrap();
    for clock in 0..6 {
        let group: Vec<FactorBatch> = (0..2)
            .map(|p| batch(&mut rng, p, clock, 3, p == 1))
            .collect();
        let refs: Vec<&FactorBatch> = group.iter().collect();
        s.apply(&mut w, &refs, clock + 1).unwrap();
    }
    // The reference: W += lr · Σ_b x_b ⊘ (√G + ε), G including the group.
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut rw = w0().mapv(f64::from);
    let mut g2 = Array2::<f64>::zeros((J, D));
    for clock in 0..6 {
        let group: Vec<FactorBatch> = (0..2)
            .map(|p| batch(&mut rng, p, clock, 3, p == 1))
            .collect();
        let mut total = Array2::<f64>::zeros((J, D));
        for b in &group {
            let x = dense(b) / f64::from(LR);
            g2 += &x.mapv(|v| v * v);
            total += &x;
        }
        ndarray::Zip::from(&mut rw)
            .and(&total)
            .and(&g2)
            .for_each(|wv, &t, &g| *wv += f64::from(LR) * t / (g.sqrt() + 1e-20));
    }
    let rel = max_rel(w.w(), &rw);
    assert!(rel < 1e-5, "{rel}");
}

/// AdaRevision per coordinate, f64, with the snapshot rule of the module docs.
struct NaiveRevision {
    w: Array2<f64>,
    sum: Array2<f64>,
    z: Array2<f64>,
    z_max: Array2<f64>,
    snaps: std::collections::BTreeMap<u64, Array2<f64>>,
    cap: usize,
}

impl NaiveRevision {
    fn new(cap: usize) -> Self {
        let z = Array2::<f64>::zeros((J, D));
        Self {
            w: w0().mapv(f64::from),
            sum: z.clone(),
            z: z.clone(),
            z_max: z.clone(),
            snaps: std::collections::BTreeMap::from([(0, z)]),
            cap,
        }
    }

    fn group(&mut self, group: &[FactorBatch], next: u64) {
        for b in group {
            let x = dense(b) / f64::from(LR);
            let old = match self.snaps.range(..=b.clock).next_back() {
                Some((_, s)) => s.clone(),
                None => self.snaps.values().next().unwrap().clone(),
            };
            let alpha = f64::from(LR);
            for r in 0..J {
                for c in 0..D {
                    let bck = self.sum[[r, c]] - old[[r, c]];
                    let eta_old = alpha / (self.z_max[[r, c]].sqrt() + 1e-20);
                    let xv = x[[r, c]];
                    self.z[[r, c]] += xv * (xv + 2.0 * bck);
                    self.z_max[[r, c]] = self.z_max[[r, c]].max(self.z[[r, c]]);
                    let eta = alpha / (self.z_max[[r, c]].sqrt() + 1e-20);
                    self.w[[r, c]] += eta * xv - (eta_old - eta) * bck;
                    self.sum[[r, c]] += xv;
                }
            }
        }
        self.snaps.insert(next, self.sum.clone());
        while self.snaps.len() > self.cap {
            self.snaps.pop_first();
        }
    }
}

#[test]
fn adarevision_matches_a_naive_loop_with_stale_updates() {
    for cap in [16, 2] {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut o = Optimizer::new(Method::AdaRevision);
        o.eps = 1e-20;
        o.snapshots = cap;
        let mut s = Stepper::new(o, LR, 100, (J, D)).unwrap();
        let mut w = Replica::new(w0()).unwrap();
        let mut naive = NaiveRevision::new(cap);
        for t in 0..8u64 {
            // Peer 1 lags 3 clocks behind (as under SSP(3)): its updates were computed on an
            // older W, and carry a non-zero revision term.
            let mut group = vec![batch(&mut rng, 0, t, 2, false)];
            if t >= 3 {
                group.push(batch(&mut rng, 1, t - 3, 2, true));
            }
            let refs: Vec<&FactorBatch> = group.iter().collect();
            s.apply(&mut w, &refs, t + 1).unwrap();
            naive.group(&group, t + 1);
        }
        let rel = max_rel(w.w(), &naive.w);
        assert!(rel < 1e-4, "cap {cap}: {rel}");
        if cap == 2 {
            assert!(
                s.stale_reads() > 0,
                "a lag of 3 past a cap of 2 must read the oldest"
            );
        } else {
            assert_eq!(s.stale_reads(), 0);
        }
    }
}

#[test]
fn adarevision_without_delay_is_adagrad_like_and_revises_with_delay() {
    // With no delay x_bck = 0 and z is AdaGrad's sum: the step equals dense AdaGrad's for
    // one update per group.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (mut sr, mut sa) = (stepper(Method::AdaRevision), stepper(Method::AdaGrad));
    let (mut wr, mut wa) = (Replica::new(w0()).unwrap(), Replica::new(w0()).unwrap());
    for t in 0..5 {
        let b = batch(&mut rng, 0, t, 3, false);
        sr.apply(&mut wr, &[&b], t + 1).unwrap();
        sa.apply(&mut wa, &[&b], t + 1).unwrap();
    }
    let a = wa.w().mapv(f64::from);
    assert!(max_rel(wr.w(), &a) < 1e-5);
}

#[test]
fn momentum_matches_a_naive_loop() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let mut s = stepper(Method::Momentum);
    let mut w = Replica::new(w0()).unwrap();
    let mut rw = w0().mapv(f64::from);
    let mut vel = Array2::<f64>::zeros((J, D));
    for t in 0..6 {
        let group: Vec<FactorBatch> = (0..2).map(|p| batch(&mut rng, p, t, 2, false)).collect();
        let refs: Vec<&FactorBatch> = group.iter().collect();
        s.apply(&mut w, &refs, t + 1).unwrap();
        vel *= 0.9;
        for b in &group {
            vel += &dense(b);
        }
        rw += &vel;
    }
    assert!(max_rel(w.w(), &rw) < 1e-5);
}

#[test]
fn schedules_scale_batches_exactly_and_plain_sgd_is_the_kernel() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let group: Vec<FactorBatch> = (0..3).map(|p| batch(&mut rng, p, 25, 4, p == 2)).collect();
    let refs: Vec<&FactorBatch> = group.iter().collect();
    // Plain SGD: bitwise the replica's own apply.
    let mut a = Replica::new(w0()).unwrap();
    Stepper::new(Optimizer::default(), LR, 100, (J, D))
        .unwrap()
        .apply(&mut a, &refs, 26)
        .unwrap();
    let mut b = Replica::new(w0()).unwrap();
    b.apply(&refs).unwrap();
    assert_eq!(a.checksum(), b.checksum());
    // step:10:0.5 at clock 25: factor 0.25, bitwise the hand-scaled batches.
    let opt = Optimizer::new(Method::Sgd).with_schedule(Schedule::Step {
        every: 10,
        gamma: 0.5,
    });
    let mut a = Replica::new(w0()).unwrap();
    Stepper::new(opt, LR, 100, (J, D))
        .unwrap()
        .apply(&mut a, &refs, 26)
        .unwrap();
    let scaled: Vec<FactorBatch> = group
        .iter()
        .map(|g| FactorBatch {
            scale: g.scale * 0.25,
            ..g.clone()
        })
        .collect();
    let mut b = Replica::new(w0()).unwrap();
    b.apply(&scaled.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(a.checksum(), b.checksum());
}

#[test]
fn a_bad_batch_changes_neither_w_nor_the_state() {
    for method in Method::ALL {
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        let good = batch(&mut rng, 0, 0, 3, false);
        let mut nan = batch(&mut rng, 1, 0, 3, false);
        nan.u[2] = f32::NAN;
        let mut short = batch(&mut rng, 1, 0, 3, true);
        short.u.pop();
        let mut s = stepper(method);
        let mut w = Replica::new(w0()).unwrap();
        for bad in [&nan, &short] {
            assert!(s.apply(&mut w, &[&good, bad], 1).is_err(), "{method}");
            assert_eq!(
                w.checksum(),
                Replica::new(w0()).unwrap().checksum(),
                "{method}"
            );
        }
        let bad_dense = Array2::from_elem((J, D + 1), 0.0f32);
        assert!(
            s.apply_dense(&mut w, &[(PeerId(0), 0, bad_dense.view())], 1)
                .is_err()
        );
        // The state is untouched: the same good group gives what a fresh stepper gives.
        s.apply(&mut w, &[&good], 1).unwrap();
        let mut fresh = Replica::new(w0()).unwrap();
        stepper(method).apply(&mut fresh, &[&good], 1).unwrap();
        assert_eq!(w.checksum(), fresh.checksum(), "{method}");
    }
}

#[test]
fn adaptive_steps_are_invariant_to_the_learning_rate_of_the_factors() {
    // The statistics are kept in gradient units (Δ / lr): the step of an adaptive method
    // is lr per coordinate whatever the model's scale, so doubling lr doubles the step.
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let b = batch(&mut rng, 0, 0, 3, false);
    let mut b2 = b.clone();
    b2.scale *= 2.0;
    let step = |lr: f32, bb: &FactorBatch| {
        let mut w = Replica::zeros(J, D);
        Stepper::new(Optimizer::new(Method::Factored), lr, 10, (J, D))
            .unwrap()
            .apply(&mut w, &[bb], 1)
            .unwrap();
        w.into_inner()
    };
    let (one, two) = (step(LR, &b), step(2.0 * LR, &b2));
    for (x, y) in one.iter().zip(two.iter()) {
        assert!((2.0 * x - y).abs() <= 1e-6 * y.abs().max(1e-3), "{x} {y}");
    }
}

/// SAGA and SGD with weight decay against an f64 loop of the module docs' rule, with a
/// schedule, warm-up, λ and groups of several batches (one of them empty).
#[test]
fn saga_and_weight_decay_match_a_naive_loop() {
    for method in [Method::Saga, Method::Sgd] {
        let mut rng = ChaCha8Rng::seed_from_u64(10);
        let mut o = Optimizer::new(method).with_schedule(Schedule::InvSqrt { tau: 3.0 });
        o.warmup = 2;
        o.saga_samples = N;
        o.l2 = 0.7;
        assert!(!o.is_plain());
        let mut s = Stepper::new(o.clone(), LR, 100, (J, D)).unwrap();
        let mut w = Replica::new(w0()).unwrap();
        let mut rw = w0().mapv(f64::from);
        let mut mean = Array2::<f64>::zeros((J, D));
        for t in 0..7u64 {
            let mut group: Vec<FactorBatch> = (0..3)
                .map(|p| batch(&mut rng, p, t.saturating_sub(u64::from(p)), 3, p == 2))
                .collect();
            if t == 4 {
                // An empty batch takes no step.
                group[1].u.clear();
                group[1].v = VFactors::Dense(Vec::new());
            }
            let refs: Vec<&FactorBatch> = group.iter().collect();
            s.apply(&mut w, &refs, t + 1).unwrap();
            let eta: f64 = group
                .iter()
                .filter(|b| !b.is_empty())
                .map(|b| f64::from(LR) * o.factor(b.clock, 100))
                .sum();
            rw *= 1.0 - 0.7 * eta;
            let mut sum = Array2::<f64>::zeros((J, D));
            for b in &group {
                let f = o.factor(b.clock, 100);
                rw += &(dense(b) * f);
                sum += &(dense(b) / f64::from(b.scale));
            }
            if method == Method::Saga {
                rw -= &(&mean * eta);
                mean += &(sum / N as f64);
            }
        }
        let rel = max_rel(w.w(), &rw);
        assert!(rel < 1e-5, "{method}: {rel}");
        match s.saga_mean() {
            Some(a) => assert!(max_rel(a, &mean) < 1e-5, "table mean"),
            None => assert_eq!(method, Method::Sgd),
        }
    }
}

#[test]
fn saga_needs_its_n_and_factors_and_l2_is_checked() {
    let o = Optimizer::new(Method::Saga);
    assert!(o.validate(LR).is_err(), "no n");
    let mut o = Optimizer::new(Method::Saga);
    o.saga_samples = 10;
    assert!(o.validate(LR).is_ok());
    assert!(o.validate(0.0).is_err(), "no step");
    o.l2 = 1.0 / LR;
    assert!(o.validate(LR).is_err(), "lr·l2 = 1");
    o.l2 = -1.0;
    assert!(o.validate(LR).is_err());
    let mut o = Optimizer::new(Method::AdaGrad);
    o.l2 = 0.1;
    assert!(o.validate(LR).is_err(), "l2 only for sgd and saga");
    // A good dense ΔW is refused too: the table mean needs the factors.
    let mut w = Replica::new(w0()).unwrap();
    let delta = Array2::from_elem((J, D), 0.5f32);
    let err = stepper(Method::Saga)
        .apply_dense(&mut w, &[(PeerId(0), 0, delta.view())], 1)
        .unwrap_err();
    assert!(err.to_string().contains("factors"), "{err}");
    assert_eq!(w.checksum(), Replica::new(w0()).unwrap().checksum());
    let mut cfg = sfb_core::fms::Config::new(2);
    cfg.optimizer = Optimizer {
        saga_samples: 10,
        ..Optimizer::new(Method::Saga)
    };
    assert!(cfg.validate().is_ok());
    cfg.push = sfb_core::fms::Push::Dense;
    assert!(cfg.validate().is_err());
}

/// Least squares `½‖W x − y‖²` sending plain gradient factors `(W x − y, x)`, or (with a
/// table) SAGA's differences against the last residual of each sample.
struct LeastSquares {
    table: Option<Vec<f32>>,
}

type Pair = (Vec<f32>, Vec<f32>);

fn residual(w: ArrayView2<'_, f32>, (x, y): &Pair) -> Vec<f32> {
    w.rows()
        .into_iter()
        .zip(y)
        .map(|(row, yj)| row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>() - yj)
        .collect()
}

impl sfb_core::Model for LeastSquares {
    type Sample = Pair;
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Pair],
        sv: &mut sfb_core::SvList,
    ) -> Result<(), sfb_core::ModelError> {
        if self.table.is_some() {
            return Err(sfb_core::ModelError::msg("SAGA needs indices"));
        }
        for s in batch {
            sv.push_dense(&residual(w, s), &s.0)?;
        }
        Ok(())
    }

    fn compute_sv_indexed(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[(usize, &Pair)],
        sv: &mut sfb_core::SvList,
    ) -> Result<(), sfb_core::ModelError> {
        let Some(table) = &mut self.table else {
            let samples: Vec<&Pair> = batch.iter().map(|&(_, s)| s).collect();
            return self.compute_sv(w, &samples, sv);
        };
        let j = w.nrows();
        for &(i, s) in batch {
            let mut r = residual(w, s);
            for (x, old) in r.iter_mut().zip(&mut table[i * j..(i + 1) * j]) {
                let new = *x;
                *x = new - *old;
                *old = new;
            }
            sv.push_dense(&r, &s.0)?;
        }
        Ok(())
    }
}

/// `(1/n) Σ ½‖W x − y‖²` in f64.
fn ls_objective(w: &Array2<f64>, data: &[Pair]) -> f64 {
    let mut total = 0.0;
    for (x, y) in data {
        for (row, &yj) in w.rows().into_iter().zip(y) {
            let p: f64 = row.iter().zip(x).map(|(a, &b)| a * f64::from(b)).sum();
            total += 0.5 * (p - f64::from(yj)).powi(2);
        }
    }
    total / data.len() as f64
}

/// The least-squares optimum `W* = (Σ y xᵀ)(Σ x xᵀ)⁻¹` by Gauss–Jordan elimination, f64.
fn ls_optimum(data: &[Pair], j: usize, d: usize) -> Array2<f64> {
    let mut a = Array2::<f64>::zeros((d, d + j));
    for (x, y) in data {
        for r in 0..d {
            for c in 0..d {
                a[[r, c]] += f64::from(x[r]) * f64::from(x[c]);
            }
            for c in 0..j {
                a[[r, d + c]] += f64::from(x[r]) * f64::from(y[c]);
            }
        }
    }
    for col in 0..d {
        let piv = (col..d)
            .max_by(|&p, &q| a[[p, col]].abs().total_cmp(&a[[q, col]].abs()))
            .unwrap();
        for c in 0..d + j {
            a.swap([col, c], [piv, c]);
        }
        let inv = 1.0 / a[[col, col]];
        for c in 0..d + j {
            a[[col, c]] *= inv;
        }
        for r in 0..d {
            if r != col {
                let f = a[[r, col]];
                for c in 0..d + j {
                    a[[r, c]] -= f * a[[col, c]];
                }
            }
        }
    }
    // Row r of the solved block is (X^T X)^{-1} X^T y for feature r: W* = its transpose.
    Array2::from_shape_fn((j, d), |(r, c)| a[[c, d + r]])
}

/// Suboptimality after each epoch of a one-peer engine on `data`.
fn ls_curve(method: Method, data: &[Pair], j: usize, d: usize, epochs: usize, lr: f32) -> Vec<f64> {
    const K: usize = 4;
    let n = data.len();
    let best = ls_objective(&ls_optimum(data, j, d), data);
    let mut cfg = sfb_core::Config::full_broadcast(PeerId(0), 1);
    cfg.clocks = (epochs * n / K) as u64 + 1;
    cfg.batch_size = K;
    cfg.lr = lr;
    cfg.eval_every = 0;
    cfg.optimizer = Optimizer {
        saga_samples: n,
        ..Optimizer::new(method)
    };
    let model = LeastSquares {
        table: (method == Method::Saga).then(|| vec![0.0; n * j]),
    };
    let shard = sfb_core::Shard::new(data.to_vec(), 3);
    let mut e = sfb_core::Engine::new(cfg, model, Array2::zeros((j, d)), shard).unwrap();
    let mut time = sfb_core::ManualTime::default();
    let mut curve = Vec::new();
    loop {
        // Before computing clock t the replica holds clocks 0..t.
        if (e.clock() as usize).is_multiple_of(n / K) && curve.len() <= epochs {
            let w = e.replica().w().mapv(f64::from);
            curve.push(ls_objective(&w, data) - best);
        }
        if e.on_tick(&mut time).unwrap() == sfb_core::Progress::Done {
            break;
        }
    }
    curve
}

/// Test (a): with one peer SAGA's suboptimality falls geometrically (a straight line on a
/// log scale) by many orders of magnitude, while SGD at the same step stalls at its noise
/// floor.
#[test]
fn saga_converges_linearly_where_sgd_at_the_same_step_stalls() {
    let (n, j, d) = (64, 2, 6);
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let truth: Vec<f32> = (0..j * d).map(|_| rng.random_range(-1.0..1.0)).collect();
    let data: Vec<Pair> = (0..n)
        .map(|_| {
            let x: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
            let y = (0..j)
                .map(|r| {
                    let clean: f32 = truth[r * d..(r + 1) * d]
                        .iter()
                        .zip(&x)
                        .map(|(a, b)| a * b)
                        .sum();
                    clean + 0.5 * rng.random_range(-1.0..1.0)
                })
                .collect();
            (x, y)
        })
        .collect();
    let epochs = 40;
    let saga = ls_curve(Method::Saga, &data, j, d, epochs, 0.1);
    let sgd = ls_curve(Method::Sgd, &data, j, d, epochs, 0.1);
    println!("epoch  saga      sgd");
    for e in (0..=epochs).step_by(5) {
        println!("{e:5}  {:.2e}  {:.2e}", saga[e], sgd[e]);
    }
    assert_eq!(saga.len(), epochs + 1);
    // Geometric: each block of 10 epochs divides the suboptimality by at least 10 (1e4
    // over the run), down to 1e-6 of the start.
    for e in (10..=epochs).step_by(10) {
        assert!(saga[e] < saga[e - 10] / 10.0, "epoch {e}: {saga:?}");
    }
    assert!(saga[epochs] < 1e-6 * saga[0], "{saga:?}");
    // SGD: no progress over the last half, far above SAGA.
    assert!(sgd[epochs] > 0.3 * sgd[epochs / 2], "{sgd:?}");
    assert!(sgd[epochs] > 1e3 * saga[epochs], "{sgd:?}");
}
