//! What a peer measures and reports.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest staleness tracked individually; larger values share the last bucket.
pub const STALENESS_BUCKETS: usize = 65;

/// Cumulative counters of one peer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerMetrics {
    /// Clocks completed.
    pub clocks: u64,
    /// Samples processed (pairs computed).
    pub samples: u64,
    /// Seconds in `compute_sv` (and committing).
    pub compute_s: f64,
    /// Seconds applying updates (kernel and `prox`).
    pub apply_s: f64,
    /// Seconds between steps while clocks remain: blocked on the consistency model or
    /// moving bytes.
    pub wait_s: f64,
    /// Seconds after the last clock waiting for in-neighbours' remaining batches (the
    /// end-of-run flush; a continuous job would not have it).
    pub flush_s: f64,
    /// Seconds evaluating held-out objective (excluded from the others).
    pub eval_s: f64,
    /// Message bytes sent (encoded size, all destinations).
    pub bytes_sent: u64,
    /// Message bytes received.
    pub bytes_received: u64,
    /// Batches applied, own included.
    pub batches_applied: u64,
    /// `staleness[s]` = applied batches that were `s` clocks late (the last bucket holds
    /// everything at least that late). Staleness of batch clock `c` applied before computing
    /// clock `t` is `t − 1 − c` (0 when not late).
    pub staleness: Vec<u64>,
    /// Largest staleness applied.
    pub max_staleness: u64,
    /// Clocks the peer was held at by flow control (an awaited node more than
    /// [`Config::max_drift`](crate::Config::max_drift) clocks behind).
    #[serde(default)]
    pub drift_waits: u64,
    /// Nodes this one lost during the run, each with the clock this node had completed
    /// when it learned of the loss.
    #[serde(default)]
    pub lost_peers: Vec<(u32, u64)>,
    /// The topology this node last switched to after losing peers (an identifier of the
    /// repaired graph, the same on every survivor), if it did.
    #[serde(default)]
    pub topology: Option<String>,
    /// Nodes that came back (`--rejoin`) after being lost, each with this node's clock
    /// then.
    #[serde(default)]
    pub rejoined_peers: Vec<(u32, u64)>,
    /// Samples of lost peers' shards this peer trains on now (their shards taken over;
    /// 0 when none is lost, or when lost shards are dropped).
    #[serde(default)]
    pub taken_over_samples: u64,
    /// Seconds spent choosing what this peer sends: re-compressing its batches
    /// (`--compress`) or prioritizing their pairs (`--prioritize`).
    #[serde(default)]
    pub compress_s: f64,
    /// Pairs held back for a later clock after this peer's last batch (`--prioritize`).
    #[serde(default)]
    pub held_back_pairs: u64,
    /// Pairs its last clock was allowed to send (`--prioritize POLICY:auto`; `None`
    /// otherwise): the measured link rate times the clock's work, over a pair's bytes.
    #[serde(default)]
    pub send_budget: Option<u64>,
    /// The link rate its transport measured, bytes per second (`--prioritize
    /// POLICY:auto`, once measured).
    #[serde(default)]
    pub link_bytes_per_s: Option<f64>,
    /// `‖·‖_F²` of the updates this peer computed (`--prioritize`; 0 without it).
    #[serde(default)]
    pub computed_sq: f64,
    /// `‖·‖_F²` of what it lost bounding what it held back (`--prioritize`).
    #[serde(default)]
    pub lost_sq: f64,
    /// `‖·‖_F²` of each batch's budget-many largest pairs, summed (`--prioritize`;
    /// [`PriorityStats::top_sq`](crate::prioritize::PriorityStats::top_sq)).
    #[serde(default)]
    pub top_sq: f64,
    /// Other peers' batches this peer forwarded, one per arc (`--relay`).
    #[serde(default)]
    pub relayed_sent: u64,
    /// Batches this peer received by relay, not from their origin (`--relay`).
    #[serde(default)]
    pub relayed_received: u64,
    /// Forwarded batches this peer re-compressed before forwarding (`--relay-compress`).
    #[serde(default)]
    pub relay_compressed: u64,
    /// Relayed batches this peer will never get: a peer that became its parent in their
    /// origin's tree after a loss no longer held them (`--relay`, see
    /// [`crate::relay`]'s peer loss).
    #[serde(default)]
    pub relay_missed: u64,
    /// Clocks whose apply was re-compressed (`--aggregate`).
    #[serde(default)]
    pub aggregated_applies: u64,
    /// Consensus pairs of the gossip mode: sent (own, once per clock) plus folded into
    /// the copies of the in-neighbours' replicas ([`crate::gossip`]).
    #[serde(default)]
    pub mix_pairs: u64,
    /// The stop this node took ([`crate::stop`]), if a stop rule ended (or would have
    /// ended) the run.
    #[serde(default)]
    pub stop: Option<crate::stop::Stop>,
    /// FMS clients: `read_differential[d]` = clocks this client computed on a W `d` clocks
    /// old (clock `t` on the server's W of clock `t − d`; the last bucket holds everything
    /// at least that old): ESSP's clock differential. Empty for SFB peers.
    #[serde(default)]
    pub read_differential: Vec<u64>,
    /// The largest ratio of a received batch's step size to the largest step accepted in
    /// the clocks before it ([`crate::bound`]): how close a healthy run came to the step
    /// bound. 0 when no batch was compared.
    #[serde(default)]
    pub max_step_ratio: f64,
}

impl PeerMetrics {
    /// The nodes this one counts lost now: those lost more often than they came back
    /// ([`lost_peers`](Self::lost_peers), [`rejoined_peers`](Self::rejoined_peers); each
    /// return follows a loss), in id order.
    pub fn gone(&self) -> Vec<crate::PeerId> {
        let mut count = std::collections::BTreeMap::<u32, i64>::new();
        for &(p, _) in &self.lost_peers {
            *count.entry(p).or_default() += 1;
        }
        for &(p, _) in &self.rejoined_peers {
            *count.entry(p).or_default() -= 1;
        }
        count
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(p, _)| crate::PeerId(p))
            .collect()
    }

    /// Records one clock computed on a W `d` clocks old ([`read_differential`](Self::read_differential)).
    pub fn record_read(&mut self, d: u64) {
        if self.read_differential.len() < STALENESS_BUCKETS {
            self.read_differential.resize(STALENESS_BUCKETS, 0);
        }
        let i = (d as usize).min(STALENESS_BUCKETS - 1);
        self.read_differential[i] += 1;
    }

    /// Records one applied batch's staleness.
    pub fn record_staleness(&mut self, s: u64) {
        if self.staleness.len() < STALENESS_BUCKETS {
            self.staleness.resize(STALENESS_BUCKETS, 0);
        }
        let i = (s as usize).min(STALENESS_BUCKETS - 1);
        self.staleness[i] += 1;
        self.max_staleness = self.max_staleness.max(s);
        self.batches_applied += 1;
    }

    /// Staleness histogram with trailing empty buckets trimmed.
    pub fn staleness_trimmed(&self) -> &[u64] {
        let n = self
            .staleness
            .iter()
            .rposition(|&c| c > 0)
            .map_or(0, |i| i + 1);
        &self.staleness[..n]
    }
}

/// One line of a run's metrics (`--metrics FILE.jsonl`): a peer after a clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockRecord {
    /// Peer index.
    pub peer: u32,
    /// Clocks completed.
    pub clock: u64,
    /// Seconds since the peer started.
    pub wall_s: f64,
    /// Held-out objective, when evaluated at this clock.
    pub objective: Option<f64>,
    /// Held-out accuracy, when evaluated and the model is a classifier.
    pub test_accuracy: Option<f64>,
    /// Samples processed so far.
    pub samples: u64,
    /// Samples per second of wall time so far.
    pub samples_per_s: f64,
    /// Bytes sent so far.
    pub bytes_sent: u64,
    /// Bytes received so far.
    pub bytes_received: u64,
    /// Cumulative compute seconds.
    pub compute_s: f64,
    /// Cumulative apply seconds.
    pub apply_s: f64,
    /// Cumulative wait seconds.
    pub wait_s: f64,
    /// Cumulative evaluation seconds (subtract from `wall_s` for training time).
    #[serde(default)]
    pub eval_s: f64,
    /// Largest staleness applied so far.
    pub max_staleness: u64,
    /// Pairs this clock was allowed to send (`--prioritize POLICY:auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_budget: Option<u64>,
    /// The link rate the transport measured, bytes per second (`--prioritize
    /// POLICY:auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bytes_per_s: Option<f64>,
}

/// One peer's end-of-run report, the input of [`Summary::aggregate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReport {
    /// Peer index.
    pub peer: u32,
    /// Seconds from the peer's first step to its end.
    pub wall_s: f64,
    /// Its counters.
    pub metrics: PeerMetrics,
    /// Held-out objective of its final replica.
    pub objective: Option<f64>,
    /// Held-out accuracy of its final replica.
    pub test_accuracy: Option<f64>,
    /// [`Replica::checksum`](crate::Replica::checksum) of its final replica.
    pub checksum: String,
}

/// What a run was (the descriptive part of a [`Summary`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// `sfb` or `fms`.
    pub backend: String,
    /// `mem` or `libp2p`.
    pub transport: String,
    /// Model name.
    pub model: String,
    /// Consistency model, as parsed (`bsp`, `ssp:2`, …).
    pub consistency: String,
    /// Peers `P`.
    pub peers: usize,
    /// Out-degree `Q` (`P − 1` for full broadcast).
    pub out_degree: usize,
    /// Clocks run.
    pub clocks: u64,
    /// Mini-batch size per peer and clock.
    pub batch: usize,
    /// The optimizer, as [`crate::Optimizer`] displays it (`factored`, `sgd, schedule
    /// inv-sqrt:100`, …).
    pub optimizer: String,
    /// The learning rate every node used.
    pub lr: f32,
    /// What the model trains on, after its preprocessing (e.g. `standard scaling (51 %
    /// non-zero) · intercept`); empty when not known (a custom model's data).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data: String,
    /// The stop rules, as written ([`crate::stop::Rule`]); empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub until: Vec<String>,
    /// Where an SFB run's topology came from and its hop cost; `None` for FMS and when
    /// not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyInfo>,
}

/// The `topology` block of a summary: which graph an SFB run trained on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyInfo {
    /// `full` (broadcast), the construction or optimizer that built it (`optimal`,
    /// `kautz`, …), `explicit` (out-lists given in the spec or to the builder), or
    /// `file PATH`.
    pub source: String,
    /// Σ over ordered peer pairs of the hop distance (the SFB paper's eq. 3; `P(P − 1)`
    /// for full broadcast).
    pub cost: u64,
    /// How batches travel on it: `full` (broadcast), or the partial-broadcast mode the run
    /// took, named or chosen for it: `tree`, `gossip`, `paper`, `relay`. Absent when not
    /// known (summaries of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// The `stop` block of a summary: the stop the run's stop rules agreed
/// ([`crate::stop`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopSummary {
    /// The rule met, as written (`gap<=1e-6`).
    pub rule: String,
    /// The node whose evaluation met it.
    pub peer: u32,
    /// The clock after which that evaluation was made.
    pub clock: u64,
    /// The figure the rule saw (objective, gap, accuracy, or the plateau's best
    /// objective).
    pub value: f64,
    /// The clock every node stopped at (the run's `clocks` when it ended the run; the
    /// run's last clock came first when larger).
    pub at: u64,
}

fn one() -> f64 {
    1.0
}

/// The `sim` block of a simulated run's summary: the network and machine it modelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    /// Simulated seconds from the start until the last node finished.
    pub simulated_s: f64,
    /// Events the simulator processed (frame arrivals and node steps).
    pub events: u64,
    /// Every node's NIC egress rate, bytes per second (absent: unlimited).
    pub egress_bytes_per_s: Option<f64>,
    /// Every node's NIC ingress rate, bytes per second (absent: unlimited).
    pub ingress_bytes_per_s: Option<f64>,
    /// CPU per byte the transport spends at each end, as bytes per second of a node's
    /// CPU after any host sharing (absent: free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_cpu_bytes_per_s: Option<f64>,
    /// CPU per frame the transport spends at each end beyond its bytes, seconds of a
    /// node's CPU after any host sharing (absent: free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_cpu_frame_s: Option<f64>,
    /// Factor by which host sharing (`--colocate`) slows every node's work (1: a host
    /// per node).
    #[serde(default = "one")]
    pub host_share: f64,
    /// Mean one-way link delay, seconds.
    pub latency_s: f64,
    /// Half-width of the uniform delay jitter, seconds.
    pub jitter_s: f64,
    /// The modelled machine's GEMM rate, flop per second.
    pub flops: f64,
    /// The modelled machine's memory bandwidth, bytes per second.
    pub mem_bw: f64,
    /// Whether `flops` and `mem_bw` were measured on the machine that ran the simulation
    /// (`--costs calibrate`) rather than given.
    pub calibrated: bool,
    /// The modelled cost of each unit of work, seconds (`compute_per_sample`,
    /// `apply_per_pair`, …), derived from the rates and the run's shapes.
    pub costs: BTreeMap<String, f64>,
    /// Whether the nodes did no arithmetic (`--timing-only`): traffic and times only, no
    /// learning.
    #[serde(default)]
    pub timing_only: bool,
    /// The faults the run was given and what came of them, one line each (a crash, a
    /// partition, a pause; a node that stopped as the minority of a cut). Absent when
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
}

/// The `--summary` JSON of a run (keys fixed by DESIGN.md's CLI contract, plus extras).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// `sfb` or `fms`.
    pub backend: String,
    /// `mem` or `libp2p`.
    pub transport: String,
    /// Model name.
    pub model: String,
    /// Consistency model.
    pub consistency: String,
    /// Peers.
    pub peers: usize,
    /// Out-degree.
    pub out_degree: usize,
    /// Clocks.
    pub clocks: u64,
    /// Mini-batch size per peer and clock.
    pub batch: usize,
    /// The optimizer (method and schedule).
    #[serde(default)]
    pub optimizer: String,
    /// The learning rate every node used.
    #[serde(default)]
    pub lr: f64,
    /// The data's preprocessing ([`RunInfo::data`]); absent when not known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data: String,
    /// The topology's source and hop cost ([`RunInfo::topology`]); absent for FMS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyInfo>,
    /// Longest peer wall time, seconds.
    pub wall_s: f64,
    /// Mean over peers of the held-out objective of their final replicas.
    pub objective: Option<f64>,
    /// Mean over peers of the held-out accuracy of their final replicas.
    pub test_accuracy: Option<f64>,
    /// Samples processed by all peers.
    pub samples: u64,
    /// `samples / wall_s`.
    pub samples_per_s: f64,
    /// Message bytes sent by all peers.
    pub bytes_sent: u64,
    /// `bytes_sent / clocks`: cluster-wide bytes per clock.
    pub bytes_per_clock: f64,
    /// `bytes_per_clock / peers`.
    pub bytes_per_clock_per_peer: f64,
    /// Mean over peers of compute seconds.
    pub compute_s: f64,
    /// Mean over peers of apply seconds.
    pub apply_s: f64,
    /// Mean over peers of wait seconds.
    pub wait_s: f64,
    /// Mean over peers of end-of-run flush seconds.
    pub flush_s: f64,
    /// Mean over peers of the seconds spent choosing what they send: re-compressing their
    /// batches (`--compress`) or prioritizing their pairs (`--prioritize`); absent with
    /// neither.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub compress_s: f64,
    /// Mean over peers of evaluation seconds.
    pub eval_s: f64,
    /// Largest staleness any peer applied.
    pub max_staleness: u64,
    /// Summed staleness histogram (index = clocks late).
    pub staleness_histogram: Vec<u64>,
    /// One checksum per peer.
    pub replica_checksums: Vec<String>,
    /// `max_p ‖W_p − W̄‖_F / ‖W̄‖_F` over the final replicas (W̄ their mean); `None` when
    /// the replicas were not gathered in one place.
    pub max_replica_divergence: Option<f64>,
    /// Nodes lost during the run (the others trained on without them), each with the
    /// earliest clock at which a survivor learned of it; the figures above are the
    /// survivors'. Absent when no node was lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_peers: Vec<LostPeer>,
    /// Lost nodes that came back (`--rejoin`, or a simulated restart), each with the
    /// earliest clock at which a node took it back. Absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejoined_peers: Vec<LostPeer>,
    /// Samples of lost peers' shards the survivors trained on at the end (`--lost-shards
    /// takeover`), summed over them: the lost shards' sizes when every one was taken over.
    /// Absent when zero (nobody lost, shards dropped, or every lost peer back).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub taken_over_samples: u64,
    /// Share of the updates' squared Frobenius norm the peers computed and never sent
    /// (`--prioritize` with a budget below what they compute: lost bounding the backlog),
    /// `Σ lost / Σ computed` over peers. Absent when zero.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub lost_update_energy: f64,
    /// Share of the updates' squared Frobenius norm in each batch's budget-many largest
    /// pairs (`--prioritize`), `Σ top / Σ computed` over peers: near the budget's share
    /// when the pairs' norms are alike (ordering by magnitude has nothing to choose by),
    /// near 1 when a few pairs carry the update. Absent without `--prioritize`.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub top_pair_energy: f64,
    /// FMS: the clients' clock differentials summed (index `d`: clocks computed on a W `d`
    /// clocks old; ESSP's Fig. 2), trailing zeros trimmed. Absent for SFB runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_differential: Vec<u64>,
    /// The largest ratio over peers of a received batch's step size to the largest step
    /// the receiver accepted in the clocks before it ([`crate::bound`]; the bound refuses
    /// a batch above `step_bound`, default 1,000). Absent when no batch was compared
    /// (FMS, the tree and gossip modes' sums).
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub max_step_ratio: f64,
    /// Share of all the run's batches (`P` peers × clocks) the replica that saw the
    /// fewest applied, own included: 1 with full broadcast or relay, `(Q+1)/P` with
    /// partial broadcast. Absent for FMS runs and partial summaries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_coverage: Option<f64>,
    /// Batches the peers forwarded for others (`--relay`), one per arc. Absent when
    /// zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub relayed_batches: u64,
    /// Applies re-compressed before they were applied (`--aggregate`), summed over peers.
    /// Absent when zero.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub aggregated_applies: u64,
    /// Consensus pairs of the gossip mode per peer per clock (sent plus folded into the
    /// copies of the in-neighbours' replicas), the mean over peers. Absent when zero.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub mix_pairs_per_clock: f64,
    /// Why the run stopped before its end, when it did: the figures are then those of each
    /// node's last record ([`Summary::partial`]), and there are no checksums. Absent for a
    /// run that completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The stop the stop rules (`--until`) agreed, when one was met; `clocks` is then the
    /// clocks run. Absent when no rule was met (or none was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopSummary>,
    /// What `sfb sim` modelled (present only for simulated runs, whose times — `wall_s`,
    /// `compute_s`, … — are then simulated seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimReport>,
    /// Model-specific figures (e.g. `duality_gap`, `reconstruction_error`) of the peers'
    /// final evaluations, each the mean over the peers that reported it ([`mean_extras`]);
    /// serialized as extra top-level keys. Empty from [`aggregate`](Self::aggregate): the
    /// caller fills it.
    #[serde(flatten)]
    pub extra: BTreeMap<String, f64>,
}

impl Summary {
    /// Combines the reports of an FMS run: the clients' reports as in
    /// [`aggregate`](Self::aggregate) (one checksum per client; means over clients), plus
    /// the parameter server's traffic in `bytes_sent` and the per-clock figures derived
    /// from it (its full-W pushes are FMS's bottleneck, so they must count).
    pub fn aggregate_with_server(
        info: RunInfo,
        clients: &[PeerReport],
        server: &PeerMetrics,
        divergence: Option<f64>,
    ) -> Self {
        let mut s = Self::aggregate(info, clients, divergence);
        for &(peer, clock) in &server.lost_peers {
            match s.lost_peers.iter_mut().find(|l| l.peer == peer) {
                Some(l) => l.clock = l.clock.min(clock),
                None => s.lost_peers.push(LostPeer { peer, clock }),
            }
        }
        s.lost_peers.sort_by_key(|l| l.peer);
        s.bytes_sent += server.bytes_sent;
        let clocks = s.clocks.max(1) as f64;
        s.bytes_per_clock = s.bytes_sent as f64 / clocks;
        s.bytes_per_clock_per_peer = s.bytes_per_clock / s.peers.max(1) as f64;
        s
    }

    /// Combines per-peer reports.
    pub fn aggregate(mut info: RunInfo, reports: &[PeerReport], divergence: Option<f64>) -> Self {
        let stop = reports
            .iter()
            .filter_map(|r| r.metrics.stop)
            .reduce(|a, b| if b.better_than(&a) { b } else { a });
        if let Some(s) = stop {
            info.clocks = info.clocks.min(s.at);
        }
        let stop = stop.map(|s| StopSummary {
            rule: info
                .until
                .get(s.rule as usize)
                .cloned()
                .unwrap_or_else(|| format!("rule {}", s.rule)),
            peer: s.by,
            clock: s.clock,
            value: s.value,
            at: s.at,
        });
        let n = reports.len().max(1) as f64;
        let mean = |f: &dyn Fn(&PeerReport) -> f64| reports.iter().map(f).sum::<f64>() / n;
        let mean_opt = |f: &dyn Fn(&PeerReport) -> Option<f64>| {
            let v: Vec<f64> = reports.iter().filter_map(f).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let wall_s = reports.iter().map(|r| r.wall_s).fold(0.0, f64::max);
        let samples: u64 = reports.iter().map(|r| r.metrics.samples).sum();
        let bytes_sent: u64 = reports.iter().map(|r| r.metrics.bytes_sent).sum();
        let mut hist = vec![0u64; 0];
        for r in reports {
            let h = r.metrics.staleness_trimmed();
            if hist.len() < h.len() {
                hist.resize(h.len(), 0);
            }
            for (a, b) in hist.iter_mut().zip(h) {
                *a += b;
            }
        }
        let clocks = info.clocks.max(1) as f64;
        let update_coverage = (info.backend == "sfb" && !reports.is_empty()).then(|| {
            let all = (info.peers as u64 * info.clocks).max(1) as f64;
            reports
                .iter()
                .map(|r| r.metrics.batches_applied as f64 / all)
                .fold(f64::INFINITY, f64::min)
        });
        Summary {
            backend: info.backend,
            transport: info.transport,
            model: info.model,
            consistency: info.consistency,
            peers: info.peers,
            out_degree: info.out_degree,
            clocks: info.clocks,
            batch: info.batch,
            optimizer: info.optimizer,
            lr: f64::from(info.lr),
            data: info.data,
            topology: info.topology,
            wall_s,
            objective: mean_opt(&|r| r.objective),
            test_accuracy: mean_opt(&|r| r.test_accuracy),
            samples,
            samples_per_s: if wall_s > 0.0 {
                samples as f64 / wall_s
            } else {
                0.0
            },
            bytes_sent,
            bytes_per_clock: bytes_sent as f64 / clocks,
            bytes_per_clock_per_peer: bytes_sent as f64 / clocks / info.peers.max(1) as f64,
            compute_s: mean(&|r| r.metrics.compute_s),
            apply_s: mean(&|r| r.metrics.apply_s),
            wait_s: mean(&|r| r.metrics.wait_s),
            flush_s: mean(&|r| r.metrics.flush_s),
            compress_s: mean(&|r| r.metrics.compress_s),
            eval_s: mean(&|r| r.metrics.eval_s),
            max_staleness: reports
                .iter()
                .map(|r| r.metrics.max_staleness)
                .max()
                .unwrap_or(0),
            staleness_histogram: hist,
            read_differential: {
                let mut h = vec![0u64; 0];
                for r in reports {
                    let d = &r.metrics.read_differential;
                    if h.len() < d.len() {
                        h.resize(d.len(), 0);
                    }
                    for (a, b) in h.iter_mut().zip(d) {
                        *a += b;
                    }
                }
                while h.last() == Some(&0) {
                    h.pop();
                }
                h
            },
            max_step_ratio: reports
                .iter()
                .map(|r| r.metrics.max_step_ratio)
                .fold(0.0, f64::max),
            replica_checksums: reports.iter().map(|r| r.checksum.clone()).collect(),
            max_replica_divergence: divergence,
            lost_peers: earliest(reports, |m| &m.lost_peers),
            rejoined_peers: earliest(reports, |m| &m.rejoined_peers),
            taken_over_samples: reports.iter().map(|r| r.metrics.taken_over_samples).sum(),
            lost_update_energy: {
                let lost: f64 = reports.iter().map(|r| r.metrics.lost_sq).sum();
                let computed: f64 = reports.iter().map(|r| r.metrics.computed_sq).sum();
                if computed > 0.0 { lost / computed } else { 0.0 }
            },
            top_pair_energy: {
                let top: f64 = reports.iter().map(|r| r.metrics.top_sq).sum();
                let computed: f64 = reports.iter().map(|r| r.metrics.computed_sq).sum();
                if computed > 0.0 { top / computed } else { 0.0 }
            },
            update_coverage,
            relayed_batches: reports.iter().map(|r| r.metrics.relayed_sent).sum(),
            aggregated_applies: reports.iter().map(|r| r.metrics.aggregated_applies).sum(),
            mix_pairs_per_clock: {
                let pairs: u64 = reports.iter().map(|r| r.metrics.mix_pairs).sum();
                let clocks: u64 = reports.iter().map(|r| r.metrics.clocks).sum();
                if clocks == 0 {
                    0.0
                } else {
                    pairs as f64 / clocks as f64
                }
            },
            failed: None,
            stop,
            sim: None,
            extra: BTreeMap::new(),
        }
    }

    /// The summary of a run that stopped with `failed`, from each node's last per-clock
    /// record (worker records only; the FMS server's, `peer = u32::MAX`, add their bytes):
    /// the clocks completed are the fewest any worker completed, the objective is the mean
    /// of the last evaluations.
    pub fn partial(mut info: RunInfo, last: &[ClockRecord], failed: String) -> Self {
        let workers: Vec<&ClockRecord> = last.iter().filter(|r| r.peer != u32::MAX).collect();
        let reports: Vec<PeerReport> = workers
            .iter()
            .map(|r| PeerReport {
                peer: r.peer,
                wall_s: r.wall_s,
                metrics: PeerMetrics {
                    clocks: r.clock,
                    samples: r.samples,
                    compute_s: r.compute_s,
                    apply_s: r.apply_s,
                    wait_s: r.wait_s,
                    eval_s: r.eval_s,
                    bytes_sent: r.bytes_sent,
                    bytes_received: r.bytes_received,
                    max_staleness: r.max_staleness,
                    ..PeerMetrics::default()
                },
                objective: r.objective,
                test_accuracy: r.test_accuracy,
                checksum: String::new(),
            })
            .collect();
        info.clocks = workers.iter().map(|r| r.clock).min().unwrap_or(0);
        let mut s = Self::aggregate(info, &reports, None);
        s.bytes_sent += last
            .iter()
            .filter(|r| r.peer == u32::MAX)
            .map(|r| r.bytes_sent)
            .sum::<u64>();
        s.replica_checksums.clear();
        s.update_coverage = None;
        s.failed = Some(failed);
        s
    }
}

/// A node lost during a run ([`Summary::lost_peers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostPeer {
    /// The node (`u32::MAX`: the FMS server).
    pub peer: u32,
    /// The earliest clock a survivor had completed when it learned of the loss.
    pub clock: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

/// Every node some report names in `list` (lost, or back), with the earliest clock, by
/// node.
fn earliest(
    reports: &[PeerReport],
    list: impl Fn(&PeerMetrics) -> &Vec<(u32, u64)>,
) -> Vec<LostPeer> {
    let mut by: BTreeMap<u32, u64> = BTreeMap::new();
    for r in reports {
        for &(peer, clock) in list(&r.metrics) {
            let c = by.entry(peer).or_insert(clock);
            *c = (*c).min(clock);
        }
    }
    by.into_iter()
        .map(|(peer, clock)| LostPeer { peer, clock })
        .collect()
}

/// Per key, the mean over the peers' figures that carry it
/// ([`Evaluation::extra`](crate::Evaluation::extra) of each final evaluation).
pub fn mean_extras<'a>(
    peers: impl IntoIterator<Item = &'a crate::Extras>,
) -> BTreeMap<String, f64> {
    let mut acc: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for extras in peers {
        for (k, v) in extras.iter() {
            let e = acc.entry(k.to_string()).or_insert((0.0, 0));
            e.0 += v;
            e.1 += 1;
        }
    }
    acc.into_iter()
        .map(|(k, (s, n))| (k, s / n as f64))
        .collect()
}

/// `max_p ‖W_p − W̄‖_F / ‖W̄‖_F` for replicas of equal shape (0 for identical replicas;
/// `None` for an empty list or mismatched shapes).
pub fn max_divergence(ws: &[ndarray::ArrayView2<'_, f32>]) -> Option<f64> {
    let first = ws.first()?;
    if ws.iter().any(|w| w.dim() != first.dim()) {
        return None;
    }
    let mut mean = ndarray::Array2::<f64>::zeros(first.dim());
    for w in ws {
        mean.zip_mut_with(w, |m, &x| *m += f64::from(x));
    }
    mean.mapv_inplace(|m| m / ws.len() as f64);
    let norm = mean.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-30);
    let worst = ws
        .iter()
        .map(|w| {
            mean.iter()
                .zip(w.iter())
                .map(|(m, &x)| (f64::from(x) - m).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .fold(0.0, f64::max);
    Some(worst / norm)
}

/// The run as a few human-readable lines (what `sfb run` prints).
impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self;
        let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.4}"));
        // A model with its own step rule (SDCA) reports no learning rate.
        let lr = if s.lr > 0.0 {
            format!(" · lr {}", s.lr as f32)
        } else {
            String::new()
        };
        writeln!(
            f,
            "{} over {} · {} peers · Q={} · {} · {} clocks × K={} · {}{lr}",
            s.backend,
            s.transport,
            s.peers,
            s.out_degree,
            s.consistency,
            s.clocks,
            s.batch,
            s.optimizer,
        )?;
        if !s.data.is_empty() {
            writeln!(f, "  {} · data: {}", s.model, s.data)?;
        }
        if let Some(t) = &s.topology {
            writeln!(
                f,
                "  topology: {} · cost {} (Σ hop distances)",
                t.source, t.cost
            )?;
        }
        writeln!(
            f,
            "  objective {}  test accuracy {}  wall {:.2}s  {:.0} samples/s",
            opt(s.objective),
            opt(s.test_accuracy),
            s.wall_s,
            s.samples_per_s
        )?;
        writeln!(
            f,
            "  per peer: compute {:.3}s  apply {:.3}s  wait {:.3}s  final flush {:.3}s  eval {:.3}s",
            s.compute_s, s.apply_s, s.wait_s, s.flush_s, s.eval_s
        )?;
        writeln!(
            f,
            "  bytes sent {} ({:.0} per clock, {:.0} per clock per peer)  max staleness {}",
            s.bytes_sent, s.bytes_per_clock, s.bytes_per_clock_per_peer, s.max_staleness
        )?;
        if let Some(sim) = &s.sim {
            let rate = |r: Option<f64>| {
                r.map_or("unlimited".into(), |r| format!("{:.3} Gbit/s", r * 8e-9))
            };
            writeln!(
                f,
                "  simulated {:.4}s ({:.3} ms per clock; {} events): NIC egress {} ingress {}, \
                 latency {:.0} µs ± {:.0} µs, {:.3e} flop/s{}, {:.3e} B/s{}",
                sim.simulated_s,
                1e3 * sim.simulated_s / s.clocks.max(1) as f64,
                sim.events,
                rate(sim.egress_bytes_per_s),
                rate(sim.ingress_bytes_per_s),
                sim.latency_s * 1e6,
                sim.jitter_s * 1e6,
                sim.flops,
                if sim.calibrated {
                    " (calibrated here)"
                } else {
                    ""
                },
                sim.mem_bw,
                if sim.timing_only {
                    "; timing only (no arithmetic)"
                } else {
                    ""
                },
            )?;
        }
        if s.relayed_batches > 0 || s.update_coverage.is_some_and(|c| c < 1.0) {
            let coverage = s
                .update_coverage
                .map_or("-".into(), |c| format!("{:.0}%", 100.0 * c));
            writeln!(
                f,
                "  each replica applied at least {coverage} of the updates; {} batches relayed",
                s.relayed_batches
            )?;
        }
        if !s.extra.is_empty() {
            let figures: Vec<String> = s
                .extra
                .iter()
                .map(|(k, v)| {
                    if v.abs() < 1e-3 && *v != 0.0 {
                        format!("{k} {v:.3e}")
                    } else if v.fract() == 0.0 && v.abs() < 1e15 {
                        // Counts (e.g. the tbf counters of --netns).
                        format!("{k} {v:.0}")
                    } else {
                        format!("{k} {v:.6}")
                    }
                })
                .collect();
            writeln!(f, "  {}", figures.join("  "))?;
        }
        if !s.lost_peers.is_empty() {
            let lost: Vec<String> = s
                .lost_peers
                .iter()
                .map(|l| {
                    let who = if l.peer == u32::MAX {
                        "the server".to_string()
                    } else {
                        format!("peer {}", l.peer)
                    };
                    format!("{who} at clock {}", l.clock)
                })
                .collect();
            writeln!(
                f,
                "  lost {}; the survivors trained on without it",
                lost.join(", ")
            )?;
        }
        if !s.rejoined_peers.is_empty() {
            let back: Vec<String> = s
                .rejoined_peers
                .iter()
                .map(|l| format!("peer {} at clock {}", l.peer, l.clock))
                .collect();
            writeln!(f, "  back in the run: {}", back.join(", "))?;
        }
        if let Some(stop) = &s.stop {
            let node = if stop.peer == u32::MAX {
                "the server".to_string()
            } else {
                format!("peer {}", stop.peer)
            };
            let ended = if stop.at <= s.clocks {
                format!("every node stopped at clock {}", stop.at)
            } else {
                format!(
                    "the run's last clock, {}, came before the stop at {}",
                    s.clocks, stop.at
                )
            };
            writeln!(
                f,
                "  stop rule {} met by {node} after clock {} ({:.4e}); {ended}",
                stop.rule, stop.clock, stop.value
            )?;
        }
        if let Some(why) = &s.failed {
            return writeln!(f, "  ended early, after {} clocks: {why}", s.clocks);
        }
        let mut distinct = s.replica_checksums.clone();
        distinct.sort();
        distinct.dedup();
        writeln!(
            f,
            "  replicas: {} distinct checksum(s) of {}; max divergence {}",
            distinct.len(),
            s.replica_checksums.len(),
            s.max_replica_divergence
                .map_or("-".into(), |d| format!("{d:.3e}"))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PeerId;

    #[test]
    fn gone_counts_losses_against_returns() {
        let m = PeerMetrics {
            // p1 lost, back, lost again; p3 lost and back; p4 lost.
            lost_peers: vec![(1, 5), (3, 6), (4, 9), (1, 12)],
            rejoined_peers: vec![(1, 8), (3, 10)],
            ..PeerMetrics::default()
        };
        assert_eq!(m.gone(), [PeerId(1), PeerId(4)]);
        assert!(PeerMetrics::default().gone().is_empty());
    }
}
