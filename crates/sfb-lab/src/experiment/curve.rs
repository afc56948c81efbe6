//! Learning curves from per-clock records, and times to a target.

use std::collections::BTreeMap;

use serde::Serialize;
use sfb_core::metrics::ClockRecord;

/// One point of an arm's learning curve: every peer evaluated at `clock`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    /// Clocks completed.
    pub clock: u64,
    /// Training seconds (wall time minus evaluation time), the slowest peer's.
    pub train_s: f64,
    /// Samples processed by all peers together.
    pub samples: u64,
    /// Held-out objective, mean over peers.
    pub objective: f64,
    /// Held-out accuracy, mean over peers (classifiers).
    pub accuracy: Option<f64>,
}

/// When each clock ended, in training seconds (wall time minus evaluation time): the
/// slowest of the `peers` workers' (server records are left out).
pub fn clock_ends(records: &[ClockRecord], peers: usize) -> BTreeMap<u64, f64> {
    let mut end: BTreeMap<u64, f64> = BTreeMap::new();
    for r in records.iter().filter(|r| (r.peer as usize) < peers) {
        let t = (r.wall_s - r.eval_s).max(0.0);
        let e = end.entry(r.clock).or_insert(t);
        *e = e.max(t);
    }
    end
}

/// How long each clock took, seconds: clock c ends when the slowest of the `peers` workers
/// has finished it (training time: wall minus evaluation), and starts when clock c − 1
/// ended.
pub fn clock_times(records: &[ClockRecord], peers: usize) -> Vec<f64> {
    let mut prev = 0.0;
    clock_ends(records, peers)
        .into_values()
        .map(|t| {
            let d = (t - prev).max(0.0);
            prev = t;
            d
        })
        .collect()
}

/// The learning curve of a run with `peers` workers (server records are left out): the
/// clocks at which every worker evaluated, in order.
///
/// # Complexity
/// O(R log R) for R records.
pub fn curve(records: &[ClockRecord], peers: usize) -> Vec<CurvePoint> {
    let ends = clock_ends(records, peers);
    let mut by_clock: BTreeMap<u64, BTreeMap<u32, &ClockRecord>> = BTreeMap::new();
    for r in records {
        if (r.peer as usize) < peers && r.objective.is_some() {
            // A peer may report a clock twice (its last step, then the final evaluation):
            // keep one record per peer, the later one.
            by_clock.entry(r.clock).or_default().insert(r.peer, r);
        }
    }
    by_clock
        .into_iter()
        .filter(|(_, per_peer)| per_peer.len() == peers)
        .map(|(clock, per_peer)| {
            let rs: Vec<&ClockRecord> = per_peer.into_values().collect();
            let n = rs.len() as f64;
            let accs: Vec<f64> = rs.iter().filter_map(|r| r.test_accuracy).collect();
            CurvePoint {
                clock,
                train_s: ends.get(&clock).copied().unwrap_or(0.0),
                samples: rs.iter().map(|r| r.samples).sum(),
                objective: rs
                    .iter()
                    .map(|r| r.objective.unwrap_or(f64::NAN))
                    .sum::<f64>()
                    / n,
                accuracy: (accs.len() == rs.len()).then(|| accs.iter().sum::<f64>() / n),
            }
        })
        .collect()
}

/// When `curve` first reaches `target` (objective ≤ target): `(seconds, clocks, samples)`,
/// interpolated linearly between the two evaluations around the crossing; `None` when it
/// never does.
pub fn time_to_target(curve: &[CurvePoint], target: f64) -> Option<(f64, f64, f64)> {
    let i = curve.iter().position(|p| p.objective <= target)?;
    let b = &curve[i];
    if i == 0 {
        return Some((b.train_s, b.clock as f64, b.samples as f64));
    }
    let a = &curve[i - 1];
    let f = if a.objective > b.objective {
        ((a.objective - target) / (a.objective - b.objective)).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let lerp = |x: f64, y: f64| x + f * (y - x);
    Some((
        lerp(a.train_s, b.train_s),
        lerp(a.clock as f64, b.clock as f64),
        lerp(a.samples as f64, b.samples as f64),
    ))
}

/// The objective `curve` has at the first evaluation at or after `frac` of `clocks`, and
/// that evaluation's clock.
pub fn target_at(curve: &[CurvePoint], clocks: u64, frac: f64) -> Option<(f64, u64)> {
    let at = (frac * clocks as f64).ceil() as u64;
    curve
        .iter()
        .find(|p| p.clock >= at)
        .map(|p| (p.objective, p.clock))
}

/// The median of `xs` (`None` when empty).
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| {
        let m = v.len() / 2;
        if v.len() % 2 == 1 {
            v[m]
        } else {
            (v[m - 1] + v[m]) / 2.0
        }
    })
}

/// How many of `xs` exceed twice the median.
pub fn slow_clocks(xs: &[f64]) -> usize {
    median(xs).map_or(0, |m| xs.iter().filter(|&&x| x > 2.0 * m).count())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A record of `peer` after `clock` (samples `10·clock`), for tests.
    pub(crate) fn rec(
        peer: u32,
        clock: u64,
        wall: f64,
        eval: f64,
        obj: Option<f64>,
    ) -> ClockRecord {
        ClockRecord {
            peer,
            clock,
            wall_s: wall,
            objective: obj,
            test_accuracy: obj.map(|_| 0.5),
            samples: clock * 10,
            samples_per_s: 0.0,
            bytes_sent: 0,
            bytes_received: 0,
            compute_s: 0.0,
            apply_s: 0.0,
            wait_s: 0.0,
            eval_s: eval,
            max_staleness: 0,
            send_budget: None,
            link_bytes_per_s: None,
        }
    }

    #[test]
    fn curve_needs_every_peer_and_subtracts_evaluation() {
        let rs = vec![
            rec(0, 5, 1.0, 0.2, Some(2.0)),
            rec(1, 5, 1.5, 0.1, Some(4.0)),
            rec(0, 10, 2.0, 0.4, Some(1.0)),
            // peer 1 did not evaluate at clock 10: the point is left out
            rec(1, 10, 2.1, 0.1, None),
            rec(0, 12, 3.0, 0.6, Some(0.5)),
            rec(1, 12, 3.0, 0.2, Some(0.7)),
            rec(u32::MAX, 12, 9.0, 0.0, Some(0.0)), // a server: ignored
        ];
        let c = curve(&rs, 2);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].clock, 5);
        assert!((c[0].train_s - 1.4).abs() < 1e-12);
        assert!((c[0].objective - 3.0).abs() < 1e-12);
        assert_eq!(c[0].samples, 100);
        assert_eq!(c[0].accuracy, Some(0.5));
        assert!((c[1].train_s - 2.8).abs() < 1e-12);
        assert!((c[1].objective - 0.6).abs() < 1e-12);
    }

    #[test]
    fn a_repeated_clock_counts_a_peer_once_with_its_later_record() {
        let rs = vec![
            rec(0, 4, 1.0, 0.0, Some(9.0)),
            rec(0, 4, 1.2, 0.1, Some(2.0)), // final evaluation of the same clock
            rec(1, 4, 1.0, 0.0, Some(4.0)),
        ];
        let c = curve(&rs, 2);
        assert_eq!(c.len(), 1);
        assert!((c[0].objective - 3.0).abs() < 1e-12);
        assert_eq!(c[0].samples, 80);
    }

    #[test]
    fn time_to_target_interpolates_and_reports_misses() {
        let pts = |v: &[(f64, f64)]| -> Vec<CurvePoint> {
            v.iter()
                .enumerate()
                .map(|(i, &(t, o))| CurvePoint {
                    clock: (i as u64 + 1) * 10,
                    train_s: t,
                    samples: (i as u64 + 1) * 100,
                    objective: o,
                    accuracy: None,
                })
                .collect()
        };
        let c = pts(&[(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]);
        let (t, k, s) = time_to_target(&c, 1.5).unwrap();
        assert!((t - 2.5).abs() < 1e-12 && (k - 25.0).abs() < 1e-12 && (s - 250.0).abs() < 1e-9);
        assert_eq!(time_to_target(&c, 3.5).unwrap().0, 1.0);
        assert!(time_to_target(&c, 0.5).is_none());
        assert_eq!(target_at(&c, 30, 0.5), Some((2.0, 20)));
        assert_eq!(target_at(&c, 300, 0.5), None);
    }

    #[test]
    fn a_clock_lasts_until_its_slowest_worker_and_evaluation_is_left_out() {
        let rs = [
            rec(0, 1, 1.0, 0.0, None),
            rec(1, 1, 1.5, 0.0, None),
            rec(0, 2, 2.0, 0.0, None),
            rec(1, 2, 3.5, 0.5, None),        // 3.0 of training
            rec(u32::MAX, 2, 9.0, 0.0, None), // an FMS server: not a worker
        ];
        assert_eq!(clock_times(&rs, 2), [1.5, 1.5]);
    }

    #[test]
    fn median_and_slow_clocks() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(slow_clocks(&[1.0, 1.0, 1.1, 0.9, 2.2, 5.0]), 2);
        assert_eq!(slow_clocks(&[]), 0);
    }
}
