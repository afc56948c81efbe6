//! What a peer measures and reports.

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
    /// Seconds between steps: blocked on the consistency model or moving bytes.
    pub wait_s: f64,
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
}

impl PeerMetrics {
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
    /// Largest staleness applied so far.
    pub max_staleness: u64,
}
