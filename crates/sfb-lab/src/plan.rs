//! `sfb plan`: the predicted time per clock of each way to synchronize one J × D matrix
//! over P nodes under BSP — SFB full broadcast, SFB partial broadcast at the best Q, the
//! FMS parameter server (factor push and dense push), and a ring allreduce of the dense
//! gradient — and which is fastest (Poseidon's idea: choose SFB or a parameter server per
//! matrix by predicted cost).
//!
//! The prices are the simulator's ([`sfb_harness::sim`]): work costs [`Costs::of`] of the
//! costs `sfb sim` would run with (the same [`Counts`], rates,
//! calibration and `--colocate` share), frames are [`wire::encoded_len_with`] of real
//! messages at the plan's shapes, and the network is the simulator's [`Nic`] (egress and
//! ingress FIFOs, cut-through, the link delay in between, transport CPU per frame). What
//! the plan adds is the closed form of one steady-state BSP clock on that model (the
//! private `sfb_clock`, `fms_clock` and `ring_clock` document each), so it answers at any P in microseconds
//! where the simulator runs every engine. Model: MLR on dense features (the counts of
//! [`ModelSpec::Mlr`](sfb_models::ModelSpec::Mlr) with `nnz = D`); evaluation time is not
//! part of a clock.
//!
//! # Example
//! ```
//! use sfb_lab::plan::{Setup, Strategy, plan};
//! let setup = Setup { peers: 8, j: 1024, d: 1024, batch: 16, ..Setup::default() };
//! let p = plan(&setup)?;
//! let full = p.estimate(Strategy::SfbFull).unwrap();
//! // Full broadcast sends K(J + D) floats to each of the P − 1 others.
//! assert!(full.bytes_sent >= 7 * 16 * 2048 * 4);
//! println!("{p}");
//! # Ok::<(), sfb_harness::Error>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ndarray::Array2;
use serde::Serialize;
use sfb_core::wire::{self, Dtype, Message};
use sfb_core::{FactorBatch, PeerId, VFactors, Work};
use sfb_net::virtual_time::{Costs, Nic};

use sfb_harness::sim::{Counts, Shapes, SimOptions};
use sfb_harness::{Error, Result};

/// What to plan for: the matrix, the mini-batch, the cluster and its network and machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    /// Nodes P (SFB peers, FMS clients, ring members). Default 8.
    pub peers: usize,
    /// Rows J of W. Default 1024.
    pub j: usize,
    /// Columns D of W. Default 1024.
    pub d: usize,
    /// Mini-batch K per node per clock. Default 16.
    pub batch: usize,
    /// The network and machine, exactly as `sfb sim` takes them: `egress` (default 10
    /// Gbit/s), `ingress`, `latency_s`, `costs` (`model` or `calibrate`: measure the GEMM
    /// and copy rates here at J, D, K), `flops`, `mem_bw`, `compute_per_sample_s`,
    /// `colocate`, `transport_cpu`. `jitter_s` and `evaluate_s` play no part.
    pub sim: SimOptions,
    /// Out-degrees Q to price explicitly, besides the best one. Default none.
    pub qs: Vec<usize>,
    /// Whether `sim`'s rates were measured here ([`calibrate`] sets it). Default false.
    pub calibrated: bool,
    /// How many kernels [`calibrate`] ran at once (1: alone; more under `colocate`, see
    /// [`calibration_workers`](sfb_harness::sim::calibration_workers)). Default 0 (not calibrated).
    pub calibration_workers: usize,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            peers: 8,
            j: 1024,
            d: 1024,
            batch: 16,
            sim: SimOptions::default(),
            qs: Vec::new(),
            calibrated: false,
            calibration_workers: 0,
        }
    }
}

impl Setup {
    /// Checks the setup before anything is priced.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming the field (`peers`, `j`, `d`, `batch`, `q`, or a
    /// `sim.*` field).
    pub fn validate(&self) -> Result<()> {
        for (field, v) in [
            ("peers", self.peers),
            ("j", self.j),
            ("d", self.d),
            ("batch", self.batch),
        ] {
            if v == 0 {
                return Err(Error::OutOfRange {
                    field,
                    expected: "at least 1",
                    got: 0.0,
                });
            }
        }
        if let Some(&q) = self.qs.iter().find(|&&q| q == 0 || q >= self.peers) {
            return Err(Error::OutOfRange {
                field: "q",
                expected: "in 1..=peers-1",
                got: q as f64,
            });
        }
        if let Some(r) = self.sim.egress
            && !(r.0.is_finite() && r.0 > 0.0)
        {
            return Err(Error::OutOfRange {
                field: "sim.egress",
                expected: "a positive rate",
                got: r.0,
            });
        }
        self.sim.validate()
    }
}

/// A way to keep P replicas of W in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Strategy {
    /// SFB, every peer sends its K pairs to the P − 1 others.
    SfbFull,
    /// SFB, every peer sends its K pairs to Q out-neighbours.
    SfbPartial,
    /// Parameter server: clients push their K pairs, the server applies them and sends W
    /// to every client (`sfb run --backend fms`, the default push).
    FmsFactors,
    /// Parameter server: clients push a dense ΔW (J × D), the server adds the P of them
    /// and sends W to every client (`--fms-push dense`, the paper's FMS).
    FmsDense,
    /// Ring allreduce of the dense gradient (reduce-scatter then allgather, 2(P − 1)
    /// steps of J·D/P floats). Not a backend of sfb: priced for comparison only.
    RingAllreduce,
}

impl Strategy {
    /// The name printed and serialized.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::SfbFull => "sfb-full",
            Strategy::SfbPartial => "sfb-partial",
            Strategy::FmsFactors => "fms-factors",
            Strategy::FmsDense => "fms-dense",
            Strategy::RingAllreduce => "ring-allreduce",
        }
    }

    /// Whether every replica gets every update each clock (partial broadcast's do not).
    pub fn consistent(self) -> bool {
        self != Strategy::SfbPartial
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The predicted cost of one BSP clock of one strategy, and its terms. Bytes are exact
/// encoded frame sizes; times are seconds on the simulator's model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The strategy.
    pub strategy: Strategy,
    /// SFB: out-degree Q (P − 1 for full broadcast).
    pub q: Option<usize>,
    /// Bytes of one frame a node (an FMS client, a ring member) sends.
    pub frame_bytes: u64,
    /// Bytes a node sends per clock.
    pub bytes_sent: u64,
    /// Bytes a node receives per clock.
    pub bytes_received: u64,
    /// FMS: bytes the server sends per clock (P copies of W).
    pub server_bytes_sent: Option<u64>,
    /// FMS: bytes the server receives per clock.
    pub server_bytes_received: Option<u64>,
    /// Serialization at the busiest egress NIC (FMS: the server's) per clock.
    pub egress_s: f64,
    /// Serialization at the busiest ingress NIC per clock.
    pub ingress_s: f64,
    /// Transport CPU on the critical path (frames sent and taken by the busiest node).
    pub transport_cpu_s: f64,
    /// Link delays on the critical path (one per hop: SFB 1, FMS 2, ring 2(P − 1)).
    pub latency_s: f64,
    /// `compute_sv` of the K samples (plus building the dense ΔW where one is sent).
    pub compute_s: f64,
    /// Flops of reconstruction and apply on the critical path, as the cost model counts
    /// them (SFB: (Q + 1)·K pairs of 2·J·D; FMS factors: the server's P·K pairs; dense:
    /// one flop per element of each dense matrix added or built).
    pub apply_flops: f64,
    /// Time of reconstruction and apply on the critical path (including the pass over W
    /// and, for FMS clients, checking the W received).
    pub apply_s: f64,
    /// Predicted time per clock.
    pub clock_s: f64,
    /// What bounds the clock: `compute`, `network` or `transport cpu`.
    pub bound: &'static str,
}

/// The exact frame sizes at the plan's shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Frames {
    /// One peer's K pairs (`Message::Factors`).
    pub factors: u64,
    /// The gossip mode's consensus message of one pair (`Message::Mix`): its header and
    /// one pair's bytes; [`Frames::mix`] prices `R` pairs.
    pub mix_one: u64,
    /// One more pair of a consensus message.
    pub mix_pair: u64,
    /// W from the FMS server (`Message::Params`).
    pub params: u64,
    /// A dense ΔW (`Message::Delta`).
    pub delta: u64,
    /// One ring step: ⌈J/P⌉ rows of ΔW framed as a `Message::Delta`.
    pub ring_chunk: u64,
}

/// A plan: the inputs as priced, every estimate, and the recommendation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Nodes P.
    pub peers: usize,
    /// Rows J.
    pub j: usize,
    /// Columns D.
    pub d: usize,
    /// Mini-batch K.
    pub batch: usize,
    /// NIC egress rate, bytes/s (absent: unlimited).
    pub egress_bytes_per_s: Option<f64>,
    /// NIC ingress rate, bytes/s (absent: unlimited).
    pub ingress_bytes_per_s: Option<f64>,
    /// One-way link delay, seconds.
    pub latency_s: f64,
    /// Transport CPU per node, bytes/s of its share of the host (absent: free).
    pub transport_cpu_bytes_per_s: Option<f64>,
    /// How much slower every node's work is on a shared host (`colocate`).
    pub host_share: f64,
    /// GEMM rate used, flop/s.
    pub flops: f64,
    /// Memory bandwidth used, bytes/s.
    pub mem_bw: f64,
    /// Whether the rates were measured here.
    pub calibrated: bool,
    /// How many kernels ran at once when they were measured (0: not measured here; more
    /// than 1: as co-located nodes, the rates then being per-core equivalents).
    pub calibration_workers: usize,
    /// Seconds of `compute_sv` per sample, as priced (after the host share).
    pub compute_per_sample_s: f64,
    /// Exact frame sizes.
    pub frames: Frames,
    /// SFB full, SFB partial at the best Q, FMS (factors, dense), ring; then the Q asked
    /// for.
    pub estimates: Vec<Estimate>,
    /// The Q in 1..P − 1 with the least time per clock (ties: the largest such Q).
    pub best_q: Option<usize>,
    /// The largest Q whose clock is within 10% of Q = 1's: how much broadcast is nearly
    /// free per clock.
    pub q_within_10pct: Option<usize>,
    /// The fastest per clock.
    pub recommended: Strategy,
    /// Its Q, for SFB.
    pub recommended_q: Option<usize>,
    /// The fastest per clock among the strategies that keep every replica up to date.
    pub fastest_consistent: Strategy,
    /// What the figures do and do not say.
    pub notes: Vec<String>,
}

impl Plan {
    /// The first estimate of `strategy` (for `SfbPartial`: the one at the best Q).
    pub fn estimate(&self, strategy: Strategy) -> Option<&Estimate> {
        self.estimates.iter().find(|e| e.strategy == strategy)
    }
}

/// The prices of one setup: work costs, NIC, frame sizes.
#[derive(Debug, Clone, Copy)]
struct Prices {
    p: usize,
    j: usize,
    d: usize,
    k: usize,
    costs: Costs,
    nic: Nic,
    latency: f64,
    pair_flops: f64,
    frames: Frames,
    /// Nodes share a host's cores (their work and transport CPU compete for them).
    shared: bool,
}

impl Prices {
    fn work(&self, work: Work) -> f64 {
        self.costs.of(work).as_secs_f64()
    }
    fn compute(&self) -> f64 {
        self.work(Work::Compute {
            peer: PeerId(0),
            clock: 0,
            samples: self.k,
            started: Duration::ZERO,
        })
    }
    fn apply(&self, pairs: usize) -> f64 {
        self.work(Work::Apply {
            pairs,
            j: self.j,
            d: self.d,
        })
    }
    fn dense(&self, matrices: usize, rows: usize) -> f64 {
        self.work(Work::Dense {
            matrices,
            j: rows,
            d: self.d,
        })
    }
    fn check_w(&self) -> f64 {
        self.work(Work::CheckW {
            j: self.j,
            d: self.d,
        })
    }
    /// Seconds to move `bytes` at `rate` (zero when unlimited).
    fn at(bytes: u64, rate: Option<f64>) -> f64 {
        rate.map_or(0.0, |r| bytes as f64 / r)
    }
    /// Transport CPU of one frame at one end.
    fn cpu(&self, bytes: u64) -> f64 {
        Self::at(bytes, self.nic.cpu) + self.nic.frame_cpu.unwrap_or(0.0)
    }
    /// A frame's time on the wire: cut-through, so the slower of egress and ingress.
    fn wire(&self, bytes: u64) -> f64 {
        Self::at(bytes, self.nic.egress).max(Self::at(bytes, self.nic.ingress))
    }
}

/// The bound of a clock: which of its parts is largest.
fn bound(compute: f64, network: f64, cpu: f64) -> &'static str {
    if cpu >= network && cpu >= compute {
        "transport cpu"
    } else if network >= compute {
        "network"
    } else {
        "compute"
    }
}

/// Seconds from the end of a node's compute until it has taken the last of the frames it
/// exchanges with `n` out- and `n` in-neighbours, when it sends `n` frames of each size of
/// `f` in turn (the gossip mode's consensus messages, then the factors; or the factors
/// alone) and each of `n` others sends it the same, all starting together (SFB under BSP:
/// the circulant order staggers the frames so each ingress takes one at a time, the `i`-th
/// as its sender sends its `i`-th). Three stages per frame: the sender's transport CPU `x`,
/// the wire `w` (cut-through: the slower NIC), the receiver's transport CPU `y`, which can
/// only start once the node's own sends are done. In max-plus form, frame by frame: its
/// encoding ends `x` after the previous one's; it leaves the wire `w` after the later of
/// that and the previous frame leaving; it is taken `y` after the latest of its arrival
/// (`δ` later), the previous take and the node's own last send. With one size this is
/// `max(n·x + n·y, x + w + δ + n·y, x + w + (n − 1)·max(x, w) + δ + y)`.
fn exchange(pr: &Prices, n: usize, f: &[u64]) -> f64 {
    let frames: Vec<u64> = f.iter().flat_map(|&b| std::iter::repeat_n(b, n)).collect();
    if frames.is_empty() {
        return 0.0;
    }
    let sends: f64 = frames.iter().map(|&b| pr.cpu(b)).sum();
    let (mut encoded, mut wired, mut taken) = (0.0f64, 0.0f64, 0.0f64);
    for &b in &frames {
        let (x, w, y) = (pr.cpu(b), pr.wire(b), pr.cpu(b));
        encoded += x;
        wired = wired.max(encoded) + w;
        taken = taken.max(wired + pr.latency).max(sends) + y;
    }
    taken
}

/// Partial broadcast is priced at every out-degree up to this one, then on a grid.
const EVERY_Q_UP_TO: usize = 1024;

/// The out-degrees of partial broadcast a plan prices at `p` peers: every Q in
/// `1..=p−2` up to [`EVERY_Q_UP_TO`], then every 5 % (rounded up) and `p − 2`, so that a
/// plan at 10,000 peers prices about 1,200 schedules instead of 10,000.
fn partial_qs(p: usize) -> Vec<usize> {
    let last = p.saturating_sub(2);
    let mut qs: Vec<usize> = (1..=last.min(EVERY_Q_UP_TO)).collect();
    let mut q = EVERY_Q_UP_TO;
    while q < last {
        q = (q + q.div_ceil(20)).min(last);
        qs.push(q);
    }
    qs
}

/// The steady clock of the gossip mode under BSP, by a small schedule of one peer's three
/// resources (every peer alike): a clock starts when the previous one's factors are
/// taken and its consensus step is done; the node applies and computes (`work`), queues
/// its `q` factor frames, runs the consensus step (`consensus`), queues its `q` consensus
/// frames. Its transport thread encodes each frame it sends (`x`) and takes each frame it
/// receives (`y`), one job at a time in the order they become ready; its egress NIC sends
/// frames in order (`w` each). The `i`-th frame of each kind from its in-neighbours
/// arrives `δ` after its own `i`-th leaves (the circulant stagger [`exchange`] assumes).
/// Iterated from an idle start until the period settles.
fn gossip_period(pr: &Prices, q: usize, (f, mix): (u64, u64), work: f64, consensus: f64) -> f64 {
    #[derive(Clone, Copy, PartialEq)]
    enum Job {
        Send(u64),
        Take { factors: bool, bytes: u64 },
    }
    /// A job in the transport's queue: first by readiness, then by arrival in the queue
    /// (`seq`), so that ties keep queue order.
    #[derive(Clone, Copy)]
    struct Queued {
        ready: f64,
        seq: u64,
        job: Job,
    }
    impl PartialEq for Queued {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other).is_eq()
        }
    }
    impl Eq for Queued {}
    impl PartialOrd for Queued {
        fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Queued {
        // Reversed: `BinaryHeap` pops the largest.
        fn cmp(&self, other: &Self) -> std::cmp::Ordering {
            other
                .ready
                .total_cmp(&self.ready)
                .then(other.seq.cmp(&self.seq))
        }
    }
    let (mut start, mut transport, mut egress, mut period) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    // Consensus frames still to be taken: they may be in the next clock's way.
    let mut carried: Vec<(f64, Job)> = Vec::new();
    let mut jobs = std::collections::BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |jobs: &mut std::collections::BinaryHeap<Queued>, ready: f64, job: Job| {
        jobs.push(Queued { ready, seq, job });
        seq += 1;
    };
    for _ in 0..64 {
        let computed = start + work;
        let mixed = computed + consensus;
        for (ready, job) in std::mem::take(&mut carried) {
            push(&mut jobs, ready, job);
        }
        for _ in 0..q {
            push(&mut jobs, computed, Job::Send(f));
        }
        for _ in 0..q {
            push(&mut jobs, mixed, Job::Send(mix));
        }
        let mut factors_taken = computed;
        // FIFO by readiness; ties keep queue order.
        while let Some(Queued { ready, job, .. }) = jobs.pop() {
            match job {
                Job::Send(bytes) => {
                    transport = transport.max(ready) + pr.cpu(bytes);
                    egress = egress.max(transport) + pr.wire(bytes);
                    let arrives = egress + pr.latency;
                    if bytes == f && ready == computed {
                        push(
                            &mut jobs,
                            arrives,
                            Job::Take {
                                factors: true,
                                bytes,
                            },
                        );
                    } else {
                        carried.push((
                            arrives,
                            Job::Take {
                                factors: false,
                                bytes,
                            },
                        ));
                    }
                }
                Job::Take { factors, bytes } => {
                    transport = transport.max(ready) + pr.cpu(bytes);
                    if factors {
                        factors_taken = factors_taken.max(transport);
                    }
                }
            }
        }
        let next = mixed.max(factors_taken);
        let step = next - start;
        let settled = (step - period).abs() <= 1e-12 * step.max(1e-30);
        period = step;
        start = next;
        if settled {
            break;
        }
    }
    if pr.shared {
        // On a shared host the transport's CPU and the consensus step overlap nothing:
        // every node's cores are busy with someone's work.
        let cpu = 2.0 * q as f64 * (pr.cpu(f) + pr.cpu(mix));
        period = period.max(work + consensus + cpu);
    }
    period
}

impl Frames {
    /// A consensus message of `r ≥ 1` pairs.
    pub fn mix(&self, r: usize) -> u64 {
        self.mix_one + (r.max(1) as u64 - 1) * self.mix_pair
    }
}

/// One BSP clock of an SFB peer with out- and in-degree `q`: `compute_sv` of K samples,
/// the exchange of its batch ([`exchange`]), then one apply of its own and the `q`
/// batches received ((q + 1)·K pairs and a pass over W). Partial broadcast (`q < P − 1`)
/// is the default gossip mode's ([`sfb_core::gossip`], `R` pairs a consensus message by
/// [`sfb_core::gossip::Config::default_rank_for`], [`Frames::mix`]): a consensus message
/// after the factors on every edge, the `q·R` pairs received folded with the apply, and
/// the consensus step (`q + 2` passes over W) and the power iteration (`3R` pairs' flops)
/// while the factors are on the wire — as the engine charges them.
fn sfb_clock(pr: &Prices, q: usize) -> Estimate {
    let f = pr.frames.factors;
    let gossip = q + 1 < pr.p && q > 0;
    let r = if gossip {
        sfb_core::gossip::Config::default_rank_for(pr.k, pr.p, q)
    } else {
        0
    };
    let mix = pr.frames.mix(r);
    let frames: &[u64] = if gossip { &[f, mix] } else { &[f] };
    let compute = pr.compute();
    let net = exchange(pr, q, &[f]);
    let pairs = (q + 1) * pr.k;
    let apply = pr.apply(pairs + q * r);
    // The consensus step runs while the factors are on the wire.
    let consensus = if gossip {
        pr.dense(q + 2, pr.j) + pr.apply(3 * r)
    } else {
        0.0
    };
    let clock = if gossip {
        gossip_period(pr, q, (f, mix), compute + apply, consensus)
    } else {
        compute + net + apply
    };
    let per_edge: u64 = frames.iter().sum();
    let bytes = q as u64 * per_edge;
    let cpu = 2.0 * q as f64 * frames.iter().map(|&b| pr.cpu(b)).sum::<f64>();
    Estimate {
        strategy: if q + 1 == pr.p {
            Strategy::SfbFull
        } else {
            Strategy::SfbPartial
        },
        q: Some(q),
        frame_bytes: f,
        bytes_sent: bytes,
        bytes_received: bytes,
        server_bytes_sent: None,
        server_bytes_received: None,
        egress_s: Prices::at(bytes, pr.nic.egress),
        ingress_s: Prices::at(bytes, pr.nic.ingress),
        transport_cpu_s: cpu,
        latency_s: if q > 0 { pr.latency } else { 0.0 },
        compute_s: compute,
        apply_flops: pairs as f64 * pr.pair_flops,
        apply_s: apply + consensus,
        clock_s: clock,
        bound: bound(compute + apply + consensus, net - cpu.min(net), cpu),
    }
}

/// One BSP clock of FMS with P clients. The server sends W (`b` bytes) to clients 0..P−1
/// in order through its egress; client `c` has it at `a_c = x_b + w_b + δ + c·max(x_b,
/// w_b)`, takes it (`y_b`), checks it, computes (and for dense push builds ΔW), sends its
/// update (`u` bytes, `x_u`), which reaches the server `w_u + δ` later, one at a time
/// through its ingress (`u/ingress` apart at least). The server takes the P updates
/// (`y_u` each, after its own sends), applies them (factors: P·K pairs; dense: P dense
/// additions) and starts the next clock's sends. The clock is that cycle: the latest of
/// the server's CPU (`P·x_b + P·y_u`), the first update arriving then the takes after it,
/// and the last update arriving; plus the server's apply.
fn fms_clock(pr: &Prices, dense: bool) -> Estimate {
    let p = pr.p as f64;
    let b = pr.frames.params;
    let u = if dense {
        pr.frames.delta
    } else {
        pr.frames.factors
    };
    let (xb, wb, yb) = (pr.cpu(b), pr.wire(b), pr.cpu(b));
    let (xu, wu, yu) = (pr.cpu(u), pr.wire(u), pr.cpu(u));
    let delta = pr.latency;
    let compute = pr.compute() + if dense { pr.dense(1, pr.j) } else { 0.0 };
    let check = pr.check_w();
    let client = yb + check + compute + xu;
    let first_w = xb + wb + delta;
    let last_w = first_w + (p - 1.0) * xb.max(wb);
    let first_up = first_w + client + wu + delta;
    let last_up =
        (last_w + client + wu + delta).max(first_up + (p - 1.0) * Prices::at(u, pr.nic.ingress));
    let taken = (p * xb + p * yu).max(first_up + p * yu).max(last_up + yu);
    let (server_apply, flops) = if dense {
        (pr.dense(pr.p, pr.j), p * (pr.j * pr.d) as f64)
    } else {
        (pr.apply(pr.p * pr.k), p * pr.k as f64 * pr.pair_flops)
    };
    let cpu = p * (xb + yu);
    let net = taken - compute - check;
    Estimate {
        strategy: if dense {
            Strategy::FmsDense
        } else {
            Strategy::FmsFactors
        },
        q: None,
        frame_bytes: u,
        bytes_sent: u,
        bytes_received: b,
        server_bytes_sent: Some(pr.p as u64 * b),
        server_bytes_received: Some(pr.p as u64 * u),
        egress_s: Prices::at(pr.p as u64 * b, pr.nic.egress),
        ingress_s: Prices::at(pr.p as u64 * u, pr.nic.ingress),
        transport_cpu_s: cpu,
        latency_s: 2.0 * delta,
        compute_s: compute,
        apply_flops: flops + if dense { (pr.j * pr.d) as f64 } else { 0.0 },
        apply_s: server_apply + check,
        clock_s: taken + server_apply,
        bound: bound(compute + check + server_apply, net - cpu.min(net), cpu),
    }
}

/// One BSP clock of a ring allreduce of the dense gradient: each node computes its K
/// pairs, builds ΔW, then 2(P − 1) synchronous steps each send one chunk of ⌈J/P⌉ rows to
/// the next node and take one from the previous (`x + w + δ + y` a step); the P − 1
/// reduce-scatter steps also add the chunk received; finally ΔW is added to W.
fn ring_clock(pr: &Prices) -> Estimate {
    let c = pr.frames.ring_chunk;
    let steps = 2 * (pr.p - 1);
    let rows = pr.j.div_ceil(pr.p);
    let step = pr.cpu(c) + pr.wire(c) + pr.latency + pr.cpu(c);
    let compute = pr.compute() + pr.dense(1, pr.j);
    let reduce = (pr.p - 1) as f64 * pr.dense(1, rows);
    let apply = pr.dense(1, pr.j);
    let net = steps as f64 * step;
    let bytes = steps as u64 * c;
    let cpu = 2.0 * steps as f64 * pr.cpu(c);
    Estimate {
        strategy: Strategy::RingAllreduce,
        q: None,
        frame_bytes: c,
        bytes_sent: bytes,
        bytes_received: bytes,
        server_bytes_sent: None,
        server_bytes_received: None,
        egress_s: Prices::at(bytes, pr.nic.egress),
        ingress_s: Prices::at(bytes, pr.nic.ingress),
        transport_cpu_s: cpu,
        latency_s: steps as f64 * pr.latency,
        compute_s: compute,
        apply_flops: ((pr.p - 1) * rows * pr.d + 2 * pr.j * pr.d) as f64,
        apply_s: reduce + apply,
        clock_s: compute + net + reduce + apply,
        bound: bound(compute + reduce + apply, net - cpu.min(net), cpu),
    }
}

/// Exact frame sizes of real messages at the shapes (f32 factors). The matrices are
/// zeroed allocations the size of W (calloc'd, so untouched pages cost no memory).
fn frames(j: usize, d: usize, k: usize, p: usize) -> Frames {
    let batch = FactorBatch {
        origin: PeerId(0),
        clock: 1000,
        scale: -0.01,
        j,
        d,
        u: vec![0.0; k * j],
        v: VFactors::Dense(vec![0.0; k * d]),
    };
    let len = |m: &Message| wire::encoded_len_with(m, Dtype::F32) as u64;
    let mix = |r: usize| {
        len(&Message::Mix {
            batch: Arc::new(FactorBatch {
                scale: 1.0,
                u: vec![0.0; r * j],
                v: VFactors::Dense(vec![0.0; r * d]),
                ..batch.clone()
            }),
        })
    };
    let (mix_one, mix_pair) = (mix(1), mix(2) - mix(1));
    let factors = len(&Message::Factors {
        batch: Arc::new(batch),
        mean_iter_us: 100_000,
    });
    // Dense frames by their size alone: at the SFB paper's shapes (J = 325k, D = 20k) W
    // is 26 GB, which building to measure had aborted the planner.
    Frames {
        factors,
        mix_one,
        mix_pair,
        params: wire::dense_frame_len(false, 1000, j, d) as u64,
        delta: wire::dense_frame_len(true, 1000, j, d) as u64,
        ring_chunk: wire::dense_frame_len(true, 1000, j.div_ceil(p), d) as u64,
    }
}

/// Prices every strategy for `setup` and recommends the fastest per clock.
///
/// # Arguments
/// `setup`: the shapes, cluster and network and machine. With `setup.sim.costs =
/// calibrate` the GEMM and copy rates are measured here first ([`sfb_harness::sim::calibrate`]
/// at J, D, K; about a second); `compute_sv` per sample is the cost model's unless
/// `setup.sim.compute_per_sample_s` is given ([`calibrate_compute`] measures it).
///
/// # Returns
/// A [`Plan`]: the priced inputs, an [`Estimate`] per strategy and the recommendation.
///
/// # Errors
/// [`Setup::validate`]'s.
///
/// # Complexity
/// O(P) closed forms (every Q in 1..P − 1), plus building one factor batch and zeroed
/// J × D matrices for their exact frame sizes.
pub fn plan(setup: &Setup) -> Result<Plan> {
    setup.validate()?;
    let (p, j, d, k) = (setup.peers, setup.j, setup.d, setup.batch);
    let model = sfb_models::ModelSpec::Mlr;
    let shapes = Shapes {
        j,
        d,
        nnz: d as f64,
        sparse_v: false,
        eval_samples: 0,
    };
    // Co-located nodes at a fair share of the host (BSP: all busy at once).
    let share = setup.sim.share();
    let nic = setup.sim.nic(None, Dtype::F32);
    let nic = Nic {
        cpu: nic.cpu.map(|c| c / share),
        frame_cpu: nic.frame_cpu.map(|f| f * share),
        ..nic
    };
    let (costs, report) = sfb_harness::sim::plan_costs(&setup.sim, &model, shapes, k, nic);
    let costs = sfb_harness::sim::shared(costs, share);
    let counts = Counts::of(&model, shapes);
    let pr = Prices {
        p,
        j,
        d,
        k,
        costs,
        nic,
        latency: setup.sim.latency_s,
        pair_flops: counts.pair_flops,
        frames: frames(j, d, k, p),
        shared: share > 1.0,
    };
    let partial: Vec<Estimate> = partial_qs(p)
        .into_iter()
        .map(|q| sfb_clock(&pr, q))
        .collect();
    // The least time; ties (to a part in 10⁹) go to the larger Q.
    let best = partial.iter().fold(None::<&Estimate>, |b, e| match b {
        Some(b) if b.clock_s < e.clock_s * (1.0 - 1e-9) => Some(b),
        _ => Some(e),
    });
    let q_within_10pct = partial.first().map(|one| {
        partial
            .iter()
            .filter(|e| e.clock_s <= 1.1 * one.clock_s)
            .filter_map(|e| e.q)
            .max()
            .unwrap_or(1)
    });
    let mut estimates = vec![sfb_clock(&pr, p - 1)];
    estimates.extend(best.cloned());
    estimates.push(fms_clock(&pr, false));
    estimates.push(fms_clock(&pr, true));
    estimates.push(ring_clock(&pr));
    for &q in &setup.qs {
        estimates.push(sfb_clock(&pr, q));
    }
    let fastest = |only_consistent: bool| {
        estimates
            .iter()
            .filter(|e| !only_consistent || e.strategy.consistent())
            .min_by(|a, b| a.clock_s.total_cmp(&b.clock_s))
            .expect("full broadcast is always priced")
    };
    let rec = fastest(false);
    let (recommended, recommended_q) = (rec.strategy, rec.q);
    let fastest_consistent = fastest(true).strategy;
    let mut notes = vec![
        "per clock only: partial broadcast's replicas see other peers' updates late or \
         only through later factors, so it may need more clocks to reach the same \
         objective; its time per clock says nothing about convergence per clock"
            .to_string(),
        "BSP steady state on sfb sim's model (NIC FIFOs, cut-through, link delay, \
         transport CPU, work priced by its cost model); evaluation excluded"
            .to_string(),
        "ring allreduce is not a backend of sfb: priced on the same model for comparison, \
         not simulated"
            .to_string(),
    ];
    if p == 1 {
        notes.push("one node: nothing to synchronize".to_string());
    }
    if p.saturating_sub(2) > EVERY_Q_UP_TO {
        notes.push(format!(
            "partial broadcast priced at every Q up to {EVERY_Q_UP_TO}, then every 5 % up \
             to P − 2 (each Q's schedule costs O(Q log Q))"
        ));
    }
    Ok(Plan {
        peers: p,
        j,
        d,
        batch: k,
        egress_bytes_per_s: nic.egress,
        ingress_bytes_per_s: nic.ingress,
        latency_s: setup.sim.latency_s,
        transport_cpu_bytes_per_s: nic.cpu,
        host_share: setup.sim.share(),
        flops: report.flops,
        mem_bw: report.mem_bw,
        calibrated: report.calibrated || setup.calibrated,
        calibration_workers: setup.calibration_workers,
        compute_per_sample_s: costs.compute_per_sample,
        frames: pr.frames,
        estimates,
        best_q: best.and_then(|e| e.q),
        q_within_10pct,
        recommended,
        recommended_q,
        fastest_consistent,
        notes,
    })
}

/// Measures this machine at the setup's shapes and puts the rates in `setup.sim` (cost
/// model `model`, so the plan is priced by them and `sfb sim --flops F --mem-bw B
/// --compute-per-sample S` replays them): the GEMM rate is that of sfb's own apply
/// kernel ([`Replica::apply`](sfb_core::Replica::apply), on one thread) at full
/// broadcast's stacked rank P·K, the memory bandwidth is the copy of W, and `compute_sv`
/// per sample is MLR's (unless `setup.sim.compute_per_sample_s` is given). `sfb sim
/// --costs calibrate` times the same kernel, for its cost per extra pair between ranks K
/// and 4K ([`sfb_harness::sim::calibrate`]).
///
/// **Co-located nodes** (`colocate` NODES:CORES): alone, a kernel has the host's caches
/// and memory bus to itself, and NODES/CORES times its time underprices NODES processes
/// taking turns on CORES cores (measured here at J = D = 4096, 8 nodes on 2 cores: the
/// apply ran at 6.8e9 flop/s a node against 5.3e10 alone, 7.8× slower where the share
/// says 4×). So under `colocate` each kernel is timed with [`calibration_workers`](sfb_harness::sim::calibration_workers)
/// copies running at once on this host, each on its own data and one thread, and the
/// rates are stored as per-core equivalents (a node's measured rate times the share), so
/// that the plan's `× share`, and the simulator's host calendar when every node works at
/// once, give back exactly the time measured.
///
/// # Errors
/// [`calibrate_compute`]'s.
pub fn calibrate(setup: &mut Setup) -> Result<()> {
    let (j, d, k) = (setup.j.max(1), setup.d.max(1), setup.batch.max(1));
    let workers = sfb_harness::sim::calibration_workers(setup.sim.colocate);
    let share = setup.sim.share();
    let pairs = setup.peers.max(1) * k;
    let (flops, mem_bw, per_sample) = if workers > 1 {
        let flops = sfb_harness::sim::contended_rate(workers, 2.0 * (j * d * pairs) as f64, || {
            sfb_harness::sim::apply_work(j, d, pairs)
        });
        let mem_bw = sfb_harness::sim::contended_rate(workers, 8.0 * (j * d) as f64, || {
            sfb_harness::sim::copy_work(j, d)
        });
        let per_sample = match setup.sim.compute_per_sample_s {
            Some(_) => None,
            None => {
                // Fails here, on one thread, if it fails at all.
                ComputeWork::new(j, d, k).step()?;
                let rate = sfb_harness::sim::contended_rate(workers, k as f64, || {
                    let mut c = ComputeWork::new(j, d, k);
                    move || {
                        // Checked above for these shapes.
                        let _ = c.step();
                    }
                });
                Some(1.0 / rate)
            }
        };
        (flops * share, mem_bw * share, per_sample.map(|t| t / share))
    } else {
        let mem_bw = sfb_harness::sim::copy_rate(j, d);
        let per_sample = match setup.sim.compute_per_sample_s {
            Some(_) => None,
            None => Some(calibrate_compute(j, d, k)?),
        };
        (
            sfb_harness::sim::calibrate_apply(j, d, pairs),
            mem_bw,
            per_sample,
        )
    };
    setup.sim.flops = flops;
    setup.sim.mem_bw = mem_bw;
    setup.sim.costs = sfb_harness::sim::CostModel::Model;
    if per_sample.is_some() {
        setup.sim.compute_per_sample_s = per_sample;
    }
    setup.calibrated = true;
    setup.calibration_workers = workers;
    tracing::info!(
        "calibrated here ({workers} at once): apply kernel {:.3e} flop/s at rank {}, copy \
         {:.3e} B/s, compute_sv {:.3e} s per sample",
        setup.sim.flops,
        pairs,
        mem_bw,
        setup.sim.compute_per_sample_s.unwrap_or_default()
    );
    Ok(())
}

/// MLR's `compute_sv` on a batch of `k` dense samples against a fixed J × D W.
struct ComputeWork {
    samples: Vec<sfb_models::Example>,
    w: Array2<f32>,
    model: sfb_models::mlr::Mlr,
    sv: sfb_core::SvList,
}

impl ComputeWork {
    fn new(j: usize, d: usize, k: usize) -> Self {
        let samples = (0..k)
            .map(|i| sfb_models::Example {
                x: sfb_models::Features::Dense(
                    (0..d).map(|c| ((c * 3 + i) % 7) as f32 * 0.1).collect(),
                ),
                y: (i % j) as u32,
                id: i as u32,
            })
            .collect();
        Self {
            samples,
            w: Array2::<f32>::from_shape_fn((j, d), |(a, b)| ((a * 5 + b) % 13) as f32 * 1e-3),
            model: sfb_models::mlr::Mlr::new(j, d),
            sv: sfb_core::SvList::new(j, d),
        }
    }

    /// One `compute_sv` over the batch.
    fn step(&mut self) -> Result<()> {
        use sfb_core::Model;
        let refs: Vec<&sfb_models::Example> = self.samples.iter().collect();
        self.sv.clear();
        self.model
            .compute_sv(self.w.view(), &refs, &mut self.sv)
            .map_err(|source| Error::Core(sfb_core::Error::Model { clock: 0, source }))
    }
}

/// Seconds of MLR `compute_sv` per sample on this machine at J × D with batches of
/// `batch` dense samples, on one thread, alone (like [`calibrate_apply`](sfb_harness::sim::calibrate_apply)): the best of 3
/// timings of at least 50 ms of [`Mlr::compute_sv`](sfb_models::mlr::Mlr) (logits GEMM,
/// softmax, the K pairs).
///
/// # Errors
/// The model's (none for these shapes).
pub fn calibrate_compute(j: usize, d: usize, batch: usize) -> Result<f64> {
    let (j, d, k) = (j.max(1), d.max(1), batch.max(1));
    let mut c = ComputeWork::new(j, d, k);
    c.step()?;
    let mut work = || {
        let _ = c.step();
    };
    let rate = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
        Ok(pool) => pool.install(|| sfb_harness::sim::best_rate(k as f64, &mut work)),
        Err(_) => sfb_harness::sim::best_rate(k as f64, &mut work),
    };
    Ok(1.0 / rate)
}

/// Seconds as a short figure with a unit.
fn time(s: f64) -> String {
    if s == 0.0 {
        "0".into()
    } else if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.3} µs", s * 1e6)
    }
}

/// Bytes as a short figure with a binary unit.
fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b} B")
    }
}

fn rate(r: Option<f64>) -> String {
    r.map_or("unlimited".into(), |r| {
        format!("{:.3} Gbit/s ({:.1} MB/s)", r * 8e-9, r * 1e-6)
    })
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan: P={} J={} D={} K={}; NIC egress {}, ingress {}, latency {}; transport \
             CPU {}; host share ×{}",
            self.peers,
            self.j,
            self.d,
            self.batch,
            rate(self.egress_bytes_per_s),
            rate(self.ingress_bytes_per_s),
            time(self.latency_s),
            self.transport_cpu_bytes_per_s
                .map_or("free".into(), |r| format!("{:.1} MB/s per node", r * 1e-6)),
            self.host_share,
        )?;
        writeln!(
            f,
            "machine: {:.3e} flop/s, {:.3e} B/s memory ({}), compute_sv {} per sample",
            self.flops,
            self.mem_bw,
            match (self.calibrated, self.calibration_workers) {
                (false, _) => "given".to_string(),
                (true, 0 | 1) => "measured here".to_string(),
                (true, n) => format!(
                    "measured here with {n} kernels running at once, as co-located nodes \
                     would: per-core rates before the ×{} share",
                    self.host_share
                ),
            },
            time(self.compute_per_sample_s),
        )?;
        writeln!(
            f,
            "frames: factors {} B, W {} B, ΔW {} B, ring chunk {} B",
            self.frames.factors, self.frames.params, self.frames.delta, self.frames.ring_chunk
        )?;
        writeln!(f)?;
        let header = [
            "strategy",
            "Q",
            "sent/node",
            "recv/node",
            "server sent/recv",
            "egress",
            "ingress",
            "latency",
            "transport CPU",
            "compute_sv",
            "apply GFLOP",
            "apply",
            "per clock",
            "bound",
        ];
        let rows: Vec<Vec<String>> = self
            .estimates
            .iter()
            .map(|e| {
                vec![
                    e.strategy.to_string(),
                    e.q.map_or("-".into(), |q| q.to_string()),
                    bytes(e.bytes_sent),
                    bytes(e.bytes_received),
                    match (e.server_bytes_sent, e.server_bytes_received) {
                        (Some(s), Some(r)) => format!("{} / {}", bytes(s), bytes(r)),
                        _ => "-".into(),
                    },
                    time(e.egress_s),
                    time(e.ingress_s),
                    time(e.latency_s),
                    time(e.transport_cpu_s),
                    time(e.compute_s),
                    format!("{:.3}", e.apply_flops * 1e-9),
                    time(e.apply_s),
                    time(e.clock_s),
                    e.bound.to_string(),
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..header.len())
            .map(|c| {
                rows.iter()
                    .map(|r| r[c].chars().count())
                    .chain([header[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |f: &mut fmt::Formatter<'_>, cells: &[&str]| {
            let cells: Vec<String> = cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, &w))| {
                    if i == 0 || i == header.len() - 1 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            writeln!(f, "{}", cells.join("  ").trim_end())
        };
        line(f, &header)?;
        for r in &rows {
            let cells: Vec<&str> = r.iter().map(String::as_str).collect();
            line(f, &cells)?;
        }
        writeln!(f)?;
        if let (Some(best), Some(free)) = (self.best_q, self.q_within_10pct) {
            let within = if free > 1 {
                format!("up to Q={free} a clock costs at most 10% more than at Q=1")
            } else {
                "every Q above 1 costs more than 10% over Q=1".to_string()
            };
            writeln!(
                f,
                "partial broadcast: fastest per clock at Q={best}; {within}"
            )?;
        }
        let q = self
            .recommended_q
            .map_or(String::new(), |q| format!(" (Q={q})"));
        writeln!(
            f,
            "recommended: {}{q}, the fastest per clock",
            self.recommended
        )?;
        if self.fastest_consistent != self.recommended {
            writeln!(
                f,
                "fastest with every update reaching every replica each clock: {}",
                self.fastest_consistent
            )?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn partial_broadcast_is_priced_at_every_q_then_on_a_grid() {
        assert_eq!(super::partial_qs(1), Vec::<usize>::new());
        assert_eq!(super::partial_qs(2), Vec::<usize>::new());
        assert_eq!(super::partial_qs(12), (1..=10).collect::<Vec<_>>());
        let all = super::partial_qs(1026);
        assert_eq!(all, (1..=1024).collect::<Vec<_>>());
        let qs = super::partial_qs(10_000);
        assert_eq!(&qs[..1024], &(1..=1024).collect::<Vec<_>>()[..]);
        assert_eq!(qs.last(), Some(&9998));
        // Strictly increasing, at most 5 % (rounded up) apart beyond the exhaustive part.
        for w in qs.windows(2) {
            assert!(w[0] < w[1] && w[1] <= w[0] + w[0].div_ceil(20), "{w:?}");
        }
        assert!(qs.len() < 1100, "{}", qs.len());
    }

    use super::*;
    use sfb_net::bandwidth::Rate;

    /// 1 Gbit/s both ways, 1 ms delay, unit-friendly rates: 1e9 flop/s, 1e9 B/s.
    fn setup(p: usize) -> Setup {
        Setup {
            peers: p,
            j: 100,
            d: 200,
            batch: 10,
            sim: SimOptions {
                egress: Some(Rate(1.25e8)),
                latency_s: 1e-3,
                flops: 1e9,
                mem_bw: 1e9,
                ..SimOptions::default()
            },
            qs: vec![],
            calibrated: false,
            calibration_workers: 0,
        }
    }

    #[test]
    fn kernels_timed_together_give_one_kernels_rate() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = AtomicUsize::new(0);
        let rate = sfb_harness::sim::contended_rate(3, 1.0, || {
            || {
                calls.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        // About 1000 calls a second for a 1 ms sleep (slower under load, never faster).
        assert!(rate > 10.0 && rate <= 1000.0, "{rate}");
        // Each kernel: one untimed call, at least 2 timed and 200 ms of them.
        assert!(calls.load(Ordering::SeqCst) >= 3 * 3, "{calls:?}");
    }

    #[test]
    fn frames_are_the_wire_sizes() {
        let f = frames(100, 200, 10, 4);
        // K(J + D) f32 plus a small header; W and ΔW J·D f32 plus a header.
        assert!((12_000..12_040).contains(&f.factors), "{f:?}");
        assert!((80_000..80_040).contains(&f.params), "{f:?}");
        assert!((80_000..80_040).contains(&f.delta), "{f:?}");
        assert!((20_000..20_040).contains(&f.ring_chunk), "{f:?}");
    }

    #[test]
    fn sfb_full_broadcast_by_hand() {
        let p = plan(&setup(4)).unwrap();
        let e = p.estimate(Strategy::SfbFull).unwrap();
        let f = p.frames.factors as f64;
        // compute_sv: K·(2·J·D + 20·J) flops / 1e9 + K·4·(J + D) bytes / 1e9.
        let compute = 10.0 * (2.0 * 100.0 * 200.0 + 2000.0) / 1e9 + 10.0 * 4.0 * 300.0 / 1e9;
        // Apply: 4·K pairs of 2·J·D flops, plus a pass over W (8·J·D bytes).
        let apply = 40.0 * 2.0 * 100.0 * 200.0 / 1e9 + 8.0 * 100.0 * 200.0 / 1e9;
        // Network, no transport CPU: the 3 frames through the NIC, then the delay.
        let net = 3.0 * f / 1.25e8 + 1e-3;
        assert_eq!(e.q, Some(3));
        assert_eq!(e.bytes_sent, 3 * p.frames.factors);
        assert!(
            (e.compute_s - compute).abs() < 2e-9,
            "{} {compute}",
            e.compute_s
        );
        assert!((e.apply_s - apply).abs() < 2e-9, "{} {apply}", e.apply_s);
        assert!((e.clock_s - (compute + net + apply)).abs() < 1e-8, "{e:?}");
        assert_eq!(e.apply_flops, 40.0 * 40_000.0);
        assert_eq!(e.bound, "compute");
    }

    #[test]
    fn fms_by_hand() {
        let p = plan(&setup(4)).unwrap();
        let e = p.estimate(Strategy::FmsFactors).unwrap();
        let (b, u) = (p.frames.params as f64, p.frames.factors as f64);
        let bw = 1.25e8;
        // The server's 4 copies of W leave one after another; the last client gets its
        // copy after 4 of them and the delay, checks it (one pass: J·D·(8/1e9 + 1/1e9)
        // rounded to whole ns per element: 9 ns), computes, pushes its factors (u/bw and
        // the delay back); the server applies 4·K pairs.
        let check = 100.0 * 200.0 * 9e-9;
        let compute = 10.0 * (2.0 * 100.0 * 200.0 + 2000.0) / 1e9 + 10.0 * 4.0 * 300.0 / 1e9;
        let apply = 40.0 * 2.0 * 100.0 * 200.0 / 1e9 + 8.0 * 100.0 * 200.0 / 1e9;
        let expect = 4.0 * b / bw + 1e-3 + check + compute + u / bw + 1e-3 + apply;
        assert!((e.clock_s - expect).abs() < 1e-8, "{} {expect}", e.clock_s);
        assert_eq!(e.server_bytes_sent, Some(4 * p.frames.params));
        assert_eq!(e.latency_s, 2e-3);
    }

    #[test]
    fn ring_by_hand() {
        let p = plan(&setup(4)).unwrap();
        let e = p.estimate(Strategy::RingAllreduce).unwrap();
        let c = p.frames.ring_chunk as f64;
        // 6 steps of a 25-row chunk plus the delay each.
        let net = 6.0 * (c / 1.25e8 + 1e-3);
        assert_eq!(e.bytes_sent, 6 * p.frames.ring_chunk);
        assert!(
            (e.clock_s - e.compute_s - e.apply_s - net).abs() < 1e-9,
            "{e:?}"
        );
        assert_eq!(e.latency_s, 6e-3);
    }

    #[test]
    fn transport_cpu_serializes_sends_and_takes() {
        let mut s = setup(4);
        // Transport CPU far slower than the NIC: each frame costs f/cpu at both ends and
        // the node's CPU does 3 sends then 3 takes.
        s.sim.transport_cpu = Some(Rate(1e6));
        let p = plan(&s).unwrap();
        let e = p.estimate(Strategy::SfbFull).unwrap();
        let x = p.frames.factors as f64 / 1e6;
        assert!(
            (e.clock_s - e.compute_s - e.apply_s - 6.0 * x).abs() < 1e-9,
            "{e:?}"
        );
        assert_eq!(e.bound, "transport cpu");
    }

    #[test]
    fn best_q_is_priced_and_recommended_honestly() {
        let mut s = setup(16);
        s.qs = vec![2, 5];
        let p = plan(&s).unwrap();
        // Fewer pairs and frames always cost less per clock on this model: Q = 1.
        assert_eq!(p.best_q, Some(1));
        let qs: Vec<_> = p
            .estimates
            .iter()
            .filter(|e| e.strategy == Strategy::SfbPartial)
            .map(|e| e.q)
            .collect();
        assert_eq!(qs, [Some(1), Some(2), Some(5)]);
        let fastest = p
            .estimates
            .iter()
            .map(|e| e.clock_s)
            .fold(f64::INFINITY, f64::min);
        let rec = p
            .estimates
            .iter()
            .find(|e| e.strategy == p.recommended && e.q == p.recommended_q)
            .unwrap();
        assert_eq!(rec.clock_s, fastest);
        assert!(p.fastest_consistent.consistent());
        let text = p.to_string();
        assert!(text.contains("says nothing about convergence"), "{text}");
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["estimates"][0]["strategy"], "sfb-full");
    }

    #[test]
    fn bad_setups_name_their_field() {
        let mut s = setup(4);
        s.qs = vec![4];
        assert!(plan(&s).unwrap_err().to_string().contains('q'));
        let s = Setup { j: 0, ..setup(4) };
        assert!(plan(&s).unwrap_err().to_string().starts_with("j "));
        let mut s = setup(4);
        s.sim.flops = -1.0;
        assert!(plan(&s).unwrap_err().to_string().contains("sim.flops"));
    }

    #[test]
    fn one_node_has_nothing_to_send() {
        let p = plan(&setup(1)).unwrap();
        let e = p.estimate(Strategy::SfbFull).unwrap();
        assert_eq!(e.bytes_sent, 0);
        assert_eq!(p.best_q, None);
    }
}
