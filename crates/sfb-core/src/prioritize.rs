//! Prioritization under a send budget (`--prioritize POLICY:BUDGET`), Bösen's managed
//! communication for factor pairs.
//!
//! When the network cannot carry every pair a peer computes in a clock, the peer sends
//! the ones that matter most and carries the rest over to the next clock, where they
//! compete with the new pairs (error feedback: a pair held back is sent later, not lost).
//! Each clock the peer sends at most its **budget** of pairs ([`Budget`]) from the new
//! pairs plus the **backlog**, in the order of the [`Policy`]:
//!
//! - `magnitude`: largest `‖Δ_i‖_F = |s_i|·‖u_i‖·‖v_i‖` first (the rank-one update's norm);
//! - `relative`: largest `‖Δ_i‖_F` relative to the size of W where the update lands,
//!   `‖Δ_i‖_F / ‖W ∘ (û_i v̂_iᵀ)‖_F` with `û, v̂` the unit directions — computed from W's
//!   row and column norms, `‖W ∘ (û v̂ᵀ)‖² ≈ (Σ_r û_r² ‖W_r·‖²)(Σ_c v̂_c² ‖W_·c‖²) / ‖W‖²`
//!   (exact when W's squared entries are a rank-one table; O(J·D) per clock for the
//!   norms, O(J + nnz(v)) per pair). While W is zero every pair is relative to the same
//!   nothing and the order is `magnitude`'s;
//! - `random`: a uniformly random order (seeded by the run's seed, the peer and the
//!   clock: the same run sends the same pairs);
//! - `round-robin`: oldest first, so every pair waits its turn (FIFO).
//!
//! The backlog is bounded, as Bösen's is (an update held back there is *added* to the
//! row's pending update, so the backlog never outgrows the parameters): when more than
//! `max(K, budget)` pairs (one clock's worth) would be carried, the peer replaces them by
//! the best approximation of their sum by that many pairs — thin QR of both halves and an
//! SVD of the small core, as [`crate::compress`] does — so what is held back stays
//! *accumulated* update, largest singular directions first, and only the smallest
//! singular values beyond the bound are lost (counted: [`PriorityStats::lost_sq`],
//! [`Prioritizer::lost_sq`]). The merged pairs are dense; they are ordered by their norm
//! (`magnitude`, `relative`), in with the oldest (`round-robin`), or at random.
//!
//! A held pair keeps the scale of the batch it was computed in: sent under a later batch's
//! scale `s`, its `u` becomes `u·s_i/s` (exactly `u` while the learning rate is
//! constant), so a schedule does not distort it. A batch within the budget with nothing
//! held back is sent as it is (bitwise the same run as without `--prioritize`). The peer
//! applies exactly what it sends, so under BSP every replica stays the same.
//!
//! **A clock sent in parts** (`--send-parts N`): the clock's budget `B` (at most its K
//! pairs, what a receiver takes a clock to hold) is shared out evenly, part `i` allowed
//! `⌊(i+1)B/N⌋ − ⌊iB/N⌋` pairs ([`Prioritizer::begin_clock`],
//! [`Prioritizer::select_part`]); each part chooses from its own pairs and the backlog as
//! it is computed, and what it does not send waits in the same backlog, bounded at the
//! clock's `max(K, B)`. So the pairs go during the clock, within the budget, most
//! important first: Bösen's managed communication.
//!
//! **Optimizers**: the sent pairs are raw gradient pairs under their own scale; every
//! method applies its rule to them as to any batch (a held-back pair's step is taken when
//! it is sent, with the method's state of that clock).

use ndarray::ArrayView2;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::checkpoint::{ByteReader, ByteWriter};
use crate::{FactorBatch, VFactors, VRow};

/// Which pairs go first when the budget cannot carry them all (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// Largest update norm first.
    Magnitude,
    /// Largest update norm relative to W's rows and columns it hits first.
    Relative,
    /// A seeded random order.
    Random,
    /// Oldest first.
    RoundRobin,
}

impl Policy {
    /// Every policy, in the order reports list them.
    pub const ALL: [Policy; 4] = [
        Policy::Magnitude,
        Policy::Relative,
        Policy::Random,
        Policy::RoundRobin,
    ];

    /// The policy's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Magnitude => "magnitude",
            Policy::Relative => "relative",
            Policy::Random => "random",
            Policy::RoundRobin => "round-robin",
        }
    }

    /// The policy named `s` ([`name`](Self::name)).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// How many pairs a peer may send per clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    /// This fraction (in `(0, 1]`) of the pairs it computes per clock, rounded up.
    Fraction(f64),
    /// At most this many pairs (≥ 1).
    Pairs(usize),
    /// As many pairs as the link, at the rate its transport measured, carries in the time
    /// the peer worked on its last clock (`--prioritize POLICY:auto`; [`LinkRate`]): the
    /// clock's sends then take no longer than its compute, and a link that slows down
    /// mid-run is met by sending fewer pairs, the most important first. Every pair the
    /// peer computes until there is a measurement.
    Measured,
}

impl Budget {
    /// The pairs allowed for a clock in which `k` pairs were computed (at least 1). A
    /// [`Budget::Measured`] allows `k` here; [`Prioritizer::allowed`] is its budget.
    pub fn pairs(self, k: usize) -> usize {
        match self {
            Budget::Fraction(f) => ((f * k as f64).ceil() as usize).max(1),
            Budget::Pairs(n) => n.max(1),
            Budget::Measured => k.max(1),
        }
    }
}

/// Clocks over which [`LinkRate`] averages.
const RATE_WINDOW: usize = 4;

/// The rate a peer's link carries, measured by its transport: the bytes it sent and the
/// time it was busy sending them (some frame written but not yet through, as a writer
/// that waits on a full socket or a token bucket sees it; on the simulator the egress
/// NIC's serialization time). Not the configured rate: a link that slows down mid-run
/// shows it within [`RATE_WINDOW`] clocks. The rate is the bytes over the busy time of
/// the last clocks' sends; an idle link (nothing waiting) measures nothing.
#[derive(Debug, Clone, Default)]
pub struct LinkRate {
    /// Bytes and busy seconds since the last clock closed.
    open: (u64, f64),
    /// Each of the last clocks' bytes and busy seconds.
    window: std::collections::VecDeque<(u64, f64)>,
}

impl LinkRate {
    /// The transport sent `bytes` and was busy `busy_s` seconds since it last said.
    pub fn observe(&mut self, bytes: u64, busy_s: f64) {
        if busy_s.is_finite() && busy_s >= 0.0 {
            self.open.0 += bytes;
            self.open.1 += busy_s;
        }
    }

    /// A clock ends: what was observed since the last one joins the window.
    pub fn close_clock(&mut self) {
        let open = std::mem::take(&mut self.open);
        if open.0 > 0 && open.1 > 0.0 {
            self.window.push_back(open);
            if self.window.len() > RATE_WINDOW {
                self.window.pop_front();
            }
        }
    }

    /// Bytes per second over the window, once something was measured.
    pub fn bytes_per_s(&self) -> Option<f64> {
        let (b, t) = self
            .window
            .iter()
            .fold((0u64, 0.0), |(b, t), &(x, y)| (b + x, t + y));
        (b > 0 && t > 0.0).then(|| b as f64 / t)
    }
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Budget::Fraction(x) => write!(f, "{}%", x * 100.0),
            Budget::Pairs(n) => write!(f, "{n}"),
            Budget::Measured => write!(f, "auto"),
        }
    }
}

/// `--prioritize`: the policy, the budget and the seed of the random order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prioritize {
    /// The order.
    pub policy: Policy,
    /// Pairs per clock.
    pub budget: Budget,
    /// Seed of [`Policy::Random`] (the run's seed).
    pub seed: u64,
}

/// What one clock's selection did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriorityStats {
    /// Candidates: the batch's pairs and the backlog's.
    pub pairs_in: usize,
    /// Pairs sent.
    pub pairs_out: usize,
    /// Pairs the budget allowed ([`Prioritizer::allowed`]).
    pub allowed: usize,
    /// Pairs carried to the next clock.
    pub backlog: usize,
    /// Pairs folded into the backlog's bounded form this clock (0 when it fitted).
    pub merged_pairs: usize,
    /// `‖·‖_F²` of the update lost in that folding (the singular values beyond the bound).
    pub lost_sq: f64,
    /// `‖·‖_F²` of the batch's own pairs (what the peer computed this clock).
    pub computed_sq: f64,
    /// `‖·‖_F²` of the batch's budget-many largest pairs: the most of this clock's update
    /// a selection could send with nothing held back. Its share of
    /// [`computed_sq`](Self::computed_sq) is what ordering by magnitude can gain: a random
    /// choice sends about the budget's share, so equal pair norms leave nothing to choose
    /// by (the `top_pair_energy` of a run's summary).
    pub top_sq: f64,
}

/// One held pair: its own scale and the order it was computed in.
#[derive(Debug, Clone, PartialEq)]
struct Held {
    u: Vec<f32>,
    v: HeldV,
    scale: f32,
    seq: u64,
}

#[derive(Debug, Clone, PartialEq)]
enum HeldV {
    Dense(Vec<f32>),
    Sparse(Vec<u32>, Vec<f32>),
}

impl Held {
    fn v_norm_sq(&self) -> f64 {
        match &self.v {
            HeldV::Dense(v) | HeldV::Sparse(_, v) => v.iter().map(|&x| f64::from(x).powi(2)).sum(),
        }
    }

    /// `‖Δ‖_F²` of the pair.
    fn norm_sq(&self) -> f64 {
        let u: f64 = self.u.iter().map(|&x| f64::from(x).powi(2)).sum();
        f64::from(self.scale).powi(2) * u * self.v_norm_sq()
    }
}

/// `‖s u_p v_pᵀ‖_F²` of pair `p` of `fb`.
fn pair_sq(fb: &FactorBatch, p: usize) -> f64 {
    let u: f64 = fb.u_row(p).iter().map(|&x| f64::from(x).powi(2)).sum();
    let v: f64 = fb
        .v_row(p)
        .values()
        .iter()
        .map(|&x| f64::from(x).powi(2))
        .sum();
    f64::from(fb.scale).powi(2) * u * v
}

/// The best approximation of `Σ s_i u_i v_iᵀ` over `pairs` by at most `cap` dense pairs
/// (scale 1, numbered as the oldest of `pairs`), and the `‖·‖_F²` it leaves out.
fn merge(pairs: &[Held], j: usize, d: usize, cap: usize) -> (Vec<Held>, f64) {
    let n = pairs.len();
    let mut u = faer::Mat::<f64>::zeros(j, n);
    let mut v = faer::Mat::<f64>::zeros(d, n);
    for (p, h) in pairs.iter().enumerate() {
        let s = f64::from(h.scale);
        for (i, &x) in h.u.iter().enumerate() {
            u[(i, p)] = s * f64::from(x);
        }
        match &h.v {
            HeldV::Dense(vals) => {
                for (c, &x) in vals.iter().enumerate() {
                    v[(c, p)] = f64::from(x);
                }
            }
            HeldV::Sparse(idx, vals) => {
                for (&c, &x) in idx.iter().zip(vals) {
                    v[(c as usize, p)] = f64::from(x);
                }
            }
        }
    }
    let split = crate::compress::low_rank(&u, &v, cap);
    let lost = split.sigma[split.kept..].iter().map(|x| x * x).sum();
    let seq = pairs.iter().map(|h| h.seq).min().unwrap_or(0);
    let held = (0..split.kept)
        .map(|p| Held {
            u: (0..j).map(|i| split.u[(i, p)] as f32).collect(),
            v: HeldV::Dense((0..d).map(|c| split.v[(c, p)] as f32).collect()),
            scale: 1.0,
            seq,
        })
        .collect();
    (held, lost)
}

/// Row and column squared norms of W, for [`Policy::Relative`].
struct Footprint {
    rows: Vec<f64>,
    cols: Vec<f64>,
    total: f64,
}

impl Footprint {
    fn of(w: ArrayView2<'_, f32>) -> Self {
        let (j, d) = w.dim();
        let mut rows = vec![0.0; j];
        let mut cols = vec![0.0; d];
        for (r, row) in w.outer_iter().enumerate() {
            for (c, &x) in row.iter().enumerate() {
                let x2 = f64::from(x).powi(2);
                rows[r] += x2;
                cols[c] += x2;
            }
        }
        let total = rows.iter().sum();
        Self { rows, cols, total }
    }

    /// `‖W ∘ (û v̂ᵀ)‖²` of `h`'s directions (module docs).
    fn under(&self, h: &Held) -> f64 {
        if self.total <= 0.0 {
            return 0.0;
        }
        let un: f64 = h.u.iter().map(|&x| f64::from(x).powi(2)).sum();
        let vn = h.v_norm_sq();
        if un <= 0.0 || vn <= 0.0 {
            return 0.0;
        }
        let ru: f64 =
            h.u.iter()
                .zip(&self.rows)
                .map(|(&x, r)| f64::from(x).powi(2) * r)
                .sum();
        let cv: f64 = match &h.v {
            HeldV::Dense(v) => v
                .iter()
                .zip(&self.cols)
                .map(|(&x, c)| f64::from(x).powi(2) * c)
                .sum(),
            HeldV::Sparse(idx, v) => idx
                .iter()
                .zip(v)
                .map(|(&i, &x)| f64::from(x).powi(2) * self.cols[i as usize])
                .sum(),
        };
        (ru / un) * (cv / vn) / self.total
    }
}

/// Sends at most a budget of pairs per clock, in a policy's order, carrying the rest over
/// (module docs); one per sending peer.
#[derive(Debug, Clone)]
pub struct Prioritizer {
    spec: Prioritize,
    /// J × D of the batches seen (checked when a state is restored).
    shape: (usize, usize),
    backlog: Vec<Held>,
    next_seq: u64,
    lost_sq: f64,
    /// [`Budget::Measured`]: the link's rate, the wire bytes of a pair sent (to every
    /// out-neighbour, headers shared out) and the seconds the last clock's work took.
    link: LinkRate,
    bytes_per_pair: Option<f64>,
    work_s: Option<f64>,
}

/// First word of [`Prioritizer::save_state`]'s bytes ("SFBPRIO1").
const STATE_MAGIC: u64 = u64::from_le_bytes(*b"SFBPRIO1");

impl Prioritizer {
    /// A prioritizer for `spec`, with nothing held back.
    pub fn new(spec: Prioritize) -> Self {
        Self {
            spec,
            shape: (0, 0),
            backlog: Vec::new(),
            next_seq: 0,
            lost_sq: 0.0,
            link: LinkRate::default(),
            bytes_per_pair: None,
            work_s: None,
        }
    }

    /// The transport sent `bytes` and was busy `busy_s` seconds ([`LinkRate::observe`]).
    pub fn observe_link(&mut self, bytes: u64, busy_s: f64) {
        self.link.observe(bytes, busy_s);
    }

    /// The link's measured rate in bytes per second ([`LinkRate`]).
    pub fn link_rate(&self) -> Option<f64> {
        self.link.bytes_per_s()
    }

    /// The clock about to be selected took `work_s` seconds of work (compute and apply):
    /// the time a [`Budget::Measured`] lets its sends take.
    pub fn set_work(&mut self, work_s: f64) {
        self.work_s = (work_s.is_finite() && work_s > 0.0).then_some(work_s);
    }

    /// The clock's selection went out as `bytes` on the wire (to every out-neighbour) for
    /// `pairs` pairs: the cost of a pair that [`Budget::Measured`] divides by.
    pub fn sent(&mut self, bytes: u64, pairs: usize) {
        if pairs > 0 && bytes > 0 {
            self.bytes_per_pair = Some(bytes as f64 / pairs as f64);
        }
    }

    /// The pairs a clock in which `k` pairs were computed may send. For a
    /// [`Budget::Measured`]: the link's rate times the clock's work time, over a pair's
    /// bytes, at least 1; `k` until all three are known.
    pub fn allowed(&self, k: usize) -> usize {
        match self.spec.budget {
            Budget::Measured => match (self.link.bytes_per_s(), self.work_s, self.bytes_per_pair) {
                (Some(rate), Some(work), Some(bpp)) => {
                    let n = (rate * work / bpp).floor();
                    if n >= usize::MAX as f64 {
                        usize::MAX
                    } else {
                        (n as usize).max(1)
                    }
                }
                _ => k.max(1),
            },
            b => b.pairs(k),
        }
    }

    /// The policy, budget and seed.
    pub fn spec(&self) -> Prioritize {
        self.spec
    }

    /// Pairs held back for a later clock.
    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }

    /// `‖·‖_F²` of the update lost so far bounding the backlog (module docs).
    pub fn lost_sq(&self) -> f64 {
        self.lost_sq
    }

    /// The backlog as a dense J×D matrix `Σ s_i u_i v_iᵀ` (tests and diagnostics).
    pub fn backlog_dense(&self, j: usize, d: usize) -> ndarray::Array2<f64> {
        let mut m = ndarray::Array2::zeros((j, d));
        for h in &self.backlog {
            for (r, &x) in h.u.iter().enumerate() {
                let a = f64::from(h.scale) * f64::from(x);
                match &h.v {
                    HeldV::Dense(v) => {
                        for (c, &y) in v.iter().enumerate() {
                            m[(r, c)] += a * f64::from(y);
                        }
                    }
                    HeldV::Sparse(idx, v) => {
                        for (&c, &y) in idx.iter().zip(v) {
                            m[(r, c as usize)] += a * f64::from(y);
                        }
                    }
                }
            }
        }
        m
    }

    /// Chooses what `fb` (computed on replica `w`) sends: at most the budget's pairs of
    /// `fb`'s and the backlog's, in the policy's order, under `fb`'s scale; keeps the rest.
    pub fn select(
        &mut self,
        fb: FactorBatch,
        w: ArrayView2<'_, f32>,
    ) -> (FactorBatch, PriorityStats) {
        let k = fb.len();
        let allow = self.begin_clock(k);
        self.select_part(fb, w, allow, k.max(allow))
    }

    /// Starts a clock of `k` computed pairs: the link's meter closes the last clock, and
    /// the pairs the clock may send are returned ([`allowed`](Self::allowed)). A clock
    /// sent whole starts in [`select`](Self::select); a clock sent in parts
    /// (`--send-parts`) starts here and sends each part through
    /// [`select_part`](Self::select_part).
    pub fn begin_clock(&mut self, k: usize) -> usize {
        self.link.close_clock();
        self.allowed(k)
    }

    /// Chooses what one part `fb` of a clock sends: at most `allow` pairs of `fb`'s and
    /// the backlog's, in the policy's order, keeping the rest, with the backlog bounded
    /// by `cap` pairs (one clock's worth: `max(K, budget)` of the clock, not of the
    /// part). A part's `allow` may be 0: everything waits.
    pub fn select_part(
        &mut self,
        fb: FactorBatch,
        w: ArrayView2<'_, f32>,
        allow: usize,
        cap: usize,
    ) -> (FactorBatch, PriorityStats) {
        let cap = cap.max(1);
        let k = fb.len();
        self.shape = (fb.j, fb.d);
        let mut stats = PriorityStats {
            pairs_in: k + self.backlog.len(),
            pairs_out: k,
            allowed: allow,
            backlog: self.backlog.len(),
            ..PriorityStats::default()
        };
        if fb.scale.is_finite() {
            let mut sq: Vec<f64> = (0..k).map(|p| pair_sq(&fb, p)).collect();
            stats.computed_sq = sq.iter().sum();
            sq.sort_by(|a, b| b.total_cmp(a));
            stats.top_sq = sq.iter().take(allow).sum();
        }
        if fb.scale == 0.0 || !fb.scale.is_finite() || (self.backlog.is_empty() && k <= allow) {
            // Within the budget with nothing waiting (or nothing to rescale to): as it is.
            self.next_seq += k as u64;
            return (fb, stats);
        }
        let mut all = std::mem::take(&mut self.backlog);
        all.extend(self.split(&fb));
        self.order(&mut all, w, fb.clock, fb.origin.0);
        let rest = all.split_off(allow.min(all.len()));
        if rest.len() > cap {
            stats.merged_pairs = rest.len();
            let (held, lost) = merge(&rest, fb.j, fb.d, cap);
            self.backlog = held;
            self.lost_sq += lost;
            stats.lost_sq = lost;
        } else {
            self.backlog = rest;
        }
        // The batch lists its pairs in the order they were computed.
        all.sort_by_key(|h| h.seq);
        stats.pairs_out = all.len();
        stats.backlog = self.backlog.len();
        (Self::join(&fb, &all), stats)
    }

    /// `fb`'s pairs as held pairs, numbered on.
    fn split(&mut self, fb: &FactorBatch) -> Vec<Held> {
        (0..fb.len())
            .map(|p| {
                let v = match fb.v_row(p) {
                    VRow::Dense(v) => HeldV::Dense(v.to_vec()),
                    VRow::Sparse(i, v) => HeldV::Sparse(i.to_vec(), v.to_vec()),
                };
                let seq = self.next_seq;
                self.next_seq += 1;
                Held {
                    u: fb.u_row(p).to_vec(),
                    v,
                    scale: fb.scale,
                    seq,
                }
            })
            .collect()
    }

    /// Sorts `all` first-sent first.
    fn order(&self, all: &mut [Held], w: ArrayView2<'_, f32>, clock: u64, origin: u32) {
        match self.spec.policy {
            Policy::RoundRobin => all.sort_by_key(|h| h.seq),
            Policy::Random => {
                let mut rng = ChaCha8Rng::seed_from_u64(
                    self.spec.seed ^ (u64::from(origin) << 40) ^ clock.wrapping_mul(0x9E37),
                );
                all.sort_by_key(|h| h.seq);
                all.shuffle(&mut rng);
            }
            Policy::Magnitude | Policy::Relative => {
                let foot = (self.spec.policy == Policy::Relative).then(|| Footprint::of(w));
                let score = |h: &Held| {
                    let n2 = h.norm_sq();
                    match &foot {
                        None => n2,
                        // While W is zero every pair has the same floor: the norm decides.
                        Some(f) => n2 / f.under(h).max(1e-30),
                    }
                };
                let mut keyed: Vec<(f64, Held)> =
                    all.iter().map(|h| (score(h), h.clone())).collect();
                keyed.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.seq.cmp(&b.1.seq)));
                for (slot, (_, h)) in all.iter_mut().zip(keyed) {
                    *slot = h;
                }
            }
        }
    }

    /// A batch of `pairs` under `fb`'s origin, clock and scale.
    fn join(fb: &FactorBatch, pairs: &[Held]) -> FactorBatch {
        let s = f64::from(fb.scale);
        let mut u = Vec::with_capacity(pairs.len() * fb.j);
        for h in pairs {
            if h.scale == fb.scale {
                u.extend_from_slice(&h.u);
            } else {
                let r = f64::from(h.scale) / s;
                u.extend(h.u.iter().map(|&x| (f64::from(x) * r) as f32));
            }
        }
        let dense = matches!(fb.v, VFactors::Dense(_))
            || pairs.iter().any(|h| matches!(h.v, HeldV::Dense(_)));
        let v = if dense {
            // A merged (dense) pair among sparse ones: the batch goes dense.
            let mut out = vec![0.0f32; pairs.len() * fb.d];
            for (p, h) in pairs.iter().enumerate() {
                let row = &mut out[p * fb.d..(p + 1) * fb.d];
                match &h.v {
                    HeldV::Dense(v) => row.copy_from_slice(v),
                    HeldV::Sparse(idx, v) => {
                        for (&c, &x) in idx.iter().zip(v) {
                            row[c as usize] = x;
                        }
                    }
                }
            }
            VFactors::Dense(out)
        } else {
            VFactors::from_sparse_rows(pairs.iter().map(|h| match &h.v {
                HeldV::Sparse(i, v) => (i.as_slice(), v.as_slice()),
                HeldV::Dense(_) => (&[][..], &[][..]),
            }))
        };
        FactorBatch {
            origin: fb.origin,
            clock: fb.clock,
            scale: fb.scale,
            j: fb.j,
            d: fb.d,
            u,
            v,
        }
    }

    /// The backlog and counters as bytes (for checkpoints).
    pub fn save_state(&self) -> Vec<u8> {
        let mut w = ByteWriter::new();
        w.u64(STATE_MAGIC)
            .u64(self.shape.0 as u64)
            .u64(self.shape.1 as u64)
            .u64(self.next_seq)
            .f64s(&[self.lost_sq])
            .u64(self.backlog.len() as u64);
        for h in &self.backlog {
            w.u64(h.seq).f32s(&[h.scale]).f32s(&h.u);
            match &h.v {
                HeldV::Dense(v) => {
                    w.u64(0).f32s(v);
                }
                HeldV::Sparse(i, v) => {
                    let idx: Vec<u8> = i.iter().flat_map(|x| x.to_le_bytes()).collect();
                    w.u64(1).bytes(&idx).f32s(v);
                }
            }
        }
        w.finish()
    }

    /// Takes back what [`save_state`](Self::save_state) wrote, for a `j × d` replica; empty
    /// bytes are nothing held back.
    ///
    /// # Errors
    /// [`crate::Error::Checkpoint`] for bytes that are not a prioritizer's state, of another
    /// shape, or not finite.
    pub fn restore_state(&mut self, bytes: &[u8], j: usize, d: usize) -> crate::Result<()> {
        *self = Self::new(self.spec);
        if bytes.is_empty() {
            return Ok(());
        }
        let bad = |reason: String| crate::Error::Checkpoint {
            reason: format!("the prioritizer's backlog: {reason}"),
        };
        let mut r = ByteReader::new(bytes);
        let e = |x: crate::checkpoint::ReadError| bad(x.to_string());
        if r.u64().map_err(e)? != STATE_MAGIC {
            return Err(bad(
                "not a prioritizer's state (written by a run with --compress?)".into(),
            ));
        }
        let (sj, sd) = (r.u64().map_err(e)?, r.u64().map_err(e)?);
        if (sj, sd) != (0, 0) && (sj, sd) != (j as u64, d as u64) {
            return Err(bad(format!("written for W of {sj}×{sd}; W is {j}×{d}")));
        }
        let next_seq = r.u64().map_err(e)?;
        let lost_sq = r.f64s(Some(1)).map_err(e)?[0];
        let m = r.u64().map_err(e)?;
        if m > 1 << 20 {
            return Err(bad(format!("{m} pairs")));
        }
        let mut backlog = Vec::with_capacity(m as usize);
        for _ in 0..m {
            let seq = r.u64().map_err(e)?;
            let scale = r.f32s(Some(1)).map_err(e)?[0];
            let u = r.f32s(Some(j)).map_err(e)?;
            let v = match r.u64().map_err(e)? {
                0 => HeldV::Dense(r.f32s(Some(d)).map_err(e)?),
                1 => {
                    let raw = r.bytes().map_err(e)?;
                    let idx: Vec<u32> = raw
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                        .collect();
                    let v = r.f32s(Some(idx.len())).map_err(e)?;
                    if raw.len() % 4 != 0 || idx.iter().any(|&i| i as usize >= d) {
                        return Err(bad(format!("a sparse v outside 0..{d}")));
                    }
                    HeldV::Sparse(idx, v)
                }
                k => return Err(bad(format!("unknown kind of v {k}"))),
            };
            let h = Held { u, v, scale, seq };
            if !h.norm_sq().is_finite() {
                return Err(bad("a pair is not finite".into()));
            }
            backlog.push(h);
        }
        r.finish().map_err(e)?;
        if !lost_sq.is_finite() {
            return Err(bad("not finite".into()));
        }
        self.shape = (j, d);
        self.backlog = backlog;
        self.next_seq = next_seq;
        self.lost_sq = lost_sq;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use ndarray::Array2;

    use rand::Rng;

    use super::*;
    use crate::PeerId;

    /// `k` dense pairs of `j × d`; pair `p`'s u is scaled by `norms[p]`.
    fn batch(j: usize, d: usize, norms: &[f32], clock: u64, seed: u64) -> FactorBatch {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut u = Vec::new();
        let mut v = Vec::new();
        for &n in norms {
            u.extend((0..j).map(|_| n * rng.random_range(-1.0f32..1.0)));
            v.extend((0..d).map(|_| rng.random_range(-1.0f32..1.0)));
        }
        FactorBatch {
            origin: PeerId(0),
            clock,
            scale: -0.1,
            j,
            d,
            u,
            v: VFactors::Dense(v),
        }
    }

    fn dense(fb: &FactorBatch) -> Array2<f64> {
        let mut m = Array2::zeros((fb.j, fb.d));
        let VFactors::Dense(v) = &fb.v else {
            unreachable!()
        };
        for p in 0..fb.len() {
            for r in 0..fb.j {
                for c in 0..fb.d {
                    m[(r, c)] += f64::from(fb.scale)
                        * f64::from(fb.u_row(p)[r])
                        * f64::from(v[p * fb.d + c]);
                }
            }
        }
        m
    }

    fn prio(policy: Policy, budget: Budget) -> Prioritizer {
        Prioritizer::new(Prioritize {
            policy,
            budget,
            seed: 7,
        })
    }

    #[test]
    fn a_batch_within_the_budget_goes_as_it_is() {
        let w = Array2::<f32>::zeros((3, 4));
        for policy in Policy::ALL {
            let mut p = prio(policy, Budget::Fraction(1.0));
            let fb = batch(3, 4, &[1.0, 2.0, 3.0], 0, 1);
            let (out, stats) = p.select(fb.clone(), w.view());
            assert_eq!(out, fb, "{policy:?}");
            assert_eq!((stats.pairs_out, stats.backlog), (3, 0));
        }
    }

    /// A measured budget: everything until the link is measured; then the rate times the
    /// clock's work over a pair's bytes, over the last clocks' window, so a slower link
    /// allows fewer pairs within `RATE_WINDOW` clocks and an idle one measures nothing.
    #[test]
    fn a_measured_budget_is_what_the_measured_link_carries_in_the_clocks_work() {
        let w = Array2::<f32>::zeros((3, 4));
        let mut p = prio(Policy::Magnitude, Budget::Measured);
        let norms = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        // Nothing measured: the batch as it is.
        let fb = batch(3, 4, &norms, 0, 1);
        p.set_work(0.01);
        let (out, stats) = p.select(fb.clone(), w.view());
        assert_eq!((out, stats.allowed), (fb, 8));
        // 100 bytes a pair; 1e4 bytes through in 0.1 s busy: 1e5 B/s, 1e3 bytes in 10 ms.
        p.sent(800, 8);
        p.observe_link(10_000, 0.1);
        p.set_work(0.01);
        let (out, stats) = p.select(batch(3, 4, &norms, 1, 2), w.view());
        assert_eq!((out.len(), stats.allowed, stats.backlog), (8, 10, 0));
        assert_eq!(p.link_rate(), Some(1e5));
        // The link gets 4x slower: the window's rate falls clock by clock to a quarter.
        let mut allowed = Vec::new();
        for c in 2..8 {
            p.observe_link(10_000, 0.4);
            p.set_work(0.01);
            let (_, stats) = p.select(batch(3, 4, &norms, c, c), w.view());
            allowed.push(stats.allowed);
        }
        // 2e4 B in 0.5 s, 3e4 in 0.9, 4e4 in 1.3, then the first clock leaves the window.
        assert_eq!(allowed, [4, 3, 3, 2, 2, 2]);
        assert!((p.link_rate().unwrap() - 2.5e4).abs() < 1e-6);
        // Idle clocks (nothing written, or nothing waited on) measure nothing.
        p.observe_link(0, 0.0);
        p.observe_link(500, 0.0);
        p.set_work(0.01);
        let (_, stats) = p.select(batch(3, 4, &norms, 8, 8), w.view());
        assert_eq!(stats.allowed, 2);
        // A clock twice as long allows twice the pairs; never fewer than one.
        p.set_work(0.02);
        assert_eq!(p.allowed(8), 5);
        p.set_work(1e-9);
        assert_eq!(p.allowed(8), 1);
    }

    #[test]
    fn magnitude_sends_the_largest_pairs_and_round_robin_the_oldest() {
        let w = Array2::<f32>::zeros((5, 6));
        let norms = [1.0, 8.0, 0.5, 4.0];
        let mut p = prio(Policy::Magnitude, Budget::Pairs(2));
        let fb = batch(5, 6, &norms, 0, 3);
        let (out, stats) = p.select(fb.clone(), w.view());
        assert_eq!(
            (stats.pairs_out, stats.backlog, stats.merged_pairs),
            (2, 2, 0)
        );
        // Pairs 1 and 3, in their order.
        assert_eq!(out.u_row(0), fb.u_row(1));
        assert_eq!(out.u_row(1), fb.u_row(3));
        // Round robin: the first two, then the other two before anything new.
        let mut p = prio(Policy::RoundRobin, Budget::Pairs(2));
        let (out, _) = p.select(fb.clone(), w.view());
        assert_eq!(out.u_row(0), fb.u_row(0));
        let (out, _) = p.select(batch(5, 6, &norms, 1, 4), w.view());
        assert_eq!(out.u_row(0), fb.u_row(2));
        assert_eq!(out.u_row(1), fb.u_row(3));
    }

    /// `top_sq` is the energy of the batch's budget-many largest pairs, whatever the policy
    /// and the backlog: all of it within the budget, its share otherwise.
    #[test]
    fn top_sq_is_the_energy_of_the_budgets_largest_pairs() {
        let w = Array2::<f32>::zeros((5, 6));
        let norms = [1.0, 8.0, 0.5, 4.0];
        let fb = batch(5, 6, &norms, 0, 3);
        let sq: Vec<f64> = (0..4).map(|p| pair_sq(&fb, p)).collect();
        let total: f64 = sq.iter().sum();
        for policy in Policy::ALL {
            let (_, all) = prio(policy, Budget::Pairs(4)).select(fb.clone(), w.view());
            assert_eq!(all.top_sq, all.computed_sq, "{policy:?}");
            let mut p = prio(policy, Budget::Pairs(2));
            let (_, two) = p.select(fb.clone(), w.view());
            assert!((two.computed_sq - total).abs() <= 1e-12 * total);
            assert!(
                (two.top_sq - (sq[1] + sq[3])).abs() <= 1e-12 * total,
                "{policy:?}"
            );
            // With a backlog the batch's own pairs still decide.
            let (_, next) = p.select(fb.clone(), w.view());
            assert!(
                (next.top_sq - two.top_sq).abs() <= 1e-12 * total,
                "{policy:?}"
            );
        }
    }

    /// Relative: a pair landing where W is large counts for less than the same pair
    /// where W is small.
    #[test]
    fn relative_prefers_updates_where_w_is_small() {
        let (j, d) = (4, 4);
        let mut w = Array2::<f32>::ones((j, d));
        for c in 0..2 {
            for r in 0..j {
                w[(r, c)] = 100.0;
            }
        }
        let fb = FactorBatch {
            origin: PeerId(0),
            clock: 0,
            scale: -1.0,
            j,
            d,
            u: vec![1.0; 2 * j],
            // Pair 0 hits the large columns with a larger norm; pair 1 the small ones.
            v: VFactors::Sparse {
                indptr: vec![0, 2, 4],
                indices: vec![0, 1, 2, 3],
                values: vec![2.0, 2.0, 1.0, 1.0],
            },
        };
        let mut rel = prio(Policy::Relative, Budget::Pairs(1));
        let (out, _) = rel.select(fb.clone(), w.view());
        let VFactors::Sparse { indices, .. } = &out.v else {
            unreachable!()
        };
        assert_eq!(indices, &[2, 3]);
        let mut mag = prio(Policy::Magnitude, Budget::Pairs(1));
        let (out, _) = mag.select(fb, w.view());
        let VFactors::Sparse { indices, .. } = &out.v else {
            unreachable!()
        };
        assert_eq!(indices, &[0, 1]);
    }

    /// What was computed = what was sent + the backlog + what bounding the backlog lost,
    /// for every policy, under a changing scale (a schedule); with a budget that keeps up
    /// on average nothing is lost, and a merged backlog is the best of its rank.
    #[test]
    fn nothing_is_lost_but_what_the_bound_leaves_out() {
        let (j, d) = (6, 5);
        let w = Array2::<f32>::from_shape_fn((j, d), |(r, c)| (r * d + c) as f32 * 0.1);
        for policy in Policy::ALL {
            for (budget, merges) in [(Budget::Pairs(3), false), (Budget::Fraction(0.5), true)] {
                let mut p = prio(policy, budget);
                let mut computed = Array2::<f64>::zeros((j, d));
                let mut sent = Array2::<f64>::zeros((j, d));
                let (mut merged, mut lost_norms) = (0, 0.0);
                for clock in 0..12 {
                    // Three pairs one clock, two the next: 2.5 per clock on average.
                    let norms: &[f32] = if clock % 2 == 0 {
                        &[1.0, 0.2, 3.0]
                    } else {
                        &[0.7, 2.0]
                    };
                    let mut fb = batch(j, d, norms, clock, 100 + clock);
                    fb.scale = -0.1 / (1.0 + clock as f32);
                    computed += &dense(&fb);
                    let (out, stats) = p.select(fb, w.view());
                    assert!(stats.pairs_out <= budget.pairs(norms.len()));
                    assert!(p.backlog() <= norms.len().max(budget.pairs(norms.len())));
                    merged += stats.merged_pairs;
                    lost_norms += stats.lost_sq.sqrt();
                    sent += &dense(&out);
                }
                let missing = &computed - &sent - p.backlog_dense(j, d);
                let err = missing.iter().map(|x| x * x).sum::<f64>().sqrt();
                let scale = computed.iter().map(|x| x * x).sum::<f64>().sqrt();
                assert_eq!(merged > 0, merges, "{policy:?} {budget:?}");
                assert!(
                    err <= lost_norms + 1e-5 * scale,
                    "{policy:?} {budget:?}: {err} missing, {lost_norms} lost, of {scale}"
                );
                if !merges {
                    assert_eq!(p.lost_sq(), 0.0);
                }
            }
        }
    }

    #[test]
    fn random_is_the_same_for_the_same_seed_and_differs_by_clock() {
        let w = Array2::<f32>::zeros((4, 4));
        let norms = [1.0; 8];
        let pick = |seed: u64, clock: u64| {
            let mut p = Prioritizer::new(Prioritize {
                policy: Policy::Random,
                budget: Budget::Pairs(3),
                seed,
            });
            p.select(batch(4, 4, &norms, clock, 9), w.view()).0.u
        };
        assert_eq!(pick(1, 0), pick(1, 0));
        assert!((1..6).any(|c| pick(1, c) != pick(1, 0)));
    }

    #[test]
    fn the_backlog_survives_a_checkpoint_and_foreign_bytes_are_refused() {
        let w = Array2::<f32>::zeros((4, 5));
        let mut p = prio(Policy::Magnitude, Budget::Pairs(1));
        p.select(batch(4, 5, &[1.0, 2.0, 3.0], 0, 1), w.view());
        let sparse = FactorBatch {
            origin: PeerId(0),
            clock: 1,
            scale: -0.5,
            j: 4,
            d: 5,
            u: vec![1.0; 8],
            v: VFactors::Sparse {
                indptr: vec![0, 1, 3],
                indices: vec![4, 0, 2],
                values: vec![1.0, 2.0, 3.0],
            },
        };
        let mut q = prio(Policy::Magnitude, Budget::Pairs(1));
        q.select(sparse.clone(), w.view());
        for p in [p, q] {
            let bytes = p.save_state();
            let mut back = prio(Policy::Magnitude, Budget::Pairs(1));
            back.restore_state(&bytes, 4, 5).unwrap();
            assert_eq!(back.backlog, p.backlog);
            assert_eq!(back.next_seq, p.next_seq);
            let err = back.restore_state(&bytes, 4, 6).unwrap_err();
            assert!(err.to_string().contains("prioritizer"), "{err}");
            let err = back
                .restore_state(&bytes[..bytes.len() - 3], 4, 5)
                .unwrap_err();
            assert!(err.to_string().contains("truncated"), "{err}");
        }
        let mut c = crate::compress::Compressor::new(1);
        c.compress(batch(4, 5, &[1.0, 2.0], 0, 1));
        let err = prio(Policy::Random, Budget::Pairs(1))
            .restore_state(&c.save_state(), 4, 5)
            .unwrap_err();
        assert!(err.to_string().contains("--compress"), "{err}");
    }
}
