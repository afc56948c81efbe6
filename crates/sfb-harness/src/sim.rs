//! `sfb sim` (transport `sim`): P real engines — real replicas, real factors, real
//! learning — on the deterministic virtual-time driver
//! ([`sfb_net::virtual_time`]), with a network model (every node's NIC egress and ingress
//! rates, per-link delay and jitter: [`Nic`]) and a compute model (the cost of
//! `compute_sv`, of applying a batch and of FMS's dense work, from flop and byte counts of
//! the run's shapes at a machine's GEMM rate and memory bandwidth: [`CostModel`]).
//!
//! Everything is deterministic: the same spec (seed and flags) gives a bitwise-equal
//! summary and records, with `wall_s`, `compute_s`, … in simulated seconds. The one
//! exception is `costs = calibrate`, which measures this machine's rates first; the
//! summary's `sim` block names the rates used, so passing them back as `flops` and
//! `mem_bw` replays the run exactly.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use ndarray::Array2;
use serde::{Deserialize, Serialize};
use sfb_core::metrics::SimReport;
use sfb_core::{FactorBatch, PeerId, VFactors};
use sfb_net::bandwidth::Rate;
use sfb_net::virtual_time::{Costs, Latency, Nic};

use crate::rate_serde;
use crate::{Error, Result};

/// Default egress and ingress rate of every node: 10 Gbit/s.
pub const DEFAULT_LINK: f64 = 10e9 / 8.0;

/// Default GEMM rate of the modelled machine, flop/s: one core of this project's
/// 2-core development machine, as `--costs calibrate` measured it for the apply of a
/// rank-16 batch into a 128 × 128 W (2026-11-23, three release runs: 5.62e10, 5.74e10,
/// 5.86e10; ndarray's matrixmultiply, f32).
pub const DEFAULT_FLOPS: f64 = 5.7e10;

/// Default memory bandwidth of the modelled machine, bytes/s (same machine and runs as
/// [`DEFAULT_FLOPS`]: copying a 128 × 128 f32 matrix, read plus write, in cache: 7.80e10,
/// 8.45e10, 8.68e10).
pub const DEFAULT_MEM_BW: f64 = 8.3e10;

/// How the simulator prices work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CostModel {
    /// Flop and byte counts at the given `flops` and `mem_bw` (deterministic).
    #[default]
    Model,
    /// Measure this machine first: its GEMM rate (at the run's J, D and batch) and
    /// memory bandwidth, which price applies and FMS's dense work as in `model`, and the
    /// model's own `compute_sv` and evaluation, timed on a one-peer in-memory run of the
    /// same spec (`flops`, `mem_bw` are ignored; `compute_per_sample_s`, `evaluate_s`
    /// still override).
    Calibrate,
}

/// NIC ingress rate: the egress rate (a full-duplex NIC), unlimited, or its own.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Ingress {
    /// As fast as egress.
    #[default]
    Same,
    /// No ingress limit (frames take the sender's serialization and the link delay only;
    /// what processes on one host's loopback see).
    Unlimited,
    /// Bytes per second.
    Rate(f64),
}

impl std::str::FromStr for Ingress {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "same" => Ok(Ingress::Same),
            "unlimited" => Ok(Ingress::Unlimited),
            rate => rate
                .parse::<Rate>()
                .map(|r| Ingress::Rate(r.0))
                .map_err(|e| {
                    format!(
                        "ingress {rate:?}: expected same, unlimited or a rate (10gbit, 1.5e9): {e}"
                    )
                }),
        }
    }
}

impl std::fmt::Display for Ingress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ingress::Same => f.write_str("same"),
            Ingress::Unlimited => f.write_str("unlimited"),
            Ingress::Rate(r) => write!(f, "{r}"),
        }
    }
}

impl Serialize for Ingress {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ingress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// A duration as `sfb sim` and `sfb plan` take it: a number of seconds, or with a unit
/// (`50us`, `2ms`, `0.5s`).
///
/// # Errors
/// A message naming the text, for a negative, non-finite or unreadable duration.
pub fn seconds(s: &str) -> std::result::Result<f64, String> {
    // Divided (not multiplied by 1e-6), so that 50us is exactly the f64 nearest 50e-6.
    let (num, per_second) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v / per_second),
        _ => Err(format!(
            "{s:?}: expected a non-negative duration such as 50us, 2ms or 0.001"
        )),
    }
}

/// `NODES:CORES` ([`SimOptions::colocate`]), both at least 1.
///
/// # Errors
/// A message naming the text.
pub fn colocate(s: &str) -> std::result::Result<(usize, usize), String> {
    let parsed = s
        .split_once(':')
        .and_then(|(n, c)| Some((n.parse().ok()?, c.parse().ok()?)));
    match parsed {
        Some((n, c)) if n > 0 && c > 0 => Ok((n, c)),
        _ => Err(format!(
            "{s:?}: expected NODES:CORES, both at least 1 (e.g. 8:2)"
        )),
    }
}

/// `model` or `calibrate` ([`CostModel`]).
///
/// # Errors
/// A message naming the text.
pub fn cost_model(s: &str) -> std::result::Result<CostModel, String> {
    match s {
        "model" => Ok(CostModel::Model),
        "calibrate" => Ok(CostModel::Calibrate),
        _ => Err(format!("{s:?}: expected model or calibrate")),
    }
}

/// What `sfb sim` models (the spec's `sim`; used with transport `sim` only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimOptions {
    /// Every node's NIC egress rate (JSON: bytes per second or a string such as
    /// `"10gbit"`). Default: `net.bandwidth` if given, else 10 Gbit/s.
    #[serde(with = "rate_serde")]
    pub egress: Option<Rate>,
    /// Every node's NIC ingress rate. Default: as egress.
    pub ingress: Ingress,
    /// One-way link delay, seconds. Default 50 µs.
    pub latency_s: f64,
    /// Each frame's delay is uniform in `latency ± jitter` (seeded per link), seconds.
    /// Default 0.
    pub jitter_s: f64,
    /// How work is priced. Default: `model`.
    pub costs: CostModel,
    /// The modelled machine's GEMM rate, flop/s. Default [`DEFAULT_FLOPS`].
    pub flops: f64,
    /// The modelled machine's memory bandwidth, bytes/s. Default [`DEFAULT_MEM_BW`].
    pub mem_bw: f64,
    /// Seconds of `compute_sv` per sample, replacing the cost model's (and the
    /// calibration's) figure. Default: none.
    pub compute_per_sample_s: Option<f64>,
    /// Seconds of one evaluation on the held-out data, likewise. Default: none.
    pub evaluate_s: Option<f64>,
    /// Seconds of one apply call beyond its pairs (the engine's whole apply path: the
    /// optimizer's and the prox's passes over W, bookkeeping), replacing the cost model's
    /// one pass over W at `mem_bw` (and the calibration's figure, measured in a one-peer
    /// run). Default: none.
    pub apply_per_call_s: Option<f64>,
    /// What `calibrate` measured of the engine's apply path: seconds per call (one core's)
    /// at a rank (pairs per call), from which [`plan_costs`] takes the per-call price
    /// once it knows the per-pair one. Not serialized: `apply_per_call_s` replays it.
    #[serde(skip)]
    pub measured_apply: Option<(f64, usize)>,
    /// Nodes that share one host's cores, as `(nodes, cores)`: node `i` runs on host
    /// `i / nodes`, and its work (compute, applies, transport CPU) runs on that host's
    /// free cores, at most `max(1, cores / nodes)` at once
    /// ([`Hosts`](sfb_net::virtual_time::Hosts)): `nodes` nodes working at once take
    /// `nodes / cores` times as long, and a node that waits on the network leaves its
    /// core to the others. For comparing with processes run on one machine (`sfb run
    /// --transport libp2p` here is `(P, cores)`; FMS `(P + 1, cores)`). `sfb plan` prices
    /// it as a fair share instead (every node's work `max(1, nodes / cores)` times as
    /// long: BSP nodes all busy at once). Default: none (a host per node).
    pub colocate: Option<(usize, usize)>,
    /// CPU the transport spends per byte at each end (encryption, framing, copies,
    /// decoding), as bytes per second of one core ([`Nic::cpu`]; JSON like a rate). `sfb
    /// bench --scenario link`'s `framed` arm measures the whole path on this machine.
    /// Default: free.
    #[serde(with = "rate_serde")]
    pub transport_cpu: Option<Rate>,
    /// CPU the transport spends per frame at each end beyond its bytes (wake-ups, system
    /// calls, hand-offs between tasks), seconds of one core ([`Nic::frame_cpu`];
    /// `scripts/frame_cpu.sh` measures it: a cluster of real processes on a model too
    /// small to compute, at two out-degrees). Default: free.
    pub transport_cpu_frame_s: Option<f64>,
    /// Timing only: every node runs its protocol and sends frames of their real sizes,
    /// but does no arithmetic (no `compute_sv`, no applies, no evaluation) and holds no
    /// replica ([`sfb_core::Config::timing_only`]): for more peers than real replicas fit
    /// in memory or finish in reasonable time. Times come from the cost model as usual;
    /// there is no learning to report (no objective). SFB with MLR only. Default: off.
    pub timing_only: bool,
    /// Peers that crash, each right after completing a clock, as `(peer, clock)`
    /// ([`CrashAt::Clock`](sfb_net::virtual_time::CrashAt)); the others are told
    /// `net.peer_timeout_s` later and repair the topology. Needs `--on-peer-loss continue`
    /// (or `continue-alone`). Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub crashes: Vec<(usize, u64)>,
    /// Besides `crashes`: this share of the peers, drawn with the run's seed, crash each
    /// right after a clock drawn uniformly from the run's. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub crash_fraction: Option<f64>,
    /// This share of the crashed peers, drawn with the run's seed, come back
    /// [`restart_after_s`](Self::restart_after_s) after their crash as a fresh process
    /// that rejoins the run (`--rejoin`): a neighbour hands it its state, and it trains on
    /// from there. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_fraction: Option<f64>,
    /// How long after its crash a restarting peer comes back, in simulated seconds; more
    /// than `net.peer_timeout_s` (the others count it lost first). Default: twice
    /// `net.peer_timeout_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_after_s: Option<f64>,
    /// Network partitions: each cuts its peers off from the others over a span of
    /// simulated time (frames across the cut wait on their links until it heals). A cut
    /// that lasts `net.peer_timeout_s` makes each side count the other lost; then only a
    /// side holding a strict majority of the run's peers trains on, unless
    /// `--on-peer-loss continue-alone`. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<Window>,
    /// Pauses: each stops its peers (no step, no frame taken) over a span of simulated
    /// time, as SIGSTOP does a process. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pauses: Vec<Window>,
    /// Slow links: each makes its peers' links (frames they send or are sent) `factor`
    /// times slower, delay and NIC time, over a span of simulated time. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slow: Vec<Slowdown>,
}

/// Slow links of some peers over a span of simulated time (`--slow`), written
/// `PEER[,PEER…]@FROM..UNTIL:FACTOR`, e.g. `3@1..5:10` (10 times slower from 1 s to 5 s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slowdown {
    /// The peers.
    pub peers: Vec<usize>,
    /// Start, simulated seconds from the run's start.
    pub from_s: f64,
    /// End (exclusive), simulated seconds.
    pub until_s: f64,
    /// How many times slower (at least 1).
    pub factor: f64,
}

impl Slowdown {
    /// Its peers and span.
    pub fn window(&self) -> Window {
        Window {
            peers: self.peers.clone(),
            from_s: self.from_s,
            until_s: self.until_s,
        }
    }
}

impl std::str::FromStr for Slowdown {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("{s:?}: expected PEER[,PEER…]@FROM..UNTIL:FACTOR, e.g. 3@1..5:10");
        let (window, factor) = s.rsplit_once(':').ok_or_else(bad)?;
        let w: Window = window.parse().map_err(|_| bad())?;
        Ok(Self {
            peers: w.peers,
            from_s: w.from_s,
            until_s: w.until_s,
            factor: factor.trim().parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for Slowdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.window(), self.factor)
    }
}

/// Some peers over a span of simulated time (`--partition`, `--pause`), written
/// `PEER[,PEER…]@FROM..UNTIL` with durations as `--latency` takes them, e.g. `3@10..80`
/// or `0,1@500ms..2s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// The peers.
    pub peers: Vec<usize>,
    /// Start, simulated seconds from the run's start.
    pub from_s: f64,
    /// End (exclusive), simulated seconds.
    pub until_s: f64,
}

impl std::str::FromStr for Window {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("{s:?}: expected PEER[,PEER…]@FROM..UNTIL, e.g. 3@10..80");
        let (peers, span) = s.split_once('@').ok_or_else(bad)?;
        let (from, until) = span.split_once("..").ok_or_else(bad)?;
        let peers = peers
            .split(',')
            .map(|p| p.trim().parse().map_err(|_| bad()))
            .collect::<std::result::Result<Vec<usize>, _>>()?;
        Ok(Self {
            peers,
            from_s: seconds(from.trim())?,
            until_s: seconds(until.trim())?,
        })
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let peers: Vec<String> = self.peers.iter().map(ToString::to_string).collect();
        write!(f, "{}@{}..{}", peers.join(","), self.from_s, self.until_s)
    }
}

impl Window {
    /// Its span as durations (validated: finite, at most a year).
    pub fn span(&self) -> (Duration, Duration) {
        let d = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX);
        (d(self.from_s), d(self.until_s))
    }
}

/// Parses `PEER@CLOCK` (`--crash`).
///
/// # Errors
/// A message naming the text.
pub fn crash(s: &str) -> std::result::Result<(usize, u64), String> {
    let bad = || format!("{s:?}: expected PEER@CLOCK, e.g. 3@120");
    let (p, c) = s.split_once('@').ok_or_else(bad)?;
    Ok((
        p.trim().parse().map_err(|_| bad())?,
        c.trim().parse().map_err(|_| bad())?,
    ))
}

/// The crashes of a run of `peers` peers and `clocks` clocks: `opts.crashes`, then
/// `opts.crash_fraction` of the other peers drawn with `seed`, each after a clock drawn
/// from `1..clocks`; sorted by peer.
pub fn crashes_of(opts: &SimOptions, peers: usize, clocks: u64, seed: u64) -> Vec<(usize, u64)> {
    let mut next = splitmix(seed ^ 0x00c7_a54e);
    let mut out = opts.crashes.clone();
    if let Some(f) = opts.crash_fraction {
        let mut others: Vec<usize> = (0..peers)
            .filter(|p| !out.iter().any(|&(q, _)| q == *p))
            .collect();
        shuffle(&mut others, &mut next);
        let n = ((f * peers as f64).round() as usize).min(others.len());
        let span = clocks.saturating_sub(1).max(1);
        for &p in &others[..n] {
            out.push((p, 1 + next() % span));
        }
    }
    out.sort_unstable();
    out
}

/// SplitMix64 from `seed`: a fixed, documented stream (no dependency for one draw per
/// peer).
fn splitmix(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Fisher–Yates with `next`.
fn shuffle(v: &mut [usize], next: &mut impl FnMut() -> u64) {
    for i in (1..v.len()).rev() {
        v.swap(i, (next() % (i as u64 + 1)) as usize);
    }
}

/// Which of `crashes` (peer, clock) come back: `opts.restart_fraction` of them, drawn with
/// `seed`; sorted by peer.
pub fn restarts_of(opts: &SimOptions, crashes: &[(usize, u64)], seed: u64) -> Vec<usize> {
    let Some(f) = opts.restart_fraction else {
        return Vec::new();
    };
    let mut next = splitmix(seed ^ 0x5e57_a47e);
    let mut peers: Vec<usize> = crashes.iter().map(|&(p, _)| p).collect();
    shuffle(&mut peers, &mut next);
    peers.truncate((f * crashes.len() as f64).round() as usize);
    peers.sort_unstable();
    peers
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            egress: None,
            ingress: Ingress::Same,
            latency_s: 50e-6,
            jitter_s: 0.0,
            costs: CostModel::Model,
            flops: DEFAULT_FLOPS,
            mem_bw: DEFAULT_MEM_BW,
            compute_per_sample_s: None,
            evaluate_s: None,
            apply_per_call_s: None,
            measured_apply: None,
            colocate: None,
            transport_cpu: None,
            transport_cpu_frame_s: None,
            timing_only: false,
            crashes: Vec::new(),
            partitions: Vec::new(),
            pauses: Vec::new(),
            slow: Vec::new(),
            crash_fraction: None,
            restart_fraction: None,
            restart_after_s: None,
        }
    }
}

impl SimOptions {
    /// Checks the options on their own.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] naming the field.
    pub fn validate(&self) -> Result<()> {
        let positive = |field, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(Error::OutOfRange {
                    field,
                    expected: "a positive number",
                    got: v,
                })
            }
        };
        positive("sim.flops", self.flops)?;
        positive("sim.mem_bw", self.mem_bw)?;
        if let Ingress::Rate(r) = self.ingress {
            positive("sim.ingress", r)?;
        }
        if let Some(c) = self.compute_per_sample_s {
            positive("sim.compute_per_sample_s", c)?;
        }
        if let Some(c) = self.evaluate_s {
            positive("sim.evaluate_s", c)?;
        }
        if let Some(c) = self.apply_per_call_s {
            positive("sim.apply_per_call_s", c)?;
        }
        if let Some(f) = self.transport_cpu_frame_s
            && !(f.is_finite() && (0.0..=1.0).contains(&f))
        {
            return Err(Error::OutOfRange {
                field: "sim.transport_cpu_frame_s",
                expected: "in 0..=1 seconds",
                got: f,
            });
        }
        if let Some(f) = self.crash_fraction
            && !(f.is_finite() && (0.0..1.0).contains(&f))
        {
            return Err(Error::OutOfRange {
                field: "sim.crash_fraction",
                expected: "in 0..1",
                got: f,
            });
        }
        if let Some(f) = self.restart_fraction
            && !(f.is_finite() && (0.0..=1.0).contains(&f))
        {
            return Err(Error::OutOfRange {
                field: "sim.restart_fraction",
                expected: "in 0..=1",
                got: f,
            });
        }
        if let Some(s) = self.restart_after_s {
            positive("sim.restart_after_s", s)?;
        }
        if let Some((nodes, cores)) = self.colocate {
            positive("sim.colocate nodes", nodes as f64)?;
            positive("sim.colocate cores", cores as f64)?;
        }
        for (field, v) in [
            ("sim.latency_s", self.latency_s),
            ("sim.jitter_s", self.jitter_s),
        ] {
            if !(v.is_finite() && (0.0..=3600.0).contains(&v)) {
                return Err(Error::OutOfRange {
                    field,
                    expected: "in 0..=3600 seconds",
                    got: v,
                });
            }
        }
        if self.jitter_s > self.latency_s {
            return Err(Error::OutOfRange {
                field: "sim.jitter_s",
                expected: "at most sim.latency_s (delays cannot be negative)",
                got: self.jitter_s,
            });
        }
        Ok(())
    }

    /// The NIC model, with `bandwidth` (`net.bandwidth`) as the egress default.
    pub fn nic(&self, bandwidth: Option<Rate>, dtype: sfb_core::wire::Dtype) -> Nic {
        let egress = self.egress.or(bandwidth).map_or(DEFAULT_LINK, |r| r.0);
        let ingress = match self.ingress {
            Ingress::Same => Some(egress),
            Ingress::Unlimited => None,
            Ingress::Rate(r) => Some(r),
        };
        Nic {
            egress: Some(egress),
            ingress,
            dtype,
            cpu: self.transport_cpu.map(|r| r.0),
            frame_cpu: self.transport_cpu_frame_s,
        }
    }

    /// How much longer every node's work takes on a shared host when all its nodes work
    /// at once ([`Self::colocate`]).
    pub fn share(&self) -> f64 {
        self.colocate
            .map_or(1.0, |(nodes, cores)| (nodes as f64 / cores as f64).max(1.0))
    }

    /// The link delay model.
    pub fn latency(&self) -> Latency {
        let secs = Duration::from_secs_f64;
        Latency::uniform(
            secs(self.latency_s - self.jitter_s),
            secs(self.latency_s + self.jitter_s),
        )
    }
}

/// The shapes that price a run's work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shapes {
    /// Rows of W.
    pub j: usize,
    /// Columns of W.
    pub d: usize,
    /// Mean non-zeros of a training sample's features (D for dense data).
    pub nnz: f64,
    /// Whether the model's v factors are the sample's sparse features (mlr on sparse
    /// data): then an apply touches `nnz` columns per pair, not D.
    pub sparse_v: bool,
    /// Held-out samples evaluated per evaluation.
    pub eval_samples: usize,
}

/// Flop and byte counts of one unit of each kind of work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counts {
    /// Flops of `compute_sv` per sample.
    pub sample_flops: f64,
    /// Bytes of factors written per sample.
    pub sample_bytes: f64,
    /// Flops of applying one rank-one pair.
    pub pair_flops: f64,
    /// Bytes moved per apply call (the optimizer's pass over W).
    pub call_bytes: f64,
}

impl Counts {
    /// The counts of `model` at `s`: `compute_sv` is a forward pass (mlr: `2·J·nnz` for the
    /// scores plus ~20 flops per class for the softmax; dml: the sample's and, spread
    /// over a batch of 16, the C candidates' projections, `2·J·D·(1 + C/16)`; sc: the
    /// code's coordinate descent, `(2 + 2·sweeps)·J·D`), an
    /// apply is a rank-one update (`2·J·(nnz or D)` per pair) plus one pass over W
    /// (`8·J·D` bytes, read and write).
    pub fn of(model: &sfb_models::ModelSpec, s: Shapes) -> Self {
        let (j, d) = (s.j as f64, s.d as f64);
        let sample_flops = match model {
            sfb_models::ModelSpec::Dml { candidates, .. } => {
                2.0 * (1.0 + *candidates as f64 / 16.0) * j * d
            }
            sfb_models::ModelSpec::SparseCoding { sweeps, .. } => {
                (2.0 + 2.0 * *sweeps as f64) * j * d
            }
            _ => 2.0 * j * s.nnz + 20.0 * j,
        };
        let width = if s.sparse_v { s.nnz } else { d };
        Self {
            sample_flops,
            sample_bytes: 4.0 * (j + width),
            pair_flops: 2.0 * j * width,
            call_bytes: 8.0 * j * d,
        }
    }

    /// The virtual-time [`Costs`] of these counts at `flops` and `mem_bw`, for a run
    /// that evaluates `eval_samples` samples each time.
    pub fn costs(&self, flops: f64, mem_bw: f64, s: Shapes) -> Costs {
        let per_sample = self.sample_flops / flops + self.sample_bytes / mem_bw;
        Costs {
            compute_per_clock: 0.0,
            compute_per_sample: per_sample,
            apply_per_call: self.call_bytes / mem_bw,
            apply_per_pair: self.pair_flops / flops,
            per_element: 8.0 / mem_bw + 1.0 / flops,
            evaluate: per_sample * s.eval_samples as f64,
        }
    }
}

/// This machine's rates measured at the run's shapes: `(flops, mem_bw)`. The flops are
/// sfb's own apply kernel's ([`Replica::apply`](sfb_core::Replica::apply), one thread)
/// per extra pair between ranks `r` and `4r` (`marginal_apply_flops`), which is what
/// the cost model's per-pair price stands for; the bandwidth is copying W (the pass over
/// W every apply makes, priced apart). Each timing is the best of 3 of at least 50 ms.
pub fn calibrate(j: usize, d: usize, r: usize) -> (f64, f64) {
    let (j, d, r) = (j.max(1), d.max(1), r.max(1));
    let flops = marginal_apply_flops(j, d, r, |rank| {
        2.0 * (j * d * rank) as f64 / calibrate_apply(j, d, rank)
    });
    (flops, copy_rate(j, d))
}

/// Flop/s of an extra pair in the apply kernel at J × D from `seconds(rank)`, one call's
/// time at a rank: `2·J·D·3r / (t(4r) − t(r))`, so that the cost model's per-call price
/// (a pass over W at the copy bandwidth) and per-pair price add up to the kernel's time;
/// the average rate at `4r` when the difference is not positive (timing noise).
fn marginal_apply_flops(j: usize, d: usize, r: usize, seconds: impl Fn(usize) -> f64) -> f64 {
    let (t1, t4) = (seconds(r), seconds(4 * r));
    let pair = 2.0 * (j * d) as f64;
    if t4 > t1 {
        pair * (3 * r) as f64 / (t4 - t1)
    } else {
        pair * (4 * r) as f64 / t4
    }
}

/// Bytes/s of copying a J × D matrix on this machine, alone (as [`calibrate`]).
pub fn copy_rate(j: usize, d: usize) -> f64 {
    let (j, d) = (j.max(1), d.max(1));
    best_rate(8.0 * (j * d) as f64, copy_work(j, d))
}

/// This machine's rates as [`calibrate`]'s, but for `workers` co-located nodes: each
/// kernel timed with `workers` copies running at once ([`contended_rate`]), the figure
/// one node gets while the others work too.
pub fn calibrate_colocated(j: usize, d: usize, r: usize, workers: usize) -> (f64, f64) {
    let (j, d, r) = (j.max(1), d.max(1), r.max(1));
    let flops = marginal_apply_flops(j, d, r, |rank| {
        1.0 / contended_rate(workers, 1.0, || apply_work(j, d, rank))
    });
    let mem_bw = contended_rate(workers, 8.0 * (j * d) as f64, || copy_work(j, d));
    (flops, mem_bw)
}

/// One call: copy a J × D matrix (8·J·D bytes moved).
pub fn copy_work(j: usize, d: usize) -> impl FnMut() {
    let src = Array2::<f32>::from_elem((j, d), 0.5);
    let mut dst = Array2::<f32>::zeros((j, d));
    move || {
        dst.assign(&src);
        std::hint::black_box(&dst);
    }
}

/// Units per second of one of `n` kernels running at once, each on its own thread with a
/// one-thread kernel pool and its own work from `make`: every kernel runs once untimed,
/// then all start together, each times at least 2 calls and 200 ms, and each keeps
/// calling (untimed) until every one has its figure, so every timing saw all `n` busy.
/// The median of the `n` rates. A kernel that panics releases the others (they stop
/// waiting for it) and its panic is raised here once all have stopped.
pub fn contended_rate<W: FnMut()>(n: usize, units: f64, make: impl Fn() -> W + Sync) -> f64 {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let n = n.max(1);
    let (ready, done, failed) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicBool::new(false),
    );
    // Until `count` reaches `n` or a kernel failed.
    let wait_for = |count: &AtomicUsize, mut work: Option<&mut W>| {
        while count.load(Ordering::SeqCst) < n && !failed.load(Ordering::SeqCst) {
            match work.as_mut() {
                Some(w) => w(),
                None => std::thread::yield_now(),
            }
        }
    };
    let kernel = || {
        let mut work = make();
        work();
        ready.fetch_add(1, Ordering::SeqCst);
        wait_for(&ready, None);
        let t0 = Instant::now();
        let mut calls = 0u64;
        while calls < 2 || t0.elapsed() < Duration::from_millis(200) {
            work();
            calls += 1;
        }
        let rate = units * calls as f64 / t0.elapsed().as_secs_f64();
        done.fetch_add(1, Ordering::SeqCst);
        wait_for(&done, Some(&mut work));
        rate
    };
    let outcomes: Vec<std::thread::Result<f64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    let run = || {
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(&kernel))
                            .inspect_err(|_| failed.store(true, Ordering::SeqCst))
                    };
                    match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
                        Ok(pool) => pool.install(run),
                        Err(_) => run(),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(Err))
            .collect()
    });
    let mut rates = Vec::with_capacity(n);
    for outcome in outcomes {
        match outcome {
            Ok(r) => rates.push(r),
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

/// Units per second of `work` (which does `units` each call): the best of 3 timings of
/// at least 50 ms each.
pub fn best_rate(units: f64, mut work: impl FnMut()) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t0 = Instant::now();
        let mut calls = 0u64;
        while t0.elapsed() < Duration::from_millis(50) || calls == 0 {
            work();
            calls += 1;
        }
        best = best.max(units * calls as f64 / t0.elapsed().as_secs_f64());
    }
    best
}

/// `costs` with every piece of work `share` times as long (a fair share of a host's
/// cores, as `sfb plan` prices co-located nodes).
pub fn shared(mut costs: Costs, share: f64) -> Costs {
    for c in [
        &mut costs.compute_per_clock,
        &mut costs.compute_per_sample,
        &mut costs.apply_per_call,
        &mut costs.apply_per_pair,
        &mut costs.per_element,
        &mut costs.evaluate,
    ] {
        *c *= share;
    }
    costs
}

/// The costs of a run (one core's, before any sharing of a host) and the `sim` block of
/// its summary (without the run's own
/// figures, filled in after it).
pub fn plan_costs(
    opts: &SimOptions,
    model: &sfb_models::ModelSpec,
    shapes: Shapes,
    batch: usize,
    nic: Nic,
) -> (Costs, SimReport) {
    let (flops, mem_bw, calibrated) = match opts.costs {
        CostModel::Model => (opts.flops, opts.mem_bw, false),
        CostModel::Calibrate => {
            let workers = calibration_workers(opts.colocate);
            let (f, b) = if workers > 1 {
                // Per-core equivalents: the share below gives back the time measured.
                let (f, b) = calibrate_colocated(shapes.j, shapes.d, batch, workers);
                (f * opts.share(), b * opts.share())
            } else {
                calibrate(shapes.j, shapes.d, batch)
            };
            tracing::info!("calibrated here ({workers} at once): {f:.3e} flop/s, {b:.3e} bytes/s");
            (f, b, true)
        }
    };
    let counts = Counts::of(model, shapes);
    let mut costs = counts.costs(flops, mem_bw, shapes);
    if let Some(c) = opts.compute_per_sample_s {
        costs.compute_per_sample = c;
    }
    if let Some(e) = opts.evaluate_s {
        costs.evaluate = e;
    }
    match (opts.apply_per_call_s, opts.measured_apply) {
        (Some(c), _) => costs.apply_per_call = c,
        (None, Some((secs, pairs))) => {
            // The engine's apply path beyond its pairs; the model's pass over W when the
            // pairs alone account for the time measured (noise).
            let beyond = secs - pairs as f64 * costs.apply_per_pair;
            if beyond > 0.0 {
                costs.apply_per_call = beyond;
            }
        }
        (None, None) => {}
    }
    let named: BTreeMap<String, f64> = [
        ("compute_per_sample", costs.compute_per_sample),
        ("apply_per_call", costs.apply_per_call),
        ("apply_per_pair", costs.apply_per_pair),
        ("per_element", costs.per_element),
        ("evaluate", costs.evaluate),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let report = SimReport {
        simulated_s: 0.0,
        events: 0,
        egress_bytes_per_s: nic.egress,
        transport_cpu_bytes_per_s: nic.cpu,
        transport_cpu_frame_s: nic.frame_cpu,
        host_share: opts.share(),
        ingress_bytes_per_s: nic.ingress,
        latency_s: opts.latency_s,
        jitter_s: opts.jitter_s,
        flops,
        mem_bw,
        calibrated,
        costs: named,
        timing_only: opts.timing_only,
        faults: Vec::new(),
    };
    (costs, report)
}

/// How many kernels `sfb_lab::plan::calibrate` runs at once for `colocate` NODES:CORES: NODES per
/// CORES cores over all of this host's cores (8:2 on a 2-core host: 8; 16:16 on it: 2;
/// at least 1, at most 64), so this host is as oversubscribed as the planned one; 1
/// without `colocate`.
pub fn calibration_workers(colocate: Option<(usize, usize)>) -> usize {
    let here = std::thread::available_parallelism().map_or(1, usize::from);
    workers_for(colocate, here)
}

fn workers_for(colocate: Option<(usize, usize)>, here: usize) -> usize {
    colocate.map_or(1, |(nodes, cores)| {
        (nodes * here).div_ceil(cores.max(1)).clamp(1, 64)
    })
}

/// One call: apply a batch of `pairs` dense pairs to a J × D replica (2·J·D flops a pair).
pub fn apply_work(j: usize, d: usize, pairs: usize) -> impl FnMut() {
    let batch = FactorBatch {
        origin: PeerId(0),
        clock: 0,
        scale: -1e-3,
        j,
        d,
        u: (0..pairs * j)
            .map(|i| ((i * 7) % 11) as f32 * 0.01)
            .collect(),
        v: VFactors::Dense(
            (0..pairs * d)
                .map(|i| ((i * 5) % 13) as f32 * 0.01)
                .collect(),
        ),
    };
    let mut replica = sfb_core::Replica::zeros(j, d);
    move || {
        // Shapes are right by construction, values finite: the apply cannot fail.
        let _ = replica.apply(&[&batch]);
    }
}

/// Flop/s of sfb's apply kernel ([`Replica::apply`](sfb_core::Replica::apply)) on one
/// thread, alone, applying one batch of `pairs` dense pairs to a J × D replica (2·J·D
/// flops a pair): the best of 3 timings of at least 50 ms.
pub fn calibrate_apply(j: usize, d: usize, pairs: usize) -> f64 {
    let (j, d, pairs) = (j.max(1), d.max(1), pairs.max(1));
    let mut work = apply_work(j, d, pairs);
    let units = 2.0 * (j * d * pairs) as f64;
    match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
        Ok(pool) => pool.install(|| best_rate(units, &mut work)),
        Err(_) => best_rate(units, work),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn co_located_calibration_oversubscribes_this_host_alike() {
        assert_eq!(workers_for(None, 2), 1);
        assert_eq!(workers_for(Some((8, 2)), 2), 8);
        assert_eq!(workers_for(Some((9, 2)), 2), 9);
        assert_eq!(workers_for(Some((16, 16)), 2), 2);
        assert_eq!(workers_for(Some((8, 2)), 16), 64);
        assert_eq!(workers_for(Some((1, 4)), 2), 1);
    }

    #[test]
    fn crashes_are_the_named_ones_then_a_seeded_share_of_the_others() {
        let opts = SimOptions {
            crashes: vec![(5, 10)],
            crash_fraction: Some(0.05),
            ..SimOptions::default()
        };
        let a = crashes_of(&opts, 1024, 600, 7);
        assert_eq!(a, crashes_of(&opts, 1024, 600, 7), "seeded");
        assert_ne!(a, crashes_of(&opts, 1024, 600, 8));
        // 5 plus round(0.05 × 1024) = 51 others, each once, after a clock in 1..600.
        assert_eq!(a.len(), 52);
        assert!(a.contains(&(5, 10)));
        let mut peers: Vec<usize> = a.iter().map(|c| c.0).collect();
        peers.dedup();
        assert_eq!(peers.len(), 52);
        assert!(a.iter().all(|&(p, c)| p < 1024 && (1..600).contains(&c)));
        assert_eq!(crash("3@120"), Ok((3, 120)));
        assert!(crash("3:120").unwrap_err().contains("PEER@CLOCK"));
        // Half of them restart: 26 of the 52, seeded, each a crashed peer once.
        let half = SimOptions {
            restart_fraction: Some(0.5),
            ..opts
        };
        let r = restarts_of(&half, &a, 7);
        assert_eq!(r, restarts_of(&half, &a, 7));
        assert_ne!(r, restarts_of(&half, &a, 8));
        assert_eq!(r.len(), 26);
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        assert!(r.iter().all(|p| a.iter().any(|c| c.0 == *p)));
        assert!(restarts_of(&SimOptions::default(), &a, 7).is_empty());
    }

    #[test]
    fn durations_take_units_and_the_other_values_parse() {
        assert_eq!(seconds("50us").unwrap(), 50e-6);
        assert_eq!(seconds("2ms").unwrap(), 2e-3);
        assert_eq!(seconds("0.5").unwrap(), 0.5);
        assert!(seconds("-1ms").unwrap_err().contains("non-negative"));
        assert_eq!(colocate("8:2").unwrap(), (8, 2));
        assert!(colocate("8:0").unwrap_err().contains("NODES:CORES"));
        assert_eq!(cost_model("calibrate").unwrap(), CostModel::Calibrate);
        assert!(
            cost_model("guess")
                .unwrap_err()
                .contains("model or calibrate")
        );
    }

    #[test]
    fn ingress_parses_and_prints_back() {
        for text in ["same", "unlimited"] {
            assert_eq!(text.parse::<Ingress>().unwrap().to_string(), text);
        }
        assert_eq!("1gbit".parse::<Ingress>().unwrap(), Ingress::Rate(1.25e8));
        let e = "fast".parse::<Ingress>().unwrap_err();
        assert!(e.contains("ingress \"fast\""), "{e}");
    }

    #[test]
    fn the_egress_defaults_to_the_bandwidth_budget_then_10_gbit() {
        let o = SimOptions::default();
        let dtype = sfb_core::wire::Dtype::F32;
        assert_eq!(o.nic(None, dtype).egress, Some(DEFAULT_LINK));
        let nic = o.nic(Some(Rate(1e8)), dtype);
        assert_eq!((nic.egress, nic.ingress), (Some(1e8), Some(1e8)));
        let o = SimOptions {
            ingress: Ingress::Unlimited,
            ..o
        };
        assert_eq!(o.nic(None, dtype).ingress, None);
    }

    #[test]
    fn counts_scale_with_the_shapes() {
        let s = Shapes {
            j: 10,
            d: 1000,
            nnz: 50.0,
            sparse_v: true,
            eval_samples: 100,
        };
        let c = Counts::of(&sfb_models::ModelSpec::Mlr, s);
        assert_eq!(c.pair_flops, 2.0 * 10.0 * 50.0);
        assert_eq!(c.sample_flops, 2.0 * 10.0 * 50.0 + 200.0);
        let dense = Counts::of(
            &sfb_models::ModelSpec::Mlr,
            Shapes {
                sparse_v: false,
                nnz: 1000.0,
                ..s
            },
        );
        assert_eq!(dense.pair_flops, 2.0 * 10.0 * 1000.0);
        let costs = c.costs(1e9, 1e10, s);
        assert_eq!(costs.apply_per_pair, 1e-6);
        assert_eq!(costs.apply_per_call, 8e-6);
        // Below a nanosecond per element, and still charged (a Duration would round it
        // to nothing).
        let fast = c.costs(DEFAULT_FLOPS, DEFAULT_MEM_BW, s).per_element;
        assert!(fast > 0.0 && fast < 1e-9, "{fast}");
    }

    #[test]
    fn bad_options_name_their_field() {
        let o = SimOptions {
            jitter_s: 1e-3,
            ..SimOptions::default()
        };
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("sim.jitter_s"), "{e}");
        let o = SimOptions {
            flops: 0.0,
            ..SimOptions::default()
        };
        assert!(o.validate().unwrap_err().to_string().contains("sim.flops"));
        let o = SimOptions {
            transport_cpu_frame_s: Some(f64::NAN),
            ..SimOptions::default()
        };
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("sim.transport_cpu_frame_s"), "{e}");
    }

    #[test]
    fn a_kernel_that_panics_releases_the_others_and_its_panic_is_raised() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let made = AtomicUsize::new(0);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            contended_rate(3, 1.0, || {
                let me = made.fetch_add(1, Ordering::SeqCst);
                let mut calls = 0;
                move || {
                    calls += 1;
                    // The first kernel fails once timing has begun; the others would
                    // otherwise wait for its figure forever.
                    assert!(!(me == 0 && calls == 3), "kernel 0 fails");
                }
            })
        }));
        let payload = outcome.expect_err("the kernel's panic is raised");
        let text = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_default();
        assert!(text.contains("kernel 0 fails"), "{text}");
    }

    #[test]
    fn the_apply_path_measured_prices_a_call_beyond_its_pairs() {
        let model = sfb_models::ModelSpec::Mlr;
        let s = Shapes {
            j: 10,
            d: 1000,
            nnz: 1000.0,
            sparse_v: false,
            eval_samples: 10,
        };
        let nic = Nic::default();
        let o = SimOptions {
            flops: 1e9,
            mem_bw: 1e10,
            ..SimOptions::default()
        };
        // The model: a pass over W (8·J·D bytes at 1e10 B/s), 2·J·D flops a pair.
        let (model_costs, _) = plan_costs(&o, &model, s, 4, nic);
        assert_eq!(model_costs.apply_per_call, 8e-6);
        assert_eq!(model_costs.apply_per_pair, 2e-5);
        // Measured: 1 ms a call of 4 pairs; the pairs take 80 µs of it.
        let measured = SimOptions {
            measured_apply: Some((1e-3, 4)),
            ..o.clone()
        };
        let (costs, report) = plan_costs(&measured, &model, s, 4, nic);
        assert!((costs.apply_per_call - 9.2e-4).abs() < 1e-12, "{costs:?}");
        assert_eq!(costs.apply_per_pair, 2e-5);
        assert_eq!(report.costs["apply_per_call"], costs.apply_per_call);
        // The flag replaces both; a measurement the pairs alone explain keeps the model's.
        let flag = SimOptions {
            apply_per_call_s: Some(5e-4),
            ..measured
        };
        assert_eq!(plan_costs(&flag, &model, s, 4, nic).0.apply_per_call, 5e-4);
        let noise = SimOptions {
            measured_apply: Some((5e-5, 4)),
            ..o
        };
        assert_eq!(plan_costs(&noise, &model, s, 4, nic).0.apply_per_call, 8e-6);
        let bad = SimOptions {
            apply_per_call_s: Some(-1.0),
            ..SimOptions::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("sim.apply_per_call_s")
        );
    }

    #[test]
    fn calibration_measures_positive_rates() {
        let (f, b) = calibrate(16, 16, 2);
        assert!(f > 1e6 && b > 1e6, "{f} {b}");
    }
}
