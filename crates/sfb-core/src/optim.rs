//! The optimizer layer: how the updates a node applies become a step on W.
//!
//! A model's factors describe the plain SGD step of a batch, `Δ_b = scale_b · Σ_i u_i v_iᵀ`
//! with `scale_b = Model::scale(clock, lr, K)` (for MLR `−lr/K`). Every node that owns a copy
//! of W (each SFB peer for its replica, the FMS server for the one W) runs a [`Stepper`]
//! that turns the group of batches it applies at one step into the change of W. It is a
//! deterministic function of the batches, their order and the stepper's own state, which
//! evolves from the same inputs: under BSP with full broadcast every replica applies the
//! same groups in the same order, so replicas stay bitwise identical whatever the method,
//! and equal to the FMS server that applies the same groups.
//!
//! In what follows `x_b = Δ_b / lr` is the batch's update direction in gradient units (for
//! MLR minus the mean gradient of the batch), `f(c)` the [`Schedule`] (times the linear
//! warm-up) at the batch's origin clock `c`, and `ε` [`Optimizer::eps`].
//!
//! | method | step for a group `B` | state | apply |
//! |---|---|---|---|
//! | [`Method::Sgd`] | `W ← (1 − λη_B) W + Σ_b f(c_b) Δ_b` (`λ = 0` by default) | none | the batched kernel, batch scales multiplied by `f` |
//! | [`Method::Factored`] | `W += Σ_b f(c_b) Δ_b ⊘ (ρ γᵀ)`, see below | `J + D` (f64) | the batched kernel on rescaled pairs; statistics `O(K(J+D))` per batch |
//! | [`Method::AdaGrad`] | `G += Σ_b x_b²`, then `W += Σ_b f(c_b) Δ_b ⊘ (√G + ε)` | `J·D` (+ 2 scratch) | dense passes |
//! | [`Method::AdaRevision`] | McMahan & Streeter's adaptive revision per coordinate, below | `(3 + snapshots)·J·D` | dense passes |
//! | [`Method::Momentum`] | `M ← β M + Σ_b f(c_b) Δ_b`, `W += M` | `J·D` (+ scratch) | dense passes |
//! | [`Method::Saga`] | `W ← (1 − λη_B) W − η_B A + Σ_b f(c_b) Δ_b`, then `A += (1/n) Σ_b Σ_i u_i v_iᵀ`; `η_B = Σ_b lr·f(c_b)` | `J·D` | one dense pass, then the batched kernel into W and into A |
//!
//! # The factored adaptive step (rank-1 form kept)
//! Dense AdaGrad divides every entry of the update by `√G[j,d]`, `G = Σ_t x_t²` (entrywise
//! squares of every batch's update so far). That needs a `J × D` state and turns a rank-K
//! update into a dense one. Following Adafactor (Shazeer & Stern 2018) we keep only the row
//! and column sums of `G`:
//!
//! ```text
//! R_j = Σ_d G[j,d],   C_d = Σ_j G[j,d],   S = Σ_j R_j,
//! G[j,d] ≈ R_j C_d / S      (the best rank-1 fit in I-divergence; exact when G is rank 1)
//! √G[j,d] ≈ ρ_j γ_d,   ρ_j = √(R_j / √S),   γ_d = √(C_d / √S).
//! ```
//!
//! The preconditioned update of a pair is then `(u ⊘ ρ)(v ⊘ γ)ᵀ`: still a pair, so a group is
//! applied by the same batched kernel and nothing changes on the wire.
//!
//! The statistics come from the factors themselves, never from a formed `x_b`, and they
//! are **per sample**: `G` accumulates `Σ_i (a u_i v_iᵀ)²` (`a = scale_b / lr`), each term
//! of rank 1, `(u_i²)(v_i²)ᵀ`, so
//!
//! ```text
//! R_j += a² u_ij² ‖v_i‖²,     C_d += a² v_id² ‖u_i‖²,     O(K(J + D)) per batch.
//! ```
//!
//! This is the second approximation, next to the factorization: dense AdaGrad squares the
//! batch's update, `(Σ_i a u_i v_iᵀ)²`, whose cross terms `a² u_i v_iᵀ ∘ u_k v_kᵀ` we drop.
//! They are equal for `K = 1`; for `K` samples whose gradients are independent noise they
//! are equal in expectation; where the `K` gradients agree, the batch square is `K` times
//! the per-sample sum at `a = 1/K`, so the factored step is up to `√K` larger than dense
//! AdaGrad's at the same `lr` (the defaults are chosen with this). Keeping the cross terms
//! exactly needs the `K × K` Gram matrices of `U` and `V`, `O(K²(J + D))` per batch: at
//! `K = 16`, `J = 256`, `D = 1024` that measured at twice the apply's own time, against a
//! goal of 10%, so they are not kept.
//!
//! As in AdaGrad the current group's statistics are added before the group is
//! preconditioned. `ε` enters as `(ρ_j + √ε)(γ_d + √ε)`, which is `√G + ε` on an entry
//! whose row and column have seen nothing; a row (column) whose sum is exactly zero has an
//! exactly zero update, and its factors are set to zero rather than divided. The
//! factorization is exact for a single pair and whenever `G` has rank 1 (for example every
//! update sharing one `v` up to scale); it is off where `G` is far from rank 1, most for
//! entries whose row and column are both large but which themselves never moved. Tested
//! against [`Method::AdaGrad`] and against a per-sample dense reference in
//! `tests/it/optim.rs`. The FMS server with dense push receives `ΔW`, not factors, so it
//! refuses this method (use factor push, or the dense [`Method::AdaGrad`]).
//!
//! # AdaRevision
//! McMahan & Streeter, "Delay-tolerant algorithms for asynchronous distributed online
//! learning" (NIPS 2014), as Bösen's server applies it, per coordinate: with `z` (the
//! AdaGrad-like sum, revised for delay), `z_max`, and `Σx` (every update applied so far),
//! an update `x` computed on a W read when the sum was `Σx_old`:
//!
//! ```text
//! x_bck = Σx − Σx_old;  η_old = α / (√z_max + ε)
//! z += x (x + 2 x_bck);  z_max = max(z_max, z);  η = α / (√z_max + ε)
//! W += η x − (η_old − η) x_bck;  Σx += x
//! ```
//!
//! with `α = lr · f(c)`. Every node knows the origin clock `c` of every batch it applies, and
//! keeps `Σx` as it was when each of its own clocks started (a snapshot per clock): the
//! batch's `Σx_old` is the snapshot of clock `c`. Under BSP that is exactly what the origin
//! had applied when it read W (every replica applies the same updates by then); under SSP
//! and Async it is this node's view of it, the natural approximation for a replica. Memory
//! is bounded as in Bösen (which caps the snapshots it keeps and stops serving reads past
//! the cap): at most [`Optimizer::snapshots`] are kept, oldest dropped first, and a batch
//! older than every kept snapshot uses the oldest one (its `x_bck` is then undercounted;
//! [`Stepper::stale_reads`] counts how often).
//!
//! # SAGA over factors
//! SAGA (Defazio, Bach & Lacoste-Julien 2014) keeps, for every training sample `i`, the
//! last gradient it computed there, `g_i^old = u_i^old a_iᵀ` (for MLR), and the table mean
//! `A = (1/n) Σ_i g_i^old` over all `n` training samples of every peer. A mini-batch `B`
//! of `K` samples steps
//!
//! ```text
//! W −= η [ (1/K) Σ_{i∈B} (u_i^new − u_i^old) a_iᵀ + A + λW ],   A += (1/n) Σ_{i∈B} (u_i^new − u_i^old) a_iᵀ
//! ```
//!
//! and the estimate is unbiased whatever the table holds. `(u^new − u^old) aᵀ` is rank 1:
//! the model side (`sfb_models::Saga`) keeps the `u` of its own samples (lazily zero, so
//! the first visit sends `u^new`) and sends the pairs `(Δu_i, a_i)` with the ordinary scale
//! `−lr/K`; this method keeps `A` (`J × D`) from the factors it applies, so every replica
//! that applies the same batches holds the same `A` (under BSP with full broadcast,
//! bitwise). A group `B` of batches is one combined step, as SGD's group is: with
//! `η_B = Σ_{b∈B, K_b>0} lr·f(c_b)`,
//!
//! ```text
//! W ← (1 − λ η_B) W − η_B A;   W += Σ_b f(c_b) Δ_b  (the kernel);   A += (1/n) Σ_b Σ_i u_i v_iᵀ  (the kernel into A)
//! ```
//!
//! which under BSP is mini-batch SAGA on the `P·K` samples of a clock with step `P·lr`
//! (SGD's group is the same combined step). `λ` ([`Optimizer::l2`]) is the weight of
//! `(λ/2)‖W‖²` in the objective (L2-regularized MLR; 0 for plain MLR); the decay is exact
//! and identical on every replica. `n` is [`Optimizer::saga_samples`]. Under SSP and Async
//! the same rule is ASAGA (Leblond, Pedregosa & Lacoste-Julien 2017): a replica's `A`
//! includes the batches it has applied so far. What breaks the invariant `A = mean of the
//! tables`: a replica that never applies some batches (partial broadcast without relay),
//! or factors changed on the way (the f16 wire rounds `Δu` but not the table); SAGA then
//! converges to a neighbourhood of the optimum. Dense push (FMS) cannot run SAGA: `A`
//! needs the factors, not `ΔW`, so [`Stepper::apply_dense`] refuses it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use ndarray::{Array2, ArrayView2, Zip};

use crate::checkpoint::{ByteReader, ByteWriter, ReadError};
use crate::replica::accumulate;
use crate::{ApplyStats, ConfigError, FactorBatch, PeerId, Replica, Result, VFactors};

/// How updates become steps; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Method {
    /// Plain SGD (with the schedule).
    #[default]
    Sgd,
    /// Adaptive step from factored (row × column) second moments; keeps the rank-1 form.
    Factored,
    /// Dense per-coordinate AdaGrad (exact; a `J × D` state and dense passes).
    AdaGrad,
    /// McMahan & Streeter's delay-tolerant AdaRevision (dense, per coordinate).
    AdaRevision,
    /// Heavy-ball momentum (dense velocity).
    Momentum,
    /// SAGA over factors: the model sends `(u^new − u^old, a)` pairs, the stepper keeps the
    /// table mean `A` (dense) and adds `−η A` (and `λ`'s decay) to each step.
    Saga,
}

impl Method {
    /// Every method, in the order of the docs.
    pub const ALL: [Method; 6] = [
        Method::Sgd,
        Method::Factored,
        Method::AdaGrad,
        Method::AdaRevision,
        Method::Momentum,
        Method::Saga,
    ];

    /// Whether the step size adapts to the gradients seen (the `lr` is then a step per
    /// coordinate, in the units of W, rather than a multiplier of the gradient).
    pub fn is_adaptive(self) -> bool {
        matches!(
            self,
            Method::Factored | Method::AdaGrad | Method::AdaRevision
        )
    }

    /// Whether the method keeps a dense `J × D` state and applies by dense passes.
    pub fn is_dense(self) -> bool {
        matches!(
            self,
            Method::AdaGrad | Method::AdaRevision | Method::Momentum
        )
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Method::Sgd => "sgd",
            Method::Factored => "factored",
            Method::AdaGrad => "adagrad",
            Method::AdaRevision => "adarevision",
            Method::Momentum => "momentum",
            Method::Saga => "saga",
        })
    }
}

/// An optimizer or schedule name that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseOptimizerError(String);

impl FromStr for Method {
    type Err = ParseOptimizerError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sgd" => Ok(Method::Sgd),
            "factored" | "adafactor" => Ok(Method::Factored),
            "adagrad" => Ok(Method::AdaGrad),
            "adarevision" => Ok(Method::AdaRevision),
            "momentum" => Ok(Method::Momentum),
            "saga" => Ok(Method::Saga),
            other => Err(ParseOptimizerError(format!(
                "unknown optimizer {other:?}: expected sgd, factored, adagrad, adarevision, \
                 momentum or saga"
            ))),
        }
    }
}

/// A step-size schedule: the factor `f(c)` applied to the batches of origin clock `c`
/// (times the linear warm-up of [`Optimizer::warmup`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum Schedule {
    /// `f = 1`.
    #[default]
    Constant,
    /// `f = 1 / √(1 + c/τ)`.
    InvSqrt {
        /// Clocks until the step is `1/√2` of the first.
        tau: f64,
    },
    /// `f = gamma^⌊c / every⌋`.
    Step {
        /// Clocks between decays.
        every: u64,
        /// Factor per decay, in `(0, 1]`.
        gamma: f64,
    },
    /// `f = floor + (1 − floor)·(1 + cos(π c / T))/2` over the run's `T` clocks.
    Cosine {
        /// The final factor, in `[0, 1]`.
        floor: f64,
    },
}

impl Schedule {
    /// `f(clock)` for a run of `clocks` clocks.
    pub fn factor(&self, clock: u64, clocks: u64) -> f64 {
        let c = clock as f64;
        match *self {
            Schedule::Constant => 1.0,
            Schedule::InvSqrt { tau } => 1.0 / (1.0 + c / tau).sqrt(),
            Schedule::Step { every, gamma } => gamma.powf((clock / every.max(1)) as f64),
            Schedule::Cosine { floor } => {
                let t = (c / clocks.max(1) as f64).min(1.0);
                floor + (1.0 - floor) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
            }
        }
    }

    fn check(&self) -> std::result::Result<(), String> {
        match *self {
            Schedule::Constant => Ok(()),
            Schedule::InvSqrt { tau } if tau.is_finite() && tau > 0.0 => Ok(()),
            Schedule::InvSqrt { tau } => Err(format!("inv-sqrt needs tau > 0, got {tau}")),
            Schedule::Step { every, gamma } if every > 0 && gamma > 0.0 && gamma <= 1.0 => Ok(()),
            Schedule::Step { every, gamma } => Err(format!(
                "step needs every > 0 and 0 < gamma <= 1, got every {every}, gamma {gamma}"
            )),
            Schedule::Cosine { floor } if (0.0..=1.0).contains(&floor) => Ok(()),
            Schedule::Cosine { floor } => Err(format!("cosine needs 0 <= floor <= 1, got {floor}")),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Constant => f.write_str("constant"),
            Schedule::InvSqrt { tau } => write!(f, "inv-sqrt:{tau}"),
            Schedule::Step { every, gamma } => write!(f, "step:{every}:{gamma}"),
            Schedule::Cosine { floor } => write!(f, "cosine:{floor}"),
        }
    }
}

impl FromStr for Schedule {
    type Err = ParseOptimizerError;

    /// `constant`, `inv-sqrt[:TAU]` (τ = 100), `step:EVERY[:GAMMA]` (γ = 0.5),
    /// `cosine[:FLOOR]` (floor 0).
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        let mut parts = s.split(':');
        let name = parts.next().unwrap_or_default();
        let args: Vec<&str> = parts.collect();
        let num =
            |i: usize, default: Option<f64>| -> std::result::Result<f64, ParseOptimizerError> {
                match args.get(i) {
                    Some(a) => a.parse::<f64>().map_err(|_| {
                        ParseOptimizerError(format!("schedule {s:?}: {a:?} is not a number"))
                    }),
                    None => default.ok_or_else(|| {
                        ParseOptimizerError(format!("schedule {s:?} needs more parameters"))
                    }),
                }
            };
        let max_args = match name {
            "constant" => 0,
            "inv-sqrt" | "invsqrt" | "cosine" => 1,
            "step" => 2,
            _ => {
                return Err(ParseOptimizerError(format!(
                    "unknown schedule {s:?}: expected constant, inv-sqrt[:TAU], \
                     step:EVERY[:GAMMA] or cosine[:FLOOR]"
                )));
            }
        };
        if args.len() > max_args {
            return Err(ParseOptimizerError(format!(
                "schedule {s:?} takes at most {max_args} parameter(s)"
            )));
        }
        let sched = match name {
            "constant" => Schedule::Constant,
            "inv-sqrt" | "invsqrt" => Schedule::InvSqrt {
                tau: num(0, Some(100.0))?,
            },
            "step" => {
                let every = num(0, None)?;
                if every.fract() != 0.0 || every < 1.0 {
                    return Err(ParseOptimizerError(format!(
                        "schedule {s:?}: EVERY must be a whole number of clocks >= 1"
                    )));
                }
                Schedule::Step {
                    every: every as u64,
                    gamma: num(1, Some(0.5))?,
                }
            }
            _ => Schedule::Cosine {
                floor: num(0, Some(0.0))?,
            },
        };
        sched.check().map_err(ParseOptimizerError)?;
        Ok(sched)
    }
}

/// The optimizer of a run: method, schedule and their constants.
#[derive(Debug, Clone, PartialEq)]
pub struct Optimizer {
    /// How updates become steps. Default: SGD.
    pub method: Method,
    /// Step-size schedule over origin clocks. Default: constant.
    pub schedule: Schedule,
    /// Linear warm-up: the batches of clock `c < warmup` are scaled by `(c + 1)/warmup`.
    /// Default: 0 (none).
    pub warmup: u64,
    /// The adaptive methods' `ε` (in gradient units). Default: `1e-8`.
    pub eps: f32,
    /// Momentum's `β`, in `[0, 1)`. Default: 0.9.
    pub momentum: f32,
    /// AdaRevision's cap on kept snapshots (each `J × D` floats). Default: 16.
    pub snapshots: usize,
    /// SAGA's `n`: training samples over all peers (the table mean is `(1/n) Σ_i`).
    /// Required (≥ 1) for [`Method::Saga`]; the cluster builder sets it from the data.
    /// Default: 0 (unset).
    pub saga_samples: usize,
    /// `λ` of `(λ/2)‖W‖²` (L2-regularized MLR on W): each group decays W exactly by
    /// `1 − λ η_B` (`η_B = Σ_b lr·f(c_b)`) before its updates are added, the same on every
    /// replica. Applied by [`Method::Sgd`] (weight decay) and [`Method::Saga`]; refused by
    /// the others. Default: 0.
    pub l2: f32,
}

impl Default for Optimizer {
    fn default() -> Self {
        Self::new(Method::Sgd)
    }
}

impl Optimizer {
    /// `method` with the default schedule and constants.
    pub fn new(method: Method) -> Self {
        Self {
            method,
            schedule: Schedule::Constant,
            warmup: 0,
            eps: 1e-8,
            momentum: 0.9,
            snapshots: 16,
            saga_samples: 0,
            l2: 0.0,
        }
    }

    /// The same with `schedule`.
    pub fn with_schedule(mut self, schedule: Schedule) -> Self {
        self.schedule = schedule;
        self
    }

    /// Whether every batch is applied exactly as the model scaled it (SGD, constant, no
    /// warm-up): the step is then bitwise what it was before optimizers existed.
    pub fn is_plain(&self) -> bool {
        self.method == Method::Sgd
            && self.schedule == Schedule::Constant
            && self.warmup == 0
            && self.l2 == 0.0
    }

    /// The step-size factor for batches of origin clock `clock` in a run of `clocks`.
    pub fn factor(&self, clock: u64, clocks: u64) -> f64 {
        let warm = if clock < self.warmup {
            (clock + 1) as f64 / self.warmup as f64
        } else {
            1.0
        };
        warm * self.schedule.factor(clock, clocks)
    }

    /// Checks the constants for a run with learning rate `lr`.
    ///
    /// # Errors
    /// [`ConfigError::Optimizer`] naming the problem: an adaptive method with `lr ≤ 0` (its
    /// statistics are kept in gradient units, `Δ / lr`), a non-positive `ε`, `β` outside
    /// `[0, 1)`, no snapshots, bad schedule parameters; SAGA with `lr ≤ 0` or no
    /// [`saga_samples`](Self::saga_samples); an `l2` that is negative, not finite or with
    /// `lr·l2 ∉ (0, 1)`, or `l2 ≠ 0` with a method other than SGD and SAGA.
    pub fn validate(&self, lr: f32) -> Result<()> {
        let bad = |reason: String| -> Result<()> {
            Err(ConfigError::Optimizer {
                optimizer: self.method.to_string(),
                reason,
            }
            .into())
        };
        if let Err(reason) = self.schedule.check() {
            return bad(reason);
        }
        if self.method.is_adaptive() && lr.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return bad(format!("needs a learning rate > 0, got {lr}"));
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad(format!("eps must be finite and > 0, got {}", self.eps));
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return bad(format!("momentum must be in [0, 1), got {}", self.momentum));
        }
        if self.snapshots == 0 {
            return bad("AdaRevision needs at least one snapshot".into());
        }
        if matches!(self.method, Method::Sgd | Method::Saga) {
            if !(self.l2.is_finite() && self.l2 >= 0.0) {
                return bad(format!("l2 must be finite and >= 0, got {}", self.l2));
            }
            if self.l2 > 0.0 && !(lr > 0.0 && lr * self.l2 < 1.0) {
                return bad(format!(
                    "l2 needs 0 < lr·l2 < 1 (each step scales W by 1 − lr·l2), got lr {lr}, \
                     l2 {}",
                    self.l2
                ));
            }
        } else if self.l2 != 0.0 {
            return bad(format!("l2 = {} is applied by sgd and saga only", self.l2));
        }
        if self.method == Method::Saga {
            if lr.is_nan() || lr <= 0.0 {
                return bad(format!(
                    "needs a learning rate > 0 (its step lr·f(c) multiplies the table mean), \
                     got {lr}"
                ));
            }
            if self.saga_samples == 0 {
                return bad(
                    "needs the number of training samples over all peers (saga_samples, the n \
                     of the table mean (1/n) Σ_i)"
                        .into(),
                );
            }
        }
        Ok(())
    }

    /// Bytes of state a [`Stepper`] for a `j × d` W holds at most (for memory checks
    /// before a run).
    pub fn state_bytes(&self, j: usize, d: usize) -> usize {
        let jd = j.saturating_mul(d).saturating_mul(4);
        match self.method {
            Method::Sgd => 0,
            Method::Factored => (j + d) * 8,
            Method::AdaGrad => jd.saturating_mul(3),
            Method::AdaRevision => jd.saturating_mul(4 + self.snapshots),
            Method::Momentum => jd.saturating_mul(2),
            Method::Saga => jd,
        }
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.method)?;
        if self.schedule != Schedule::Constant {
            write!(f, ", schedule {}", self.schedule)?;
        }
        if self.warmup > 0 {
            write!(f, ", warm-up {}", self.warmup)?;
        }
        if self.method == Method::Saga {
            write!(f, ", n {}", self.saga_samples)?;
        }
        if self.l2 != 0.0 {
            write!(f, ", l2 {}", self.l2)?;
        }
        Ok(())
    }
}

/// Why the factored method cannot run on dense `ΔW` pushes.
pub(crate) const DENSE_PUSH_FACTORED: &str = "its statistics are built from the factors of \
    each sample, and dense push sends ΔW: use factor push, or the dense adagrad";

/// One update of a group, as the dense paths see it.
enum Update<'a> {
    Factors(&'a FactorBatch),
    Dense {
        clock: u64,
        delta: ArrayView2<'a, f32>,
    },
}

impl Update<'_> {
    fn clock(&self) -> u64 {
        match self {
            Update::Factors(b) => b.clock,
            Update::Dense { clock, .. } => *clock,
        }
    }

    /// `out = mul · Δ`.
    fn write(&self, out: &mut Array2<f32>, mul: f32) {
        match self {
            Update::Factors(b) => {
                out.fill(0.0);
                accumulate(out, &[b], &[b.scale * mul]);
            }
            Update::Dense { delta, .. } => Zip::from(out).and(delta).for_each(|o, &x| *o = mul * x),
        }
    }
}

/// The per-node state of an [`Optimizer`]; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Stepper {
    opt: Optimizer,
    lr: f32,
    clocks: u64,
    state: State,
    stale_reads: u64,
    /// The shape of W.
    dim: (usize, usize),
    /// Re-compression of what is applied, when cheaper ([`crate::aggregate`]).
    aggregate: Option<crate::aggregate::Aggregator>,
    /// Per origin, a weight on its batches' steps (the gossip mode's, [`crate::gossip`]).
    weights: Option<std::sync::Arc<[f32]>>,
}

/// A standard-layout matrix's elements.
fn flat(m: &Array2<f32>) -> &[f32] {
    m.as_slice()
        .expect("the stepper's matrices are standard layout")
}

#[derive(Debug, Clone)]
enum State {
    Sgd,
    Factored {
        rows: Vec<f64>,
        cols: Vec<f64>,
    },
    AdaGrad {
        sum_sq: Array2<f32>,
        total: Array2<f32>,
        scratch: Array2<f32>,
    },
    AdaRevision {
        sum: Array2<f32>,
        z: Array2<f32>,
        z_max: Array2<f32>,
        scratch: Array2<f32>,
        snapshots: BTreeMap<u64, Array2<f32>>,
    },
    Momentum {
        velocity: Array2<f32>,
        scratch: Array2<f32>,
    },
    Saga {
        /// `A = (1/n) Σ_i u_i^old a_iᵀ`, from every factor applied so far.
        mean: Array2<f32>,
    },
}

impl Stepper {
    /// A stepper for a `j × d` W in a run of `clocks` clocks at learning rate `lr`.
    ///
    /// # Errors
    /// [`Optimizer::validate`]'s.
    pub fn new(opt: Optimizer, lr: f32, clocks: u64, (j, d): (usize, usize)) -> Result<Self> {
        opt.validate(lr)?;
        let zeros = || Array2::<f32>::zeros((j, d));
        let state = match opt.method {
            Method::Sgd => State::Sgd,
            Method::Factored => State::Factored {
                rows: vec![0.0; j],
                cols: vec![0.0; d],
            },
            Method::AdaGrad => State::AdaGrad {
                sum_sq: zeros(),
                total: zeros(),
                scratch: zeros(),
            },
            Method::AdaRevision => State::AdaRevision {
                sum: zeros(),
                z: zeros(),
                z_max: zeros(),
                scratch: zeros(),
                snapshots: BTreeMap::from([(0, zeros())]),
            },
            Method::Momentum => State::Momentum {
                velocity: zeros(),
                scratch: zeros(),
            },
            Method::Saga => State::Saga { mean: zeros() },
        };
        Ok(Self {
            opt,
            lr,
            clocks,
            state,
            stale_reads: 0,
            dim: (j, d),
            aggregate: None,
            weights: None,
        })
    }

    /// Batches of origin `o` count `weights[o]` times: their step is multiplied by it, and
    /// the factored method's statistics count them that many times (as if that many such
    /// batches had arrived), so an adaptive step is as large as under full broadcast.
    /// Origins beyond the table count once.
    pub fn with_weights(mut self, weights: std::sync::Arc<[f32]>) -> Self {
        self.weights = Some(weights);
        self
    }

    fn weight(&self, origin: crate::PeerId) -> f32 {
        self.weights
            .as_ref()
            .and_then(|w| w.get(origin.index()).copied())
            .unwrap_or(1.0)
    }

    /// The same stepper applying at most `rank` pairs per clock whenever re-compressing
    /// what it applies is cheaper than applying it ([`crate::aggregate`]). Used by the
    /// plain SGD and factored paths (the others apply dense updates).
    pub fn with_aggregate(mut self, rank: usize) -> Self {
        self.aggregate = Some(crate::aggregate::Aggregator::new(rank));
        self
    }

    /// The aggregation, if any.
    pub fn aggregate(&self) -> Option<&crate::aggregate::Aggregator> {
        self.aggregate.as_ref()
    }

    /// The kernel call of the SGD and factored paths: `batches` (validated) with `scales`
    /// and the factored `fold`, aggregated when that is cheaper.
    fn kernel(
        aggregate: &mut Option<crate::aggregate::Aggregator>,
        replica: &mut Replica,
        batches: &[&FactorBatch],
        scales: &[f32],
        fold: Option<(&[f32], &[f32])>,
        stats: &mut ApplyStats,
    ) -> Result<()> {
        let (j, d) = replica.dim();
        if let Some(agg) = aggregate
            && agg.worth(stats.dense_pairs, j, d)
        {
            crate::replica::check_scales(batches, scales)?;
            let (merged, _) = agg.merge(batches, scales, fold, j, d);
            let mut refs: Vec<&FactorBatch> = vec![&merged];
            let mut sc = vec![1.0];
            for (&b, &s) in batches.iter().zip(scales) {
                if matches!(b.v, VFactors::Sparse { .. }) {
                    refs.push(b);
                    sc.push(s);
                }
            }
            replica.apply_validated(&refs, &sc)?;
            stats.aggregated_from = stats.dense_pairs;
            stats.dense_pairs = merged.len();
            return Ok(());
        }
        match fold {
            None => replica.apply_validated(batches, scales)?,
            Some((rows, cols)) => replica.apply_folded(batches, scales, rows, cols)?,
        };
        Ok(())
    }

    /// The optimizer.
    pub fn optimizer(&self) -> &Optimizer {
        &self.opt
    }

    /// SAGA: the table mean `A` this node holds (`None` for the other methods).
    pub fn saga_mean(&self) -> Option<ArrayView2<'_, f32>> {
        match &self.state {
            State::Saga { mean } => Some(mean.view()),
            _ => None,
        }
    }

    /// AdaRevision: batches older than every kept snapshot (their revision term used the
    /// oldest snapshot instead). 0 for the other methods.
    pub fn stale_reads(&self) -> u64 {
        self.stale_reads
    }

    /// The optimizer's state as bytes, for a checkpoint (scratch space excluded); what
    /// [`restore_state`](Self::restore_state) takes back.
    pub fn save_state(&self) -> Vec<u8> {
        let tag = Method::ALL
            .iter()
            .position(|&m| m == self.opt.method)
            .expect("every method is in ALL") as u64;
        let mut w = ByteWriter::new();
        w.u64(tag).u64(self.stale_reads);
        match &self.state {
            State::Sgd => {}
            State::Factored { rows, cols } => {
                w.f64s(rows).f64s(cols);
            }
            State::AdaGrad { sum_sq, total, .. } => {
                w.f32s(flat(sum_sq)).f32s(flat(total));
            }
            State::AdaRevision {
                sum,
                z,
                z_max,
                snapshots,
                ..
            } => {
                w.f32s(flat(sum)).f32s(flat(z)).f32s(flat(z_max));
                w.u64(snapshots.len() as u64);
                for (&clock, snap) in snapshots {
                    w.u64(clock).f32s(flat(snap));
                }
            }
            State::Momentum { velocity, .. } => {
                w.f32s(flat(velocity));
            }
            State::Saga { mean } => {
                w.f32s(flat(mean));
            }
        }
        w.finish()
    }

    /// Restores what [`save_state`](Self::save_state) wrote for the same method and W
    /// shape. On an error the stepper is unchanged.
    ///
    /// # Errors
    /// [`Error::Checkpoint`](crate::Error::Checkpoint): another method, another shape,
    /// truncated or non-finite state.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        let bad = |reason: String| crate::Error::Checkpoint {
            reason: format!("optimizer state: {reason}"),
        };
        let mut r = ByteReader::new(bytes);
        let e = |e: ReadError| bad(e.to_string());
        let tag = r.u64().map_err(e)?;
        let method = usize::try_from(tag)
            .ok()
            .and_then(|i| Method::ALL.get(i).copied())
            .ok_or_else(|| bad(format!("unknown method tag {tag}")))?;
        if method != self.opt.method {
            return Err(bad(format!(
                "written by optimizer {method}, this run uses {}",
                self.opt.method
            )));
        }
        let stale_reads = r.u64().map_err(e)?;
        let (j, d) = self.dim;
        let matrix = |r: &mut ByteReader<'_>| -> Result<Array2<f32>> {
            let v = r.f32s(Some(j * d)).map_err(e)?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(bad("a non-finite value".into()));
            }
            Ok(Array2::from_shape_vec((j, d), v).expect("length checked"))
        };
        let zeros = || Array2::<f32>::zeros((j, d));
        let state = match &self.state {
            State::Sgd => State::Sgd,
            State::Factored { .. } => {
                let rows = r.f64s(Some(j)).map_err(e)?;
                let cols = r.f64s(Some(d)).map_err(e)?;
                if rows.iter().chain(&cols).any(|x| !x.is_finite() || *x < 0.0) {
                    return Err(bad("a negative or non-finite sum of squares".into()));
                }
                State::Factored { rows, cols }
            }
            State::AdaGrad { .. } => State::AdaGrad {
                sum_sq: matrix(&mut r)?,
                total: matrix(&mut r)?,
                scratch: zeros(),
            },
            State::AdaRevision { .. } => {
                let sum = matrix(&mut r)?;
                let z = matrix(&mut r)?;
                let z_max = matrix(&mut r)?;
                let n = r.u64().map_err(e)?;
                if n == 0 || n > self.opt.snapshots.max(1) as u64 {
                    return Err(bad(format!("{n} snapshots")));
                }
                let mut snapshots = BTreeMap::new();
                for _ in 0..n {
                    let clock = r.u64().map_err(e)?;
                    snapshots.insert(clock, matrix(&mut r)?);
                }
                State::AdaRevision {
                    sum,
                    z,
                    z_max,
                    scratch: zeros(),
                    snapshots,
                }
            }
            State::Momentum { .. } => State::Momentum {
                velocity: matrix(&mut r)?,
                scratch: zeros(),
            },
            State::Saga { .. } => State::Saga {
                mean: matrix(&mut r)?,
            },
        };
        r.finish().map_err(e)?;
        self.state = state;
        self.stale_reads = stale_reads;
        Ok(())
    }

    fn factor(&self, clock: u64) -> f32 {
        self.opt.factor(clock, self.clocks) as f32
    }

    /// Applies the group `batches` (in the order given) to `replica`. `next_clock` is the
    /// clock this node computes next on the result (AdaRevision's snapshot key).
    ///
    /// Every batch is validated before anything changes; on an error neither the replica
    /// nor the optimizer state is touched.
    ///
    /// # Errors
    /// The validation errors of [`Replica::apply`].
    pub fn apply(
        &mut self,
        replica: &mut Replica,
        batches: &[&FactorBatch],
        next_clock: u64,
    ) -> Result<ApplyStats> {
        self.apply_with(replica, batches, next_clock, None)
    }

    /// [`apply`](Self::apply), with the factored method's statistics of the group `given`
    /// (`J` row then `D` column values, [`crate::tree::factored_stats`]) instead of taken
    /// from the batches: the tree mode's, whose batches are a compressed sum of others.
    /// Other methods ignore them.
    ///
    /// # Errors
    /// As [`apply`](Self::apply); a `stats` of another length than `J + D`.
    pub fn apply_with(
        &mut self,
        replica: &mut Replica,
        batches: &[&FactorBatch],
        next_clock: u64,
        given: Option<&[f64]>,
    ) -> Result<ApplyStats> {
        let (j, d) = replica.dim();
        if let Some(s) = given.filter(|s| s.len() != j + d) {
            return Err(crate::Error::DimensionMismatch {
                what: "optimizer statistics (J + D)".into(),
                expected: j + d,
                got: s.len(),
            });
        }
        for b in batches {
            b.validate(j, d)?;
        }
        let mut stats = ApplyStats {
            batches: batches.len(),
            ..ApplyStats::default()
        };
        for b in batches {
            match b.v {
                VFactors::Dense(_) => stats.dense_pairs += b.len(),
                VFactors::Sparse { .. } => stats.sparse_pairs += b.len(),
            }
        }
        if batches.is_empty() {
            self.after_group(next_clock);
            return Ok(stats);
        }
        let scales: Vec<f32> = batches
            .iter()
            .map(|b| b.scale * self.factor(b.clock) * self.weight(b.origin))
            .collect();
        let plain = self.opt.is_plain() && self.weights.is_none();
        let weights: Vec<f64> = batches
            .iter()
            .map(|b| f64::from(self.weight(b.origin)))
            .collect();
        match &mut self.state {
            State::Sgd if plain && self.aggregate.is_none() => {
                replica.apply(batches)?;
            }
            State::Sgd if self.opt.l2 == 0.0 => {
                let own: Vec<f32>;
                let scales = if plain {
                    // `apply`'s scales: the batches' own.
                    own = batches.iter().map(|b| b.scale).collect();
                    &own
                } else {
                    &scales
                };
                Self::kernel(
                    &mut self.aggregate,
                    replica,
                    batches,
                    scales,
                    None,
                    &mut stats,
                )?;
            }
            State::Sgd => {
                crate::replica::check_scales(batches, &scales)?;
                let decay = 1.0
                    - self.opt.l2 * group_step(self.lr, &self.opt, self.clocks, batches, &weights);
                replica.w_mut().mapv_inplace(|w| decay * w);
                Self::kernel(
                    &mut self.aggregate,
                    replica,
                    batches,
                    &scales,
                    None,
                    &mut stats,
                )?;
            }
            State::Factored { rows, cols } => {
                let lr = f64::from(self.lr);
                match given {
                    Some(s) => {
                        for (x, y) in rows.iter_mut().chain(cols.iter_mut()).zip(s) {
                            *x += y;
                        }
                    }
                    None => {
                        for (b, w) in batches.iter().zip(&weights) {
                            add_factored_stats(rows, cols, b, f64::from(b.scale) / lr * w.sqrt());
                        }
                    }
                }
                let (rho, gamma) = reciprocals(rows, cols, self.opt.eps);
                // Dense pairs: ρ⁻¹ and γ⁻¹ folded into the kernel's stacking; sparse pairs
                // (cheap) rescaled here.
                let sparse: Vec<Option<FactorBatch>> = batches
                    .iter()
                    .map(|b| {
                        matches!(b.v, VFactors::Sparse { .. })
                            .then(|| precondition(b, &rho, &gamma))
                    })
                    .collect();
                let refs: Vec<&FactorBatch> = batches
                    .iter()
                    .zip(&sparse)
                    .map(|(&b, p)| p.as_ref().unwrap_or(b))
                    .collect();
                Self::kernel(
                    &mut self.aggregate,
                    replica,
                    &refs,
                    &scales,
                    Some((&rho, &gamma)),
                    &mut stats,
                )?;
            }
            State::Saga { mean } => {
                // Every check before anything changes: the kernel below cannot fail.
                crate::replica::check_scales(batches, &scales)?;
                let eta = group_step(self.lr, &self.opt, self.clocks, batches, &weights);
                let decay = 1.0 - self.opt.l2 * eta;
                Zip::from(&mut replica.w_mut())
                    .and(&*mean)
                    .for_each(|w, &a| *w = decay * *w - eta * a);
                replica.apply_scaled(batches, &scales)?;
                let inv_n = 1.0 / self.opt.saga_samples as f32;
                accumulate(mean, batches, &vec![inv_n; batches.len()]);
            }
            _ => {
                let updates: Vec<Update<'_>> =
                    batches.iter().map(|&b| Update::Factors(b)).collect();
                self.apply_dense_updates(replica, &updates);
            }
        }
        self.after_group(next_clock);
        Ok(stats)
    }

    /// Applies dense updates `Δ` (the FMS server's dense-push path): `(origin, origin clock,
    /// Δ)` in the order given, each validated first.
    ///
    /// # Errors
    /// [`crate::replica::validate_dense`]'s, with nothing changed.
    pub fn apply_dense(
        &mut self,
        replica: &mut Replica,
        deltas: &[(PeerId, u64, ArrayView2<'_, f32>)],
        next_clock: u64,
    ) -> Result<()> {
        let (j, d) = replica.dim();
        if self.opt.method == Method::Factored {
            return Err(ConfigError::Optimizer {
                optimizer: self.opt.method.to_string(),
                reason: DENSE_PUSH_FACTORED.into(),
            }
            .into());
        }
        if self.opt.method == Method::Saga {
            return Err(ConfigError::Optimizer {
                optimizer: self.opt.method.to_string(),
                reason: "cannot apply dense ΔW: its table mean needs the factors (push \
                         factors, not dense updates)"
                    .into(),
            }
            .into());
        }
        for (origin, _, m) in deltas {
            crate::replica::validate_dense(*m, j, d, *origin, "dense ΔW")?;
        }
        if self.opt.is_plain() {
            let views: Vec<(PeerId, ArrayView2<'_, f32>)> =
                deltas.iter().map(|(p, _, m)| (*p, m.view())).collect();
            replica.add_dense(&views)?;
        } else {
            let updates: Vec<Update<'_>> = deltas
                .iter()
                .map(|(_, c, m)| Update::Dense {
                    clock: *c,
                    delta: m.view(),
                })
                .collect();
            self.apply_dense_updates(replica, &updates);
        }
        self.after_group(next_clock);
        Ok(())
    }

    /// The dense paths (and SGD/factored on dense deltas), for validated updates.
    fn apply_dense_updates(&mut self, replica: &mut Replica, updates: &[Update<'_>]) {
        let (j, d) = replica.dim();
        let inv_lr = 1.0 / self.lr;
        let eps = self.opt.eps;
        let factors: Vec<f32> = updates
            .iter()
            .map(|u| match u {
                Update::Factors(b) => self.factor(b.clock) * self.weight(b.origin),
                Update::Dense { .. } => self.factor(u.clock()),
            })
            .collect();
        let mut w = replica.w_mut();
        match &mut self.state {
            State::Sgd => {
                if self.opt.l2 != 0.0 {
                    let eta: f32 = factors.iter().map(|&f| self.lr * f).sum();
                    let decay = 1.0 - self.opt.l2 * eta;
                    w.mapv_inplace(|x| decay * x);
                }
                let mut scratch = Array2::<f32>::zeros((j, d));
                for (u, &f) in updates.iter().zip(&factors) {
                    u.write(&mut scratch, f);
                    w += &scratch;
                }
            }
            State::Factored { .. } => unreachable!("apply_dense refuses the factored method"),
            State::AdaGrad {
                sum_sq,
                total,
                scratch,
            } => {
                total.fill(0.0);
                for (u, &f) in updates.iter().zip(&factors) {
                    u.write(scratch, inv_lr);
                    Zip::from(&mut *sum_sq)
                        .and(&mut *total)
                        .and(&*scratch)
                        .for_each(|g, t, &x| {
                            *g += x * x;
                            *t += f * x;
                        });
                }
                let lr = self.lr;
                Zip::from(&mut w)
                    .and(&*total)
                    .and(&*sum_sq)
                    .for_each(|wv, &t, &g| *wv += lr * t / (g.sqrt() + eps));
            }
            State::AdaRevision {
                sum,
                z,
                z_max,
                scratch,
                snapshots,
            } => {
                for (u, &f) in updates.iter().zip(&factors) {
                    u.write(scratch, inv_lr);
                    let c = u.clock();
                    let old = match snapshots.range(..=c).next_back() {
                        Some((_, s)) => s,
                        None => {
                            self.stale_reads += 1;
                            snapshots.values().next().expect("at least one snapshot")
                        }
                    };
                    let alpha = self.lr * f;
                    Zip::from(&mut w)
                        .and(&mut *sum)
                        .and(&mut *z)
                        .and(&mut *z_max)
                        .and(&*scratch)
                        .and(old)
                        .for_each(|wv, s, zz, zm, &x, &o| {
                            let bck = *s - o;
                            let eta_old = alpha / (zm.sqrt() + eps);
                            *zz += x * (x + 2.0 * bck);
                            *zm = zm.max(*zz);
                            let eta = alpha / (zm.sqrt() + eps);
                            *wv += eta * x - (eta_old - eta) * bck;
                            *s += x;
                        });
                }
            }
            State::Momentum { velocity, scratch } => {
                let beta = self.opt.momentum;
                velocity.mapv_inplace(|v| beta * v);
                for (u, &f) in updates.iter().zip(&factors) {
                    u.write(scratch, f);
                    *velocity += &*scratch;
                }
                w += &*velocity;
            }
            State::Saga { .. } => unreachable!("apply_dense refuses SAGA"),
        }
    }

    /// Bookkeeping after every group: AdaRevision's snapshot of `Σx` for `next_clock`.
    fn after_group(&mut self, next_clock: u64) {
        if let State::AdaRevision { sum, snapshots, .. } = &mut self.state {
            snapshots.insert(next_clock, sum.clone());
            while snapshots.len() > self.opt.snapshots {
                snapshots.pop_first();
            }
        }
    }
}

/// `η_B = Σ_b lr·f(c_b)` over the non-empty batches of a group: the step the group's
/// table-mean and weight-decay terms take (see the [module docs](self)).
fn group_step(
    lr: f32,
    opt: &Optimizer,
    clocks: u64,
    batches: &[&FactorBatch],
    weights: &[f64],
) -> f32 {
    batches
        .iter()
        .zip(weights)
        .filter(|(b, _)| !b.is_empty())
        .map(|(b, &w)| lr * (opt.factor(b.clock, clocks) * w) as f32)
        .sum()
}

/// Adds a batch's per-sample statistics `Σ_i (a u_i v_iᵀ)²` to the row and column sums:
/// `R_j += a² u_ij² ‖v_i‖²`, `C_d += a² v_id² ‖u_i‖²` (see the module docs), `O(K(J + D))`.
/// The batch's own sums are formed in f32 with loops the compiler vectorizes (this runs on
/// every apply), then added to the f64 state.
pub(crate) fn add_factored_stats(rows: &mut [f64], cols: &mut [f64], b: &FactorBatch, a: f64) {
    if a == 0.0 || b.is_empty() {
        return;
    }
    let a2 = a * a;
    let mut r = vec![0f32; b.j];
    let mut c = vec![0f32; b.d];
    for (i, u) in b.u.chunks(b.j).enumerate() {
        let nu = sum_sq(u);
        match &b.v {
            VFactors::Dense(v) => {
                let v = &v[i * b.d..(i + 1) * b.d];
                let nv = sum_sq(v);
                add_scaled_squares(&mut c, v, nu);
                add_scaled_squares(&mut r, u, nv);
            }
            VFactors::Sparse {
                indptr,
                indices,
                values,
            } => {
                let (s0, e0) = (indptr[i] as usize, indptr[i + 1] as usize);
                let nv = sum_sq(&values[s0..e0]);
                for (&k, &x) in indices[s0..e0].iter().zip(&values[s0..e0]) {
                    c[k as usize] += nu * x * x;
                }
                add_scaled_squares(&mut r, u, nv);
            }
        }
    }
    for (s, x) in rows.iter_mut().zip(r) {
        *s += a2 * f64::from(x);
    }
    for (s, x) in cols.iter_mut().zip(c) {
        *s += a2 * f64::from(x);
    }
}

/// `Σ x²`, eight lanes at a time (a fixed order, so the same on every replica).
fn sum_sq(x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for ch in chunks {
        for (a, &v) in acc.iter_mut().zip(ch) {
            *a += v * v;
        }
    }
    let tail: f32 = rest.iter().map(|v| v * v).sum();
    acc.iter().sum::<f32>() + tail
}

/// `out += by · x²`, entry by entry.
fn add_scaled_squares(out: &mut [f32], x: &[f32], by: f32) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o += by * v * v;
    }
}

/// `ρ_j + √ε` and `γ_d + √ε` (0 where the sum is exactly 0: that row or column has never
/// moved, and neither does the current update there).
fn denominators(rows: &[f64], cols: &[f64], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let total: f64 = rows.iter().sum();
    let root = total.sqrt().sqrt();
    let e = f64::from(eps).sqrt();
    let side = |v: &[f64]| -> Vec<f32> {
        v.iter()
            .map(|&x| {
                if x > 0.0 && root > 0.0 {
                    (x.sqrt() / root + e) as f32
                } else {
                    0.0
                }
            })
            .collect()
    };
    (side(rows), side(cols))
}

/// `1/(ρ_j + √ε)` and `1/(γ_d + √ε)`, 0 where the sum is exactly 0 (see
/// [`denominators`]).
fn reciprocals(rows: &[f64], cols: &[f64], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let (rho, gamma) = denominators(rows, cols, eps);
    let recip = |v: Vec<f32>| -> Vec<f32> {
        v.into_iter()
            .map(|x| if x > 0.0 { 1.0 / x } else { 0.0 })
            .collect()
    };
    (recip(rho), recip(gamma))
}

/// The batch with `u ⊙ rho` and `v ⊙ gamma` (reciprocal denominators; scale unchanged).
fn precondition(b: &FactorBatch, rho: &[f32], gamma: &[f32]) -> FactorBatch {
    let scaled = |x: &[f32], by: &[f32], width: usize| -> Vec<f32> {
        let mut out = vec![0f32; x.len()];
        for (o, row) in out.chunks_mut(width).zip(x.chunks(width)) {
            for ((o, &v), &r) in o.iter_mut().zip(row).zip(by) {
                *o = v * r;
            }
        }
        out
    };
    let v = match &b.v {
        VFactors::Dense(v) => VFactors::Dense(scaled(v, gamma, b.d)),
        VFactors::Sparse {
            indptr,
            indices,
            values,
        } => VFactors::Sparse {
            indptr: indptr.clone(),
            indices: indices.clone(),
            values: indices
                .iter()
                .zip(values)
                .map(|(&c, &x)| x * gamma[c as usize])
                .collect(),
        },
    };
    FactorBatch {
        origin: b.origin,
        clock: b.clock,
        scale: b.scale,
        j: b.j,
        d: b.d,
        u: scaled(&b.u, rho, b.j),
        v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_evaluate() {
        let s: Schedule = "inv-sqrt:10".parse().unwrap();
        assert!((s.factor(30, 100) - 0.5).abs() < 1e-12);
        let s: Schedule = "step:10:0.1".parse().unwrap();
        assert!((s.factor(25, 100) - 0.01).abs() < 1e-12);
        let s: Schedule = "cosine".parse().unwrap();
        assert!((s.factor(0, 100) - 1.0).abs() < 1e-12);
        assert!((s.factor(50, 100) - 0.5).abs() < 1e-12);
        assert!(s.factor(100, 100).abs() < 1e-12);
        assert_eq!("constant".parse::<Schedule>().unwrap(), Schedule::Constant);
        for bad in [
            "step",
            "step:0",
            "step:2.5",
            "cosine:2",
            "inv-sqrt:-1",
            "linear",
            "step:1:2",
        ] {
            assert!(bad.parse::<Schedule>().is_err(), "{bad}");
        }
        let mut o = Optimizer::new(Method::Sgd);
        o.warmup = 4;
        assert!((o.factor(0, 10) - 0.25).abs() < 1e-12);
        assert!((o.factor(3, 10) - 1.0).abs() < 1e-12);
        assert!((o.factor(7, 10) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn methods_round_trip() {
        for m in Method::ALL {
            assert_eq!(m.to_string().parse::<Method>().unwrap(), m);
        }
        assert!("adam".parse::<Method>().is_err());
    }

    #[test]
    fn adaptive_needs_positive_lr() {
        assert!(Optimizer::new(Method::Factored).validate(0.0).is_err());
        assert!(Optimizer::new(Method::Sgd).validate(0.0).is_ok());
        let mut o = Optimizer::new(Method::Momentum);
        o.momentum = 1.0;
        assert!(o.validate(0.1).is_err());
    }
}
