//! Partial broadcast that converges: weighted neighbourhood updates plus compressed
//! consensus (the default when a peer sends to `Q < P − 1` others).
//!
//! # Why the paper's mode is not enough
//! Without forwarding, replica `p` applies its own and its in-neighbours' batches. The
//! replicas' disagreement then evolves under `A = I + A_in`; on most optimized topologies
//! some eigenvalue of `A` has real part `≤ 0` and the objective rises the longer the run,
//! and where all are positive each replica settles near its own shard's minimizer
//! (`sfb_topology::Learning` computes which; `sfb topology` prints it). Nothing in that
//! mode ever pulls the replicas back together.
//!
//! # What this mode does, per peer `p` and clock
//! 1. **Neighbourhood updates.** As in the paper, `p` sends its `K` pairs to its `Q`
//!    out-neighbours and applies its own and its in-neighbours' batches, but weighted
//!    ([`Config::weights`]): every batch `g·P/(Q+1)` on a topology whose in-degrees are all
//!    `Q`, so the replicas' mean moves as `g` (the *gain*) times a full-broadcast replica's
//!    step (on other topologies the weights come from the consensus's stationary
//!    distribution, so that no shard counts more than another; `sfb_topology::Learning`).
//!    The default gain ([`Config::default_gain`]) is 1 up to `P = 3(Q+1)` and keeps every
//!    weight at most 3 beyond. The weight multiplies the step and, for the factored method,
//!    counts in its statistics as that many batches
//!    ([`Stepper::with_weights`](crate::Stepper::with_weights)).
//! 2. **Compressed consensus** (CHOCO-SGD, Koloskova, Stich and Jaggi 2019, on a directed
//!    graph). Every peer keeps a *public copy* `Ŵ_p` of its replica that its
//!    out-neighbours can rebuild exactly, and a copy `Ŵ_m` of each in-neighbour's. Each
//!    clock it moves toward its in-neighbours, `W_p += γ (mean_m Ŵ_m − Ŵ_p)`, then sends
//!    the best rank-`R` part of what its public copy lacks, `q = C_R(W_p − Ŵ_p)`, as `R`
//!    factor pairs ([`Message::Mix`](crate::wire::Message::Mix)), and adds `q` to `Ŵ_p`;
//!    receivers add it to their copy of `Ŵ_p`. What is not sent stays in `W_p − Ŵ_p` and is
//!    sent later (error feedback): nothing is lost. `C_R` is one warm-started power
//!    iteration (PowerSGD, Vogels et al. 2019): `U = orth(E V)`, `q = U (Eᵀ U)ᵀ`, the next
//!    `V` being `Eᵀ U` — `O(R·J·D)`, the cost of applying `2R` pairs.
//! 3. **Off the critical path.** The consensus step of clock `t` runs in a step of its own
//!    right after the clock's factors went out, while they are on the wire; its message
//!    follows them on every link, and receivers fold it a clock after the clock's batches
//!    (by then it has arrived on every run alike, so BSP stays deterministic). A
//!    checkpoint at `t` waits for and holds the messages of `t − 1`. Measured (Fig. 9,
//!    P = 12, J = D = 1024, 1 Gbit/s): at Q = 10 the clock went from 22.8 to 23.1 ms with
//!    evaluation — full broadcast's — from 1.8 ms of consensus arithmetic on top before.
//!
//! Bytes per peer per clock: `Q·(K + R)·(J + D)` floats against full broadcast's
//! `(P − 1)·K·(J + D)`, the default `R` ([`Config::default_rank_for`]) never making it
//! more; work: `(Q+1)·K` applied pairs, `(Q+1)·R` pairs into the copies and `O(Q·J·D)` for
//! the consensus step. Memory: `Q + 2` matrices the size of W.
//!
//! # Where it falls short (measured)
//! A replica applies `Q + 1` batches weighted `w` each: its step has `w` times the
//! variance of full broadcast's per batch, and only the consensus averages the
//! difference away, at about `γ` ([`Config::default_step`]) of it a clock. Weights of `P/(Q+1)` (the
//! mean moving as fast as full broadcast's) were too noisy beyond small clusters (P = 64,
//! Q = 3, 128 × 128 MLR, 60 clocks: 3.98 against full broadcast's 1.99), hence the
//! default gain; with it the mean moves slower than full broadcast's once `P > 3(Q+1)`,
//! so at equal clocks partial broadcast trails it there (P = 64, 600 clocks: Q = 3 2.09,
//! Q = 10 2.02 against 1.95, in a ninth and a quarter of the simulated time), and early in
//! a run with many rows the replicas are still apart.
//!
//! The consensus step `γ` must stay below what the compression can follow (CHOCO's
//! condition); the default ([`Config::default_step`]) keeps at least half-way below the
//! edges measured on softmax regression from 10 to 512 classes.
//!
//! Everything is a function of what the peer applied, in `(clock, origin)` order, so under
//! BSP a run is reproducible bit for bit (the replicas differ from each other by design,
//! by a disagreement the consensus keeps small).
//!
//! **Peer loss**: a lost in-neighbour's copy is dropped and the mean taken over the
//! others; an in-neighbour gained by a repair is not mixed with (its public copy is not
//! known here), its batches are applied. Checkpoints hold the copies
//! ([`Mixer::save_state`]); a rejoining peer cannot get them yet and is refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use ndarray::{Array2, ArrayView2, ArrayViewMut2, Axis, Zip};
use rand::{Rng, SeedableRng};

use crate::{Error, FactorBatch, PeerId, Replica, Result, VFactors};

/// Settings of the gossip mode (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Pairs per clock of the consensus message (`R`). Default: 1 (the cluster builder's:
    /// [`Config::default_rank`] of the batch size).
    pub rank: usize,
    /// Consensus step `γ` in (0, 1]; `None`: [`Config::default_step`].
    pub step: Option<f32>,
    /// This peer's weight of each origin's batches (indexed by peer): `α P` for its own and
    /// `(1 − α) P / Q` for the others' on a topology whose in-degrees are all `Q`
    /// (`sfb_topology::Learning::gossip_weights`).
    pub weights: Arc<[f32]>,
}

impl Config {
    /// The default own weight `α` of [`weights`](Self::weights) for a peer with `q`
    /// out-neighbours: `1/(q + 1)`, every batch a replica applies weighted alike.
    /// Measured against larger `α` (MLR, 128 classes × 128 features, 60 clocks, P = 12 and
    /// 64, Q = 3): objective 3.04 / 3.12 / 3.23 / 3.44 for `α` = 0.25 / 0.5 / 0.6 / 0.75 at
    /// P = 12 (full broadcast 2.65), 4.17 / 4.09 / 4.33 / 4.85 at P = 64, and with plain SGD
    /// 6.92 / 7.57 / 8.94 / 11.6: a larger own share makes every replica's step noisier
    /// (fewer distinct samples carry more of it), which costs more than the contraction
    /// `α > 1/2` guarantees buys.
    pub fn default_own(q: usize) -> f32 {
        1.0 / (q as f32 + 1.0)
    }

    /// The default gain: how far the replicas' mean moves a clock, as a share of a full
    /// broadcast replica's step, for `peers` peers sending to `q` each:
    /// `min(1, GAIN_NEIGHBOURHOODS·(q + 1)/peers)`, so no batch is weighted more than
    /// [`GAIN_NEIGHBOURHOODS`](Self::GAIN_NEIGHBOURHOODS) times (see there).
    pub fn default_gain(peers: usize, q: usize) -> f32 {
        (Self::GAIN_NEIGHBOURHOODS * (q as f32 + 1.0) / peers.max(1) as f32).min(1.0)
    }

    /// The most a batch is weighted by default: a replica's `Q + 1` batches stand for at
    /// most this many neighbourhoods' worth. A replica's step has `w` times full
    /// broadcast's variance for weight `w`, which the consensus must average away; a
    /// smaller step moves the mean less far a clock. Measured (MLR, held-out objective):
    /// P = 64, Q = 3, 128 × 128, 600 clocks: weight 16 (gain 1) 2.42, 4 → 2.12, 2 → 2.06
    /// (full broadcast 1.95; the paper's mode 4.08); 60 clocks: 3.98 / 3.37 / 3.29 (1.99),
    /// weight 1 3.32; Q = 10: weight 5.8 3.18, 2 2.81. P = 12, Q = 2, 2,000 clocks, digits:
    /// weight 4 0.1188, 3 0.1168, 2 0.1140 (full broadcast 0.1154); the default synthetic
    /// set, still learning: 0.6611, 0.6669, 0.6781 (full broadcast 0.6593). 3 keeps both
    /// within 1.3 %.
    pub const GAIN_NEIGHBOURHOODS: f32 = 3.0;

    /// `R = 1`, the default step, and `weights`.
    pub fn new(weights: Arc<[f32]>) -> Self {
        Self {
            rank: 1,
            step: None,
            weights,
        }
    }

    /// `R = max(1, ⌊3K/16⌋)` for mini-batches of `K`: the consensus message then adds at
    /// most 3/16 to the bytes of the factors (`R` pairs against `K`), inside the 1/4 that
    /// partial broadcast may cost beyond `Q/(P − 1)` of full broadcast's, with room for the
    /// frames' headers. The consensus is what brings a replica what its `P − Q − 1`
    /// unseen batches taught the others, so it matters more the larger `P/(Q+1)`.
    /// Measured (MLR, 128 × 128, K = 16, 10 Gbit/s, simulated): P = 64, Q = 3, time to full
    /// broadcast's objective at its 30th clock (26.8 ms): `R` = 2 29.6 ms (290 clocks),
    /// 3 21.5 ms (210), 4 17.4 ms (170); Q = 10: 30.7, 20.4, 18.4 ms (150, 100, 90 clocks);
    /// at P = 256 (1,000 clocks, Q = 3) the objective 2.42 / 2.26 / 2.17 for `R` = 2 / 3 / 4.
    /// Earlier, at P = 12 on digits, Q = 2: `R = 1` 5.7 % above full broadcast's objective,
    /// 2 2.9 %, 4 1.4 %; P = 16 on 32 × 32: `R = 1` 3.9 %, 2 2.1 %.
    pub fn default_rank(batch: usize) -> usize {
        (3 * batch / 16).max(1)
    }

    /// [`default_rank`](Self::default_rank), but never so many pairs that a peer sending
    /// to `q` of `peers` sends more than full broadcast would (`q (K + R) ≤ (P − 1) K`),
    /// and at least 1: near `Q = P − 1` the consensus has little to do (a replica misses
    /// few batches) and every pair it sends costs what a missed batch's would. At P = 12,
    /// K = 16: `R = 1` from Q = 10.
    pub fn default_rank_for(batch: usize, peers: usize, q: usize) -> usize {
        let room = peers.saturating_sub(1 + q) * batch / q.max(1);
        Self::default_rank(batch).min(room).max(1)
    }

    /// `γ = min(1/4, R · max(1/m, 0.4/m^¾))` with `m = min(J, D)`: below the stability
    /// edges measured on softmax regression with `R = 2` (CHOCO diverges once `γ` is more
    /// than the compression can follow): stable at 0.2 and diverging at 0.4 for `m = 10`,
    /// 0.1 / 0.2 at `m = 20`, 0.0625 / 0.125 at 32, 0.03 / 0.06 at 128 (P = 64), 0.02 /
    /// 0.08 at 512 (P = 64). `R/m` is the edge's half at small `m`; at large `m` the edge
    /// falls more slowly than `1/m`, and `0.4 R/m^¾` (larger from `m = 40`) keeps a margin
    /// of 2.8 or more there (the consensus is then 1.35 times faster than `R/m`'s at 128,
    /// 2.3 times at 1,024). At most a quarter: the step reads the in-neighbours' copies a
    /// clock late (the consensus runs off the critical path), and delayed feedback with a
    /// large gain oscillates (4 peers, Q = 2, 1 × 2 least squares on shards that each fit
    /// only one direction: at ½ the replicas were still 1.35 off the optimum after 100
    /// clocks, at ¼ within 1e-3); a step of 1 would moreover replace a replica by its
    /// in-neighbours' mean, which on a directed cycle only rotates the disagreement.
    pub fn default_step(rank: usize, j: usize, d: usize) -> f32 {
        let m = j.min(d).max(1) as f32;
        (rank as f32 * (1.0 / m).max(0.4 / m.powf(0.75))).min(0.25)
    }

    /// The pairs a consensus message holds for a `j × d` W: `R`, at most `min(J, D)` (the
    /// rank of any `J × D` matrix).
    pub fn rank_for(&self, j: usize, d: usize) -> usize {
        self.rank.min(j).min(d).max(1)
    }

    /// The step used for a `j × d` W.
    pub fn step_for(&self, j: usize, d: usize) -> f32 {
        self.step
            .unwrap_or_else(|| Self::default_step(self.rank_for(j, d), j, d))
    }

    /// Checks the settings for a run of `peers` peers.
    ///
    /// # Errors
    /// A sentence naming the bad setting.
    pub fn check(&self, peers: usize) -> std::result::Result<(), String> {
        if self.rank == 0 {
            return Err("--gossip-rank 0 would never mix the replicas".into());
        }
        if let Some(s) = self.step
            && !(s > 0.0 && s <= 1.0)
        {
            return Err(format!("--gossip-step {s} is not in (0, 1]"));
        }
        if self.weights.len() != peers {
            return Err(format!(
                "{} gossip weights for {peers} peers",
                self.weights.len()
            ));
        }
        if let Some(w) = self.weights.iter().find(|w| !(w.is_finite() && **w > 0.0)) {
            return Err(format!("gossip weight {w} is not a positive number"));
        }
        Ok(())
    }
}

/// One peer's consensus state: its public copy, its copies of its in-neighbours', the
/// power iteration's warm start.
#[derive(Debug)]
pub struct Mixer {
    me: PeerId,
    rank: usize,
    step: f32,
    public: Replica,
    copies: BTreeMap<PeerId, Replica>,
    /// `D × R`, unit columns.
    basis: Array2<f32>,
    /// Consensus messages received and not yet folded in, by `(clock, origin)`.
    pending: BTreeMap<(u64, PeerId), Arc<FactorBatch>>,
    /// Consensus messages ignored (from a peer with no copy here: gained by a repair).
    pub ignored: u64,
    /// This peer's last consensus message: in its public copy already, in its
    /// out-neighbours' copies only a clock later (they fold a clock after the batches), so
    /// the consensus step leaves it out, as they do.
    last_sent: Option<FactorBatch>,
}

impl Mixer {
    /// The state of peer `me` with in-neighbours `inn`, every copy starting at `w0` (the
    /// same on every peer).
    ///
    /// # Errors
    /// [`Error::NonFinite`] for a bad `w0`.
    pub fn new(me: PeerId, inn: &[PeerId], w0: &Array2<f32>, cfg: &Config) -> Result<Self> {
        let (j, d) = w0.dim();
        let rank = cfg.rank_for(j, d);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5fb0_6055 ^ u64::from(me.0));
        let mut basis = Array2::from_shape_fn((d, rank), |_| rng.random::<f32>() - 0.5);
        normalize_columns(&mut basis);
        let mut copies = BTreeMap::new();
        for &m in inn {
            copies.insert(m, Replica::new(w0.clone())?);
        }
        Ok(Self {
            me,
            rank,
            step: cfg.step_for(j, d),
            public: Replica::new(w0.clone())?,
            copies,
            basis,
            pending: BTreeMap::new(),
            ignored: 0,
            last_sent: None,
        })
    }

    /// The consensus step `γ`.
    pub fn step(&self) -> f32 {
        self.step
    }

    /// In-neighbours mixed with.
    pub fn mixed_with(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.copies.keys().copied()
    }

    /// Checks and holds `batch`, `from`'s consensus message of its clock `batch.clock`,
    /// until [`fold`](Self::fold) reaches that clock. From a peer without a copy here it is
    /// counted and dropped.
    ///
    /// # Errors
    /// [`Error::BadClock`] when the origin is not the sender or the clock is held already;
    /// the batch's own validation errors (shape, non-finite values, sparse `v`). Nothing
    /// changes on an error.
    pub fn receive(&mut self, from: PeerId, batch: Arc<FactorBatch>) -> Result<()> {
        if batch.origin != from {
            return Err(Error::BadClock {
                origin: batch.origin,
                clock: batch.clock,
                reason: "a consensus message is never relayed: origin differs from sender",
            });
        }
        let (j, d) = self.public.dim();
        batch.validate(j, d)?;
        if !matches!(batch.v, VFactors::Dense(_)) || batch.len() > self.rank.max(1) * 4 {
            return Err(Error::BadClock {
                origin: from,
                clock: batch.clock,
                reason: "a consensus message holds a few dense pairs",
            });
        }
        if !self.copies.contains_key(&from) {
            self.ignored += 1;
            return Ok(());
        }
        if self.pending.contains_key(&(batch.clock, from)) {
            return Err(Error::BadClock {
                origin: from,
                clock: batch.clock,
                reason: "duplicate consensus message",
            });
        }
        self.pending.insert((batch.clock, from), batch);
        Ok(())
    }

    /// Adds every held message of a clock `< limit` (all of them with `None`) to its
    /// sender's copy, in `(clock, origin)` order.
    ///
    /// # Errors
    /// From the apply kernel (the batches were validated on receipt).
    pub fn fold(&mut self, limit: Option<u64>) -> Result<usize> {
        let keys: Vec<(u64, PeerId)> = match limit {
            Some(l) => self
                .pending
                .range(..(l, PeerId(0)))
                .map(|(k, _)| *k)
                .collect(),
            None => self.pending.keys().copied().collect(),
        };
        let mut pairs = 0;
        for k in keys {
            let batch = self.pending.remove(&k).expect("listed");
            if let Some(copy) = self.copies.get_mut(&k.1) {
                copy.apply(&[&batch])?;
                pairs += batch.len();
            }
        }
        Ok(pairs)
    }

    /// The consensus step on `w`: `W += γ (mean_m Ŵ_m − Ŵ_p)` (nothing without copies),
    /// with `Ŵ_p` as the out-neighbours hold it: without the last message sent, which they
    /// fold a clock later (as this peer's copies of its in-neighbours lack theirs).
    pub fn mix(&self, mut w: ArrayViewMut2<'_, f32>) {
        if self.copies.is_empty() {
            return;
        }
        let g = self.step;
        let each = g / self.copies.len() as f32;
        Zip::from(&mut w)
            .and(&self.public.w())
            .for_each(|x, &p| *x -= g * p);
        for copy in self.copies.values() {
            Zip::from(&mut w)
                .and(&copy.w())
                .for_each(|x, &c| *x += each * c);
        }
        if let Some(q) = &self.last_sent {
            let (j, d) = self.public.dim();
            let r = q.len();
            let VFactors::Dense(v) = &q.v else {
                unreachable!("consensus messages are dense")
            };
            let u = ArrayView2::from_shape((r, j), &q.u).expect("validated shape");
            let v = ArrayView2::from_shape((r, d), v).expect("validated shape");
            ndarray::linalg::general_mat_mul(g, &u.t(), &v, 1.0, &mut w);
        }
    }

    /// The rank-`R` consensus message of clock `clock` for `w`: the leading part of
    /// `E = W − Ŵ_p` by one warm-started power iteration, added to the public copy. Always
    /// `R` pairs (zero pairs where `E` has fewer directions), so every clock's message has
    /// the same size.
    ///
    /// # Errors
    /// From the apply kernel, or [`Error::NonFinite`] when `W` holds a non-finite value (the
    /// public copy is then unchanged).
    pub fn compress(&mut self, w: ArrayView2<'_, f32>, clock: u64) -> Result<FactorBatch> {
        let (j, d) = self.public.dim();
        let e = &w - &self.public.w();
        if e.iter().any(|x| !x.is_finite()) {
            return Err(Error::NonFinite {
                origin: self.me,
                pair: usize::MAX,
                what: "replica (before its consensus message)",
            });
        }
        // U = orth(E V), columns whose norm vanishes zeroed.
        let mut u = e.dot(&self.basis);
        orthonormalize(&mut u);
        let v = e.t().dot(&u); // D × R: E's part along U is U vᵀ.
        let mut next = v.clone();
        normalize_columns(&mut next);
        for (c, col) in next.axis_iter(Axis(1)).enumerate() {
            if col.iter().any(|x| *x != 0.0) {
                self.basis.column_mut(c).assign(&col);
            }
        }
        let batch = FactorBatch {
            origin: self.me,
            clock,
            scale: 1.0,
            j,
            d,
            u: u.t().iter().copied().collect(),
            v: VFactors::Dense(v.t().iter().copied().collect()),
        };
        self.public.apply(&[&batch])?;
        self.last_sent = Some(batch.clone());
        Ok(batch)
    }

    /// Whether every in-neighbour mixed with has delivered its consensus message of
    /// `clock` (held, not folded yet): what a checkpoint at `clock + 1` waits for.
    pub fn has_all(&self, clock: u64) -> bool {
        self.copies
            .keys()
            .all(|&m| self.pending.contains_key(&(clock, m)))
    }

    /// The state a checkpoint at clock `cut` holds: the public copy, each in-neighbour's
    /// copy (with its id), the power iteration's warm start, and the messages received of
    /// the clocks before `cut` and not folded yet (those of `cut − 1`: they are folded a
    /// clock later than the batches, see the engine; later ones are sent again by a resumed
    /// run).
    pub fn save_state(&self, cut: u64) -> Vec<u8> {
        let (j, d) = self.public.dim();
        let mut w = crate::checkpoint::ByteWriter::new();
        w.u64(j as u64)
            .u64(d as u64)
            .u64(self.rank as u64)
            .f32s(&self.public.w().iter().copied().collect::<Vec<_>>())
            .f32s(&self.basis.iter().copied().collect::<Vec<_>>())
            .u64(self.copies.len() as u64);
        for (id, copy) in &self.copies {
            w.u64(u64::from(id.0))
                .f32s(&copy.w().iter().copied().collect::<Vec<_>>());
        }
        match &self.last_sent {
            Some(q) => {
                let VFactors::Dense(v) = &q.v else {
                    unreachable!("consensus messages are dense")
                };
                w.u64(q.len() as u64).u64(q.clock).f32s(&q.u).f32s(v);
            }
            None => {
                w.u64(0);
            }
        }
        let held: Vec<_> = self.pending.range(..(cut, PeerId(0))).collect();
        w.u64(held.len() as u64);
        for ((clock, from), b) in held {
            let VFactors::Dense(v) = &b.v else {
                unreachable!("receive keeps dense consensus messages only")
            };
            w.u64(u64::from(from.0))
                .u64(*clock)
                .u64(b.len() as u64)
                .f32s(&b.u)
                .f32s(v);
        }
        w.finish()
    }

    /// Puts back what [`save_state`](Self::save_state) wrote, for the same peer, shape,
    /// rank and in-neighbours.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming what does not fit (shape, rank, neighbours, a truncated
    /// or non-finite section); nothing changes then.
    pub fn restore_state(&mut self, bytes: &[u8]) -> Result<()> {
        let bad = |reason: String| Error::Checkpoint {
            reason: format!("the gossip mode's state: {reason}"),
        };
        let (j, d) = self.public.dim();
        let mut r = crate::checkpoint::ByteReader::new(bytes);
        let mut num = |what: &str| r.u64().map_err(|e| bad(format!("{what}: {e}")));
        let (sj, sd, sr) = (num("J")?, num("D")?, num("rank")?);
        if (sj, sd, sr) != (j as u64, d as u64, self.rank as u64) {
            return Err(bad(format!(
                "written for a {sj}×{sd} W with rank {sr}, this run has {j}×{d} and rank {}",
                self.rank
            )));
        }
        let matrix =
            |r: &mut crate::checkpoint::ByteReader<'_>, rows: usize, cols: usize, what: &str| {
                let v = r
                    .f32s(Some(rows * cols))
                    .map_err(|e| bad(format!("{what}: {e}")))?;
                if v.iter().any(|x| !x.is_finite()) {
                    return Err(bad(format!("{what} holds a non-finite value")));
                }
                Array2::from_shape_vec((rows, cols), v).map_err(|e| bad(format!("{what}: {e}")))
            };
        let public = matrix(&mut r, j, d, "the public copy")?;
        let basis = matrix(&mut r, d, self.rank, "the warm start")?;
        let n = r.u64().map_err(|e| bad(format!("copies: {e}")))?;
        let mut copies = BTreeMap::new();
        for _ in 0..n {
            let id = r.u64().map_err(|e| bad(format!("a copy's peer: {e}")))?;
            let id = PeerId(u32::try_from(id).map_err(|_| bad(format!("peer {id}")))?);
            let w = matrix(&mut r, j, d, "a neighbour's copy")?;
            copies.insert(id, Replica::new(w)?);
        }
        let sent = r
            .u64()
            .map_err(|e| bad(format!("the last message sent: {e}")))?;
        let last_sent = if sent == 0 {
            None
        } else {
            let len = usize::try_from(sent)
                .ok()
                .filter(|&l| l <= self.rank.max(1) * 4)
                .ok_or_else(|| bad(format!("a last message of {sent} pairs")))?;
            let clock = r
                .u64()
                .map_err(|e| bad(format!("the last message's clock: {e}")))?;
            let u = r
                .f32s(Some(len * j))
                .map_err(|e| bad(format!("the last message's u: {e}")))?;
            let v = r
                .f32s(Some(len * d))
                .map_err(|e| bad(format!("the last message's v: {e}")))?;
            let q = FactorBatch {
                origin: self.me,
                clock,
                scale: 1.0,
                j,
                d,
                u,
                v: VFactors::Dense(v),
            };
            q.validate(j, d)
                .map_err(|e| bad(format!("the last message: {e}")))?;
            Some(q)
        };
        let held = r.u64().map_err(|e| bad(format!("held messages: {e}")))?;
        let mut pending = BTreeMap::new();
        for _ in 0..held {
            let mut num = |what: &str| {
                r.u64()
                    .map_err(|e| bad(format!("a held message's {what}: {e}")))
            };
            let (from, clock, len) = (num("sender")?, num("clock")?, num("length")?);
            let from = PeerId(u32::try_from(from).map_err(|_| bad(format!("peer {from}")))?);
            let len = usize::try_from(len)
                .ok()
                .filter(|&l| l <= self.rank.max(1) * 4)
                .ok_or_else(|| bad(format!("a held message of {len} pairs")))?;
            let u = r
                .f32s(Some(len * j))
                .map_err(|e| bad(format!("a held message's u: {e}")))?;
            let v = r
                .f32s(Some(len * d))
                .map_err(|e| bad(format!("a held message's v: {e}")))?;
            let batch = FactorBatch {
                origin: from,
                clock,
                scale: 1.0,
                j,
                d,
                u,
                v: VFactors::Dense(v),
            };
            batch
                .validate(j, d)
                .map_err(|e| bad(format!("a held message: {e}")))?;
            if !copies.contains_key(&from) {
                return Err(bad(format!(
                    "a held message from {from}, not an in-neighbour"
                )));
            }
            pending.insert((clock, from), Arc::new(batch));
        }
        r.finish().map_err(|e| bad(e.to_string()))?;
        let want: Vec<PeerId> = self.copies.keys().copied().collect();
        let got: Vec<PeerId> = copies.keys().copied().collect();
        if want != got {
            return Err(bad(format!(
                "copies of {got:?}, this peer's in-neighbours are {want:?}"
            )));
        }
        self.public = Replica::new(public)?;
        self.basis = basis;
        self.copies = copies;
        self.pending = pending;
        self.last_sent = last_sent;
        Ok(())
    }

    /// This peer's public copy and the first clock whose consensus message it lacks: what
    /// a new out-neighbour takes as its copy ([`install`](Self::install)).
    pub fn public_copy(&self) -> (u64, Array2<f32>) {
        let next = self.last_sent.as_ref().map_or(0, |q| q.clock + 1);
        (next, self.public.w().to_owned())
    }

    /// Takes `w` as the copy of in-neighbour `from`'s public copy, lacking its consensus
    /// messages of clock `clock` on (which are folded into it as they come): `from` is mixed
    /// with from now on. Held messages of `from` of earlier clocks are dropped.
    ///
    /// # Errors
    /// [`Error::NonFinite`] or a shape error for a bad `w` (nothing changes).
    pub fn install(&mut self, from: PeerId, clock: u64, w: Array2<f32>) -> Result<()> {
        let (j, d) = self.public.dim();
        crate::replica::validate_dense(w.view(), j, d, from, "public copy")?;
        self.copies.insert(from, Replica::new(w)?);
        self.pending.retain(|k, _| k.1 != from || k.0 >= clock);
        Ok(())
    }

    /// Starts over from `w` (a rejoining peer's adopted replica): the public copy is `w`
    /// (its out-neighbours get it whole, [`public_copy`](Self::public_copy)) and no
    /// in-neighbour is mixed with until its copy comes ([`install`](Self::install)).
    ///
    /// # Errors
    /// [`Error::NonFinite`] for a bad `w` (nothing changes).
    pub fn reset(&mut self, w: &Array2<f32>) -> Result<()> {
        self.public = Replica::new(w.clone())?;
        self.copies.clear();
        self.pending.clear();
        self.last_sent = None;
        Ok(())
    }

    /// `peer` is gone: its copy is dropped, the mean taken over the others.
    pub fn forget(&mut self, peer: PeerId) {
        self.copies.remove(&peer);
        self.pending.retain(|k, _| k.1 != peer);
    }
}

/// Modified Gram–Schmidt on the columns of `m`, in place; columns that vanish (relative
/// to the largest) are moved to the end as zeros. Returns how many are kept.
fn orthonormalize(m: &mut Array2<f32>) -> usize {
    let cols = m.ncols();
    let largest = m
        .axis_iter(Axis(1))
        .map(|c| c.dot(&c).sqrt())
        .fold(0f32, f32::max);
    if largest == 0.0 || !largest.is_finite() {
        return 0;
    }
    let mut kept = 0;
    for c in 0..cols {
        let mut col = m.column(c).to_owned();
        for k in 0..kept {
            let q = m.column(k);
            let r = q.dot(&col);
            col.scaled_add(-r, &q);
        }
        let n = col.dot(&col).sqrt();
        if n > 1e-6 * largest {
            col /= n;
            m.column_mut(kept).assign(&col);
            kept += 1;
        }
    }
    for c in kept..cols {
        m.column_mut(c).fill(0.0);
    }
    kept
}

fn normalize_columns(m: &mut Array2<f32>) {
    for mut col in m.axis_iter_mut(Axis(1)) {
        let n = col.dot(&col).sqrt();
        if n > 0.0 && n.is_finite() {
            col /= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rank: usize, step: f32, peers: usize) -> Config {
        Config {
            rank,
            step: Some(step),
            weights: vec![1.0; peers].into(),
        }
    }

    /// A message sent is what the receiver's copy gains, and the sender's public copy
    /// gains the same: after any sequence both copies are equal bit for bit.
    #[test]
    fn the_receivers_copy_tracks_the_senders_public_copy_exactly() {
        let w0 = Array2::<f32>::zeros((5, 7));
        let mut a = Mixer::new(PeerId(0), &[PeerId(1)], &w0, &cfg(2, 0.5, 2)).unwrap();
        let mut b = Mixer::new(PeerId(1), &[PeerId(0)], &w0, &cfg(2, 0.5, 2)).unwrap();
        let mut w = w0.clone();
        for t in 0..20u64 {
            w.iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x += ((i as u64 * 31 + t * 7) % 11) as f32 - 5.0);
            let q = a.compress(w.view(), t).unwrap();
            assert_eq!(q.len(), 2, "always R pairs");
            b.receive(PeerId(0), Arc::new(q)).unwrap();
            b.fold(Some(t + 1)).unwrap();
            assert_eq!(a.public.w(), b.copies[&PeerId(0)].w());
        }
    }

    /// With a rank at least that of `E`, one message sends all of it (the public copy then
    /// equals W); with rank 1 the error `‖W − Ŵ‖` never grows and shrinks over clocks.
    #[test]
    fn compression_sends_everything_when_the_rank_allows_and_feeds_back_the_rest() {
        let w0 = Array2::<f32>::zeros((4, 6));
        let w = Array2::from_shape_fn((4, 6), |(i, k)| (i as f32 + 1.0) * (k as f32 - 2.5));
        // Rank-1 matrix: one message holds it.
        let mut m = Mixer::new(PeerId(0), &[], &w0, &cfg(1, 0.1, 1)).unwrap();
        // The warm start is random: two iterations on a fixed W.
        m.compress(w.view(), 0).unwrap();
        let err = (&w - &m.public.w()).mapv(f32::abs).sum();
        assert!(err < 1e-3, "left {err}");
        // Full rank, rank-1 messages: the error falls clock after clock.
        let w = Array2::from_shape_fn((4, 6), |(i, k)| ((i * 7 + k * 3) % 5) as f32 - 2.0);
        let mut m = Mixer::new(PeerId(0), &[], &w0, &cfg(1, 0.1, 1)).unwrap();
        let mut last = f32::INFINITY;
        for t in 0..30 {
            m.compress(w.view(), t).unwrap();
            let err = (&w - &m.public.w()).mapv(|x| x * x).sum().sqrt();
            assert!(err <= last * 1.0001, "clock {t}: {err} after {last}");
            last = err;
        }
        assert!(last < 1e-2, "left {last}");
    }

    #[test]
    fn a_bad_message_is_refused_and_changes_nothing() {
        let w0 = Array2::<f32>::zeros((3, 4));
        let mut m = Mixer::new(PeerId(0), &[PeerId(1)], &w0, &cfg(1, 0.5, 2)).unwrap();
        let good = FactorBatch {
            origin: PeerId(1),
            clock: 0,
            scale: 1.0,
            j: 3,
            d: 4,
            u: vec![1.0; 3],
            v: VFactors::Dense(vec![1.0; 4]),
        };
        let mut nan = good.clone();
        nan.u[1] = f32::NAN;
        assert!(m.receive(PeerId(1), Arc::new(nan)).is_err());
        let mut shape = good.clone();
        shape.j = 2;
        shape.u.truncate(2);
        assert!(m.receive(PeerId(1), Arc::new(shape)).is_err());
        assert!(m.receive(PeerId(2), Arc::new(good.clone())).is_err());
        assert_eq!(m.fold(None).unwrap(), 0);
        assert_eq!(m.copies[&PeerId(1)].w(), w0.view());
        m.receive(PeerId(1), Arc::new(good.clone())).unwrap();
        assert!(m.receive(PeerId(1), Arc::new(good)).is_err(), "duplicate");
        assert_eq!(m.fold(Some(0)).unwrap(), 0, "clock 0 is not < 0");
        assert_eq!(m.fold(Some(1)).unwrap(), 1);
    }

    /// A saved state restores bit for bit; a state of another shape or neighbourhood, or a
    /// damaged one, is refused and changes nothing.
    #[test]
    fn the_state_round_trips_and_a_bad_one_changes_nothing() {
        let w0 = Array2::<f32>::zeros((3, 4));
        let mut a = Mixer::new(PeerId(0), &[PeerId(1), PeerId(2)], &w0, &cfg(1, 0.5, 3)).unwrap();
        let w = Array2::from_shape_fn((3, 4), |(i, k)| (i * 4 + k) as f32 - 5.0);
        let q = a.compress(w.view(), 0).unwrap();
        a.receive(
            PeerId(1),
            Arc::new(FactorBatch {
                origin: PeerId(1),
                ..q
            }),
        )
        .unwrap();
        a.fold(None).unwrap();
        // Held, not folded: a message of clock 1 (in a cut at 2) and one of clock 2 (sent
        // again by a run resumed at 2, so not in it).
        for (from, clock) in [(1, 1), (2, 1), (2, 2)] {
            let held = FactorBatch {
                origin: PeerId(from),
                clock,
                ..a.compress(w.view(), clock).unwrap()
            };
            a.receive(PeerId(from), Arc::new(held)).unwrap();
        }
        assert!(a.has_all(1) && !a.has_all(2));
        let saved = a.save_state(2);
        let mut b = Mixer::new(PeerId(0), &[PeerId(1), PeerId(2)], &w0, &cfg(1, 0.5, 3)).unwrap();
        b.restore_state(&saved).unwrap();
        assert_eq!(b.save_state(2), saved);
        assert_eq!(b.public.w(), a.public.w());
        assert!(
            b.has_all(1) && !b.has_all(2),
            "clock 1's messages held, 2's not"
        );
        assert_eq!(b.fold(None).unwrap(), 2);
        let fresh = Mixer::new(PeerId(0), &[PeerId(1), PeerId(2)], &w0, &cfg(1, 0.5, 3)).unwrap();
        let before = fresh.save_state(0);
        let mut c = fresh;
        assert!(
            c.restore_state(&saved[..saved.len() - 3]).is_err(),
            "truncated"
        );
        let mut other = Mixer::new(PeerId(0), &[PeerId(1)], &w0, &cfg(1, 0.5, 3)).unwrap();
        assert!(other.restore_state(&saved).is_err(), "other neighbours");
        let mut bigger = Mixer::new(
            PeerId(0),
            &[PeerId(1), PeerId(2)],
            &Array2::zeros((4, 4)),
            &cfg(1, 0.5, 3),
        )
        .unwrap();
        assert!(bigger.restore_state(&saved).is_err(), "other shape");
        assert_eq!(c.save_state(0), before);
    }

    /// The defaults: a batch weighted at most `GAIN_NEIGHBOURHOODS` times (gain × P/(Q+1)),
    /// ⌊3K/16⌋ consensus pairs (fewer where that would send more than full broadcast), a step
    /// of R / min(J, D) capped at ½.
    #[test]
    fn the_defaults_bound_the_weight_the_bytes_and_the_step() {
        for (p, q) in [(4, 2), (12, 2), (12, 3), (64, 3), (64, 10), (1024, 3)] {
            let g = Config::default_gain(p, q);
            let w = g * p as f32 / (q as f32 + 1.0);
            assert!(g > 0.0 && g <= 1.0, "P = {p}, Q = {q}: gain {g}");
            assert!(
                w <= Config::GAIN_NEIGHBOURHOODS + 1e-5,
                "P = {p}, Q = {q}: weight {w}"
            );
        }
        assert_eq!(Config::default_gain(12, 3), 1.0);
        assert_eq!(Config::default_gain(12, 2), 0.75);
        assert_eq!(Config::default_rank(16), 3);
        assert_eq!(Config::default_rank(4), 1);
        // Never more bytes than full broadcast: q (K + R) ≤ (P − 1) K, R ≥ 1.
        for (k, p, q) in [
            (16, 12, 2),
            (16, 12, 9),
            (16, 12, 10),
            (64, 12, 10),
            (16, 64, 62),
        ] {
            let r = Config::default_rank_for(k, p, q);
            assert!(
                r >= 1 && r <= Config::default_rank(k),
                "K {k} P {p} Q {q}: R {r}"
            );
            assert!(
                r == 1 || q * (k + r) <= (p - 1) * k,
                "K {k} P {p} Q {q}: R {r}"
            );
        }
        assert_eq!(Config::default_rank_for(16, 12, 9), 3);
        assert_eq!(Config::default_rank_for(16, 12, 10), 1);
        assert_eq!(Config::default_rank_for(64, 12, 10), 6);
        assert_eq!(Config::default_step(2, 10, 64), 0.2);
        assert_eq!(Config::default_step(2, 20, 100), 0.1);
        assert_eq!(Config::default_step(1, 1, 2), 0.25);
        // Below every measured edge of stability, by at least 2 (R = 2).
        for (m, diverged) in [(10, 0.4), (20, 0.2), (32, 0.125), (128, 0.06), (512, 0.08)] {
            let g = Config::default_step(2, m, m);
            assert!(g * 2.0 <= diverged + 1e-6, "m = {m}: {g}");
        }
        assert!(Config::default_step(2, 1024, 1024) > 2.0 * 2.0 / 1024.0);
    }

    /// Two peers sending to each other, starting apart, with no gradients: the consensus
    /// brings them together.
    #[test]
    fn consensus_alone_brings_two_replicas_together() {
        let w0 = Array2::<f32>::zeros((3, 3));
        let mut wa = Array2::from_shape_fn((3, 3), |(i, k)| (i + 2 * k) as f32);
        let mut wb = Array2::from_shape_fn((3, 3), |(i, k)| -((i * k) as f32));
        let start = (&wa - &wb).mapv(f32::abs).sum();
        let mut a = Mixer::new(PeerId(0), &[PeerId(1)], &w0, &cfg(1, 0.3, 2)).unwrap();
        let mut b = Mixer::new(PeerId(1), &[PeerId(0)], &w0, &cfg(1, 0.3, 2)).unwrap();
        for t in 0..400 {
            a.mix(wa.view_mut());
            b.mix(wb.view_mut());
            let qa = a.compress(wa.view(), t).unwrap();
            let qb = b.compress(wb.view(), t).unwrap();
            b.receive(PeerId(0), Arc::new(qa)).unwrap();
            a.receive(PeerId(1), Arc::new(qb)).unwrap();
            a.fold(Some(t + 1)).unwrap();
            b.fold(Some(t + 1)).unwrap();
        }
        let end = (&wa - &wb).mapv(f32::abs).sum();
        assert!(end < 1e-3 * start, "{start} → {end}");
    }
}
