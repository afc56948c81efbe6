//! Nodes that share a host's cores ([`Hosts`]): each host keeps a calendar of how many of
//! its cores are in use over virtual time, and a piece of work runs on what is free.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::nanos;

/// Nodes that share hosts: node `i` (in the order given to the
/// [`Network`](super::Network)) runs on host `i / nodes_per_host`, a machine with `cores`
/// cores. Every piece of work a node does (its [`Costs`](super::Costs), and its transport
/// CPU, [`Nic::cpu`](super::Nic::cpu)) runs on its host's cores at up to `threads` cores
/// at once: its cost is core-seconds at one core's speed, and it proceeds at
/// `min(threads, cores not in use)` cores from the moment it starts. So a lone node's work
/// takes its cost (÷ `threads`), and `n` nodes with work at once on `cores < n` cores take
/// `n / cores` times as long, as processes on a shared machine do, while a node that waits
/// on the network leaves its cores to the others.
///
/// The calendar is exact for work that arrives in time order; a node's step runs its work
/// back to back when the step starts, so work a node books for later in its step keeps
/// its place when another node's earlier work is booked afterwards (the cores' total use
/// is conserved: a group of steps ends when their work is done, whoever went first).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hosts {
    /// Nodes per host (at least 1).
    pub nodes_per_host: usize,
    /// Cores of every host (positive).
    pub cores: f64,
    /// Cores one node's work may use at once (positive; `sfb run`'s launcher gives each
    /// of `n` local nodes `max(1, cores / n)` kernel threads).
    pub threads: f64,
}

impl Hosts {
    /// `nodes` nodes on every host of `cores` cores, each with `max(1, ⌊cores / nodes⌋)`
    /// threads (what the launcher gives local nodes).
    pub fn colocated(nodes: usize, cores: usize) -> Self {
        Self {
            nodes_per_host: nodes.max(1),
            cores: cores as f64,
            threads: (cores / nodes.max(1)).max(1) as f64,
        }
    }

    /// Whether every field is in range.
    pub(crate) fn valid(&self) -> bool {
        self.nodes_per_host >= 1
            && self.cores.is_finite()
            && self.cores > 0.0
            && self.threads.is_finite()
            && self.threads > 0.0
    }
}

/// Below this many cores free, a host counts as full (sums of rates are not exact).
const FULL: f64 = 1e-9;

/// One host's cores in use over virtual time: a step function, `used[t]` from `t` until
/// the next key; zero before the first key and from the last key on.
#[derive(Debug, Default)]
pub(crate) struct Calendar {
    cores: f64,
    used: BTreeMap<u64, f64>,
}

impl Calendar {
    pub(crate) fn new(cores: f64) -> Self {
        Self {
            cores,
            used: BTreeMap::new(),
        }
    }

    /// Cores in use at `t`.
    fn at(&self, t: u64) -> f64 {
        self.used.range(..=t).next_back().map_or(0.0, |(_, u)| *u)
    }

    /// Makes `t` a key (with the value in force there).
    fn split(&mut self, t: u64) {
        if !self.used.contains_key(&t) {
            let v = self.at(t);
            self.used.insert(t, v);
        }
    }

    /// Runs `core_secs` of work from `start` at up to `threads` cores, on what is free;
    /// books it and returns when it is done.
    pub(crate) fn run(&mut self, start: Duration, core_secs: f64, threads: f64) -> Duration {
        if !(core_secs.is_finite() && core_secs > 0.0) {
            return start;
        }
        let mut left = core_secs;
        let mut t = nanos(start);
        self.split(t);
        loop {
            let next = self.used.range(t + 1..).next().map(|(k, _)| *k);
            let used = self.used[&t];
            let free = (self.cores - used).min(threads);
            let rate = if free > FULL {
                free
            } else if next.is_none() {
                // Past the last key the host is idle (a full host with no later key
                // cannot happen; run at full speed rather than loop).
                threads.min(self.cores)
            } else {
                0.0
            };
            if rate > 0.0 {
                // Whole nanoseconds, rounding error forgiven.
                let need = (left / rate * 1e9 - 1e-3).ceil().max(1.0);
                let need = if need < u64::MAX as f64 {
                    need as u64
                } else {
                    u64::MAX
                };
                let end = t.saturating_add(need);
                if next.is_none_or(|n| end <= n) {
                    self.split(end);
                    *self.used.get_mut(&t).expect("split") += rate;
                    return Duration::from_nanos(end);
                }
                let n = next.expect("checked");
                *self.used.get_mut(&t).expect("split") += rate;
                left -= rate * (n - t) as f64 / 1e9;
            }
            t = next.expect("a full segment ends at a later key");
        }
    }

    /// Forgets the calendar before `t` (no work will start earlier).
    pub(crate) fn forget_before(&mut self, t: Duration) {
        let t = nanos(t);
        if self.used.first_key_value().is_none_or(|(k, _)| *k >= t) {
            return;
        }
        let v = self.at(t);
        self.used = self.used.split_off(&t);
        if !self.used.contains_key(&t) && (v != 0.0 || !self.used.is_empty()) {
            self.used.insert(t, v);
        }
    }

    /// Keys held (for tests of the forgetting).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.used.len()
    }
}

/// A node's place on its host: the shared calendar and how many cores it may use.
#[derive(Debug, Clone)]
pub(crate) struct Seat {
    pub(crate) calendar: Arc<Mutex<Calendar>>,
    pub(crate) threads: f64,
}

impl Seat {
    /// Runs `cost` (core-seconds: its time on one core alone) from `start` on the host's
    /// free cores; returns when it is done.
    pub(crate) fn run(&self, start: Duration, cost: Duration) -> Duration {
        self.run_on(start, cost, self.threads)
    }

    /// As [`run`](Self::run), on one core at most (work that one thread does, such as the
    /// transport's on a frame).
    pub(crate) fn run_one(&self, start: Duration, cost: Duration) -> Duration {
        self.run_on(start, cost, self.threads.min(1.0))
    }

    fn run_on(&self, start: Duration, cost: Duration, threads: f64) -> Duration {
        self.calendar
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .run(start, cost.as_secs_f64(), threads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    #[test]
    fn work_alone_takes_its_cost_and_a_crowd_shares_the_cores() {
        let mut c = Calendar::new(2.0);
        // Alone: 10 ms of one core's work takes 10 ms.
        assert_eq!(c.run(ms(0), 0.010, 1.0), ms(10));
        // Eight nodes start 10 ms each at 100 ms on 2 cores: the last is done at 140 ms
        // (80 core-ms on 2 cores), as a fair share would give every one of them.
        let ends: Vec<Duration> = (0..8).map(|_| c.run(ms(100), 0.010, 1.0)).collect();
        assert_eq!(*ends.iter().max().unwrap(), ms(140));
        assert_eq!(*ends.iter().min().unwrap(), ms(110));
        // Work from a node that waited until the others were done runs at full speed.
        assert_eq!(c.run(ms(140), 0.010, 1.0), ms(150));
    }

    #[test]
    fn work_uses_what_is_free_and_at_most_its_threads() {
        let mut c = Calendar::new(2.0);
        // Two threads on an idle host: 20 core-ms in 10 ms.
        assert_eq!(c.run(ms(0), 0.020, 2.0), ms(10));
        // One core busy 0..20 ms: a two-thread job of 30 core-ms from 0 gets one core
        // until 20 ms (20 core-ms), then two (10 core-ms in 5 ms).
        let mut c = Calendar::new(2.0);
        assert_eq!(c.run(ms(0), 0.020, 1.0), ms(20));
        assert_eq!(c.run(ms(0), 0.030, 2.0), ms(25));
        // Fractional cores: 1.5 cores free → 15 core-ms in 10 ms.
        let mut c = Calendar::new(2.0);
        c.run(ms(0), 0.005, 0.5);
        assert_eq!(c.run(ms(0), 0.015, 2.0), ms(10));
    }

    #[test]
    fn a_full_host_makes_work_wait_and_forgetting_keeps_the_future() {
        let mut c = Calendar::new(1.0);
        assert_eq!(c.run(ms(0), 0.010, 1.0), ms(10));
        assert_eq!(c.run(ms(0), 0.010, 1.0), ms(20));
        assert_eq!(c.run(ms(5), 0.001, 1.0), ms(21));
        c.forget_before(ms(15));
        assert!(c.len() <= 3, "{}", c.len());
        // The booking from 15 to 21 ms is still there.
        assert_eq!(c.run(ms(15), 0.001, 1.0), ms(22));
        // Forgetting everything leaves an idle host.
        c.forget_before(ms(1000));
        assert_eq!(c.len(), 0);
        assert_eq!(c.run(ms(1000), 0.001, 1.0), ms(1001));
        // Nothing to do takes no time; a bad cost too.
        assert_eq!(c.run(ms(7), 0.0, 1.0), ms(7));
        assert_eq!(c.run(ms(7), f64::NAN, 1.0), ms(7));
    }
}
