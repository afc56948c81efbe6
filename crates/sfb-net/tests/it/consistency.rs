//! Consistency models as properties, on the deterministic virtual-time driver: seeds ×
//! {BSP, SSP(s), Async, throttled release} × generated topologies × random link delays ×
//! stragglers, with small MLR engines. No threads, no sleeps: every run is a function of
//! its inputs, so a failure shrinks to a minimal, replayable case.
//!
//! The rule under test (`Consistency::may_start`): a peer may start clock `t` when every
//! in-neighbour `q` has delivered `τ_q ≥ t − s` clocks. Consequences checked here:
//! - at the moment a peer starts clock `t`, every in-neighbour has delivered `≥ t − s`
//!   (checked by an observer at every tick, from the frames the driver delivered);
//! - an applied batch is at most `s` clocks late (`max_staleness`, the histogram);
//! - in completed clocks, a peer leads an in-neighbour by at most `s + 1` (it may start
//!   `t = τ_q + s ≤ clock_q + s` and then completes it); with a slow enough straggler the
//!   fast peers reach exactly that lead, and apply its batches exactly `s` clocks late.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use proptest::prelude::*;
use sfb_core::fms::{self, Client, Push, Server};
use sfb_core::wire::Message;
use sfb_core::{
    Config, Consistency, Engine, PeerId, Progress, Shard, StateMachine, Stragglers,
    ThrottledRelease, shard_indices,
};
use sfb_models::{Example, Mlr, synthetic};
use sfb_net::virtual_time::{Costs, FmsNode, Latency, Network, Observer, Outcome};
use sfb_topology::Topology;

pub(crate) const J: usize = 3;
pub(crate) const D: usize = 4;
pub(crate) const BATCH: usize = 2;

pub(crate) fn train() -> &'static [Example] {
    static DATA: OnceLock<Vec<Example>> = OnceLock::new();
    DATA.get_or_init(|| {
        let spec = "classes=3,features=4,samples=96,test=8".parse().unwrap();
        synthetic::classification(&spec, 11).0
    })
}

/// A consistency model, as generated (printable when a case fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Model {
    Bsp,
    Ssp(u64),
    Async,
    Throttle(usize),
}

impl Model {
    pub(crate) fn consistency(self) -> Consistency {
        match self {
            Model::Bsp => Consistency::Bsp,
            Model::Ssp(s) => Consistency::Ssp { staleness: s },
            Model::Async => Consistency::Async,
            Model::Throttle(k) => Consistency::Custom(Arc::new(ThrottledRelease { min_ready: k })),
        }
    }

    /// The staleness bound of the rule, if any.
    pub(crate) fn bound(self) -> Option<u64> {
        self.consistency().staleness_bound()
    }
}

/// A topology, as generated.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Topo {
    Full,
    /// Seeded random Q-out graph (a Hamiltonian cycle plus Q − 1 random arcs per peer).
    Random {
        q: usize,
        seed: u64,
    },
    /// Generalized Kautz graph of out-degree Q.
    Kautz {
        q: usize,
    },
}

impl Topo {
    pub(crate) fn build(self, peers: usize) -> Topology {
        match self {
            Topo::Full => sfb_topology::full(peers),
            Topo::Random { q, seed } => sfb_topology::random(peers, q, seed),
            Topo::Kautz { q } => sfb_topology::kautz(peers, q),
        }
        .unwrap()
    }
}

/// One generated run.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) peers: usize,
    pub(crate) topo: Topo,
    pub(crate) model: Model,
    pub(crate) clocks: u64,
    /// Seed of the link delays.
    pub(crate) net_seed: u64,
    /// Seed of the shards' samplers and the initial W.
    pub(crate) data_seed: u64,
    /// Link delay range, µs.
    pub(crate) latency_us: (u64, u64),
    /// `(peer, delay µs)` of a fixed straggler.
    pub(crate) straggler: Option<(u32, u64)>,
}

fn ids(v: &[usize]) -> Vec<PeerId> {
    v.iter().map(|&q| PeerId(q as u32)).collect()
}

/// MLR engines on `t`, peer `i` at index `i`, evaluated never (only the apply path runs).
fn engines(t: &Topology, consistency: &Consistency, clocks: u64, seed: u64) -> Vec<Engine<Mlr>> {
    engines_with_drift(t, consistency, clocks, seed, sfb_core::DEFAULT_MAX_DRIFT)
}

/// [`engines`] with flow control at `max_drift` clocks.
fn engines_with_drift(
    t: &Topology,
    consistency: &Consistency,
    clocks: u64,
    seed: u64,
    max_drift: u64,
) -> Vec<Engine<Mlr>> {
    engines_with(t, consistency, clocks, seed, |cfg| {
        cfg.max_drift = max_drift
    })
}

/// [`engines`] with each peer's configuration changed by `edit` before it is built.
pub(crate) fn engines_with(
    t: &Topology,
    consistency: &Consistency,
    clocks: u64,
    seed: u64,
    edit: impl Fn(&mut Config),
) -> Vec<Engine<Mlr>> {
    let data = train();
    let p = t.peers();
    (0..p)
        .map(|i| {
            let mut cfg = Config::full_broadcast(PeerId(i as u32), p);
            cfg.out_neighbors = ids(t.out(i));
            cfg.in_neighbors = ids(t.in_neighbours(i));
            cfg.consistency = consistency.clone();
            cfg.clocks = clocks;
            cfg.batch_size = BATCH;
            cfg.lr = 0.3;
            cfg.eval_every = 0;
            edit(&mut cfg);
            let samples = shard_indices(data.len(), p, i)
                .map(|k| data[k].clone())
                .collect();
            let shard = Shard::new(samples, seed ^ (i as u64).wrapping_mul(0x9e37_79b9));
            Engine::new(
                cfg,
                Mlr::new(J, D),
                synthetic::init_w(J, D, 0.01, seed),
                shard,
            )
            .unwrap()
        })
        .collect()
}

pub(crate) fn network<N: StateMachine>(nodes: Vec<N>, c: &Case) -> Network<N> {
    let (lo, hi) = c.latency_us;
    let stragglers = match c.straggler {
        Some((peer, us)) => Stragglers::Fixed {
            peer: PeerId(peer),
            delay: Duration::from_micros(us),
        },
        None => Stragglers::None,
    };
    Network::new(nodes)
        .seed(c.net_seed)
        .latency(Latency::uniform(
            Duration::from_micros(lo),
            Duration::from_micros(hi),
        ))
        .stragglers(stragglers)
}

/// Checks the rule at every tick, from what the driver delivered, and the clock leads in
/// virtual time once the run is over.
struct Checker {
    /// `inn[p]`: p's in-neighbours.
    inn: Vec<Vec<usize>>,
    /// `delivered[p][q]`: clocks q has delivered to p.
    delivered: Vec<Vec<u64>>,
    /// `completed[p][c]`: virtual time when p completed clock c. (The driver runs a step
    /// when it starts, so another node's `clock()` may already count a step that ends in
    /// the virtual future: leads are computed from these times instead.)
    completed: Vec<Vec<Duration>>,
    bound: Option<u64>,
    straggler: Option<usize>,
    /// Largest lead, in completed clocks at the same virtual time, of a fast peer over the
    /// straggler.
    max_lead: i64,
    violations: Vec<String>,
}

impl Checker {
    fn new(t: &Topology, bound: Option<u64>, straggler: Option<usize>) -> Self {
        let p = t.peers();
        Self {
            inn: (0..p).map(|i| t.in_neighbours(i).to_vec()).collect(),
            delivered: vec![vec![0; p]; p],
            completed: vec![Vec::new(); p],
            bound,
            straggler,
            max_lead: 0,
            violations: Vec::new(),
        }
    }

    fn violation(&mut self, v: String) {
        if self.violations.len() < 5 {
            self.violations.push(v);
        }
    }

    /// Clocks `q` had completed at virtual time `at`.
    fn clock_at(&self, q: usize, at: Duration) -> i64 {
        self.completed[q].partition_point(|&x| x <= at) as i64
    }

    /// After the run: whenever peer i completes a clock, it leads each in-neighbour by at
    /// most `s + 1` clocks; the largest lead over the straggler.
    fn finish(&mut self) {
        for i in 0..self.completed.len() {
            for (c, &at) in self.completed[i].iter().enumerate() {
                let mine = c as i64 + 1;
                if let Some(s) = self.bound {
                    for &q in &self.inn[i] {
                        let theirs = self.clock_at(q, at);
                        if mine > theirs + s as i64 + 1 && self.violations.len() < 5 {
                            self.violations.push(format!(
                                "{at:?}: p{i} at clock {mine} leads in-neighbour p{q} at {theirs} by more than s+1 = {}",
                                s + 1
                            ));
                        }
                    }
                }
                if let Some(str) = self.straggler.filter(|&str| str != i) {
                    self.max_lead = self.max_lead.max(mine - self.clock_at(str, at));
                }
            }
        }
    }
}

impl Observer<Engine<Mlr>> for Checker {
    fn on_deliver(&mut self, at: Duration, from: PeerId, to: PeerId, msg: &Message) {
        let Message::Factors { batch, .. } = msg else {
            return self.violation(format!("{to} got a non-factor frame from {from}"));
        };
        let got = self.delivered[to.index()][from.index()];
        if batch.clock != got {
            let v = format!(
                "{at:?}: link {from}→{to} delivered clock {} after {got} clocks (not FIFO)",
                batch.clock
            );
            self.violation(v);
        }
        self.delivered[to.index()][from.index()] += 1;
    }

    fn on_tick(&mut self, at: Duration, i: usize, progress: Progress, nodes: &[Engine<Mlr>]) {
        if progress != Progress::Stepped {
            return;
        }
        // Peer i just started (and completed) clock t.
        let t = nodes[i].clock() - 1;
        self.completed[i].push(at);
        if let Some(s) = self.bound {
            for k in 0..self.inn[i].len() {
                let q = self.inn[i][k];
                let d = self.delivered[i][q];
                if d + s < t {
                    let v =
                        format!("{at:?}: p{i} started clock {t} with {d} clocks of p{q} (s={s})");
                    self.violation(v);
                }
            }
        }
    }
}

/// Runs `c` with a checker; `Err` with the run's error text.
fn run_checked(c: &Case) -> Result<(Outcome<Engine<Mlr>>, Checker, Topology), String> {
    let t = c.topo.build(c.peers);
    let mut checker = Checker::new(&t, c.model.bound(), c.straggler.map(|(p, _)| p as usize));
    let nodes = engines(&t, &c.model.consistency(), c.clocks, c.data_seed);
    let out = network(nodes, c)
        .run_with(&mut checker)
        .map_err(|e| e.to_string())?;
    checker.finish();
    Ok((out, checker, t))
}

pub(crate) fn model() -> impl Strategy<Value = Model> {
    prop_oneof![
        Just(Model::Bsp),
        (0..=4u64).prop_map(Model::Ssp),
        Just(Model::Async),
        (1..=3usize).prop_map(Model::Throttle),
    ]
}

pub(crate) fn topo(peers: usize) -> impl Strategy<Value = Topo> {
    prop_oneof![
        Just(Topo::Full),
        (1..peers, any::<u64>()).prop_map(|(q, seed)| Topo::Random { q, seed }),
        (1..peers).prop_map(|q| Topo::Kautz { q }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    case_in(2..=6)
}

/// A run of `peers` peers (any topology, model, clocks 1–8, seeds, delays, straggler).
pub(crate) fn case_in(peers: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Case> {
    peers
        .prop_flat_map(|peers| {
            (
                Just(peers),
                topo(peers),
                model(),
                1..=8u64,
                any::<u64>(),
                any::<u64>(),
                (0..3_000u64, 0..5_000u64),
                proptest::option::of((0..peers as u32, 0..5_000u64)),
            )
        })
        .prop_map(
            |(peers, topo, model, clocks, net_seed, data_seed, (lo, spread), straggler)| Case {
                peers,
                topo,
                model,
                clocks,
                net_seed,
                data_seed,
                latency_us: (lo, lo + spread),
                straggler,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Seeded: the same cases on every run.
        rng_seed: proptest::test_runner::RngSeed::Fixed(1024),
        failure_persistence: None,
        ..ProptestConfig::with_cases(1024)
    })]

    /// The main property: whatever the seeds, delays, topology, straggler and model, the
    /// run completes, the rule holds at every tick, staleness stays within `s`, every batch
    /// is applied exactly once, links are FIFO, metrics are virtual seconds, and BSP with
    /// full broadcast leaves bitwise-identical replicas.
    #[test]
    fn consistency_rules_hold_on_every_run(c in case()) {
        let (out, checker, t) = run_checked(&c).map_err(TestCaseError::fail)?;
        prop_assert!(checker.violations.is_empty(), "{:#?}", checker.violations);
        let cost = Costs::default();
        for (i, n) in out.nodes.iter().enumerate() {
            let (e, m) = (&n.node, n.node.metrics());
            prop_assert!(e.is_done());
            prop_assert_eq!(e.clock(), c.clocks);
            // Exactly once: the in-neighbours' batches and its own, every clock.
            let indeg = t.in_neighbours(i).len() as u64;
            prop_assert_eq!(m.batches_applied, (indeg + 1) * c.clocks, "p{}", i);
            prop_assert_eq!(m.staleness.iter().sum::<u64>(), m.batches_applied);
            if let Some(s) = c.model.bound() {
                prop_assert!(m.max_staleness <= s, "p{} staleness {} > s = {}", i, m.max_staleness, s);
                prop_assert!(m.staleness_trimmed().len() as u64 <= s + 1, "{:?}", m.staleness_trimmed());
            }
            // One record per clock and a final one; virtual wall time never goes back.
            let clocks: Vec<u64> = n.records.iter().map(|r| r.clock).collect();
            let mut want: Vec<u64> = (1..=c.clocks).collect();
            want.push(c.clocks);
            prop_assert_eq!(clocks, want);
            prop_assert!(n.records.windows(2).all(|w| w[0].wall_s <= w[1].wall_s));
            // Compute time is the modelled cost, in virtual seconds.
            let slow = c.straggler.filter(|&(p, _)| p as usize == i).map_or(0, |(_, us)| us);
            let per_clock = cost.of(sfb_core::Work::Compute { peer: PeerId(0), clock: 0, samples: BATCH, started: Duration::ZERO })
                + Duration::from_micros(slow);
            let want_s = per_clock.as_secs_f64() * c.clocks as f64;
            prop_assert!((m.compute_s - want_s).abs() < 1e-9, "compute_s {} ≠ {}", m.compute_s, want_s);
        }
        if c.model == Model::Bsp && matches!(c.topo, Topo::Full) {
            let first = out.nodes[0].node.replica().checksum();
            for n in &out.nodes {
                prop_assert_eq!(n.node.replica().checksum(), first.clone());
            }
        }
    }
}

/// A run with one slow peer on full broadcast.
fn straggler_case(peers: usize, model: Model, clocks: u64, slow: u32, net_seed: u64) -> Case {
    Case {
        peers,
        topo: Topo::Full,
        model,
        clocks,
        net_seed,
        data_seed: net_seed ^ 1,
        latency_us: (10, 1_000),
        straggler: Some((slow, 20_000)),
    }
}

/// Mean wait of the fast peers.
fn fast_wait(out: &Outcome<Engine<Mlr>>, slow: u32) -> f64 {
    let fast: Vec<f64> = out
        .nodes
        .iter()
        .filter(|n| n.node.config().id != PeerId(slow))
        .map(|n| n.node.metrics().wait_s)
        .collect();
    fast.iter().sum::<f64>() / fast.len() as f64
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Seeded: the same cases on every run.
        rng_seed: proptest::test_runner::RngSeed::Fixed(64),
        failure_persistence: None,
        ..ProptestConfig::with_cases(64)
    })]

    /// SSP lets the fast peers run ahead of a (virtual) straggler by exactly the rule's
    /// bound, `s + 1` completed clocks (BSP: 1), never more; they apply its batches exactly
    /// `s` clocks late; and they wait less than under BSP with the same straggler and
    /// seeds — `s` of the straggler's steps less (here each 20 ms of virtual time).
    #[test]
    fn ssp_fast_peers_run_ahead_of_a_straggler_by_the_bound(
        peers in 3..=5usize,
        s in 0..=4u64,
        extra in 2..=4u64,
        slow_pick in any::<u32>(),
        net_seed in any::<u64>(),
    ) {
        let slow = slow_pick % peers as u32;
        let clocks = s + extra;
        let model = if s == 0 { Model::Bsp } else { Model::Ssp(s) };
        let c = straggler_case(peers, model, clocks, slow, net_seed);
        let (ssp, checker, _) = run_checked(&c).map_err(TestCaseError::fail)?;
        prop_assert!(checker.violations.is_empty(), "{:#?}", checker.violations);
        prop_assert_eq!(checker.max_lead, s as i64 + 1, "largest lead of a fast peer");
        for n in ssp.nodes.iter().filter(|n| n.node.config().id != PeerId(slow)) {
            prop_assert_eq!(n.node.metrics().max_staleness, s);
        }
        if s > 0 {
            let (bsp, _, _) = run_checked(&straggler_case(peers, Model::Bsp, clocks, slow, net_seed))
                .map_err(TestCaseError::fail)?;
            let (wb, ws) = (fast_wait(&bsp, slow), fast_wait(&ssp, slow));
            prop_assert!(wb - ws > 0.5 * 0.020 * s as f64, "fast peers' wait: BSP {}s, SSP({}) {}s", wb, s, ws);
        }
    }

    /// Async and throttled release below the in-degree complete with a straggler, and the
    /// fast peers do not wait for it at every clock: they get ahead and apply its batches
    /// late.
    #[test]
    fn async_and_throttle_complete_and_run_ahead_of_a_straggler(
        peers in 3..=5usize,
        throttle in proptest::option::of(1..4usize),
        slow_pick in any::<u32>(),
        net_seed in any::<u64>(),
    ) {
        let slow = slow_pick % peers as u32;
        let model = match throttle {
            Some(k) => Model::Throttle(k.min(peers - 2)),
            None => Model::Async,
        };
        let c = straggler_case(peers, model, 6, slow, net_seed);
        let (out, checker, _) = run_checked(&c).map_err(TestCaseError::fail)?;
        prop_assert!(checker.violations.is_empty(), "{:#?}", checker.violations);
        prop_assert!(checker.max_lead >= 2, "lead {}", checker.max_lead);
        for n in &out.nodes {
            prop_assert!(n.node.is_done());
            prop_assert_eq!(n.node.metrics().batches_applied, peers as u64 * 6);
        }
        let late = out.nodes.iter()
            .filter(|n| n.node.config().id != PeerId(slow))
            .map(|n| n.node.metrics().max_staleness)
            .max()
            .unwrap();
        prop_assert!(late >= 1, "{:?} behaved like BSP", model);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Seeded: the same cases on every run.
        rng_seed: proptest::test_runner::RngSeed::Fixed(64),
        failure_persistence: None,
        ..ProptestConfig::with_cases(64)
    })]

    /// Flow control: under Async and throttled release with `max_drift = m`, a fast peer
    /// never gets more than `m + 1` completed clocks ahead of a straggler (checked at every
    /// tick as SSP(m)'s rule), reaches exactly that lead, applies the straggler's batches
    /// at most `m` clocks late, and the held clocks are counted.
    #[test]
    fn flow_control_bounds_how_far_async_runs_ahead(
        peers in 3..=5usize,
        m in 1..=4u64,
        throttle in proptest::option::of(1..4usize),
        slow_pick in any::<u32>(),
        net_seed in any::<u64>(),
    ) {
        let slow = slow_pick % peers as u32;
        let model = match throttle {
            Some(k) => Model::Throttle(k.min(peers - 2)),
            None => Model::Async,
        };
        let c = straggler_case(peers, model, m + 8, slow, net_seed);
        let t = c.topo.build(c.peers);
        let mut checker = Checker::new(&t, Some(m), Some(slow as usize));
        let nodes = engines_with_drift(&t, &model.consistency(), c.clocks, c.data_seed, m);
        let out = network(nodes, &c).run_with(&mut checker).map_err(|e| TestCaseError::fail(e.to_string()))?;
        checker.finish();
        prop_assert!(checker.violations.is_empty(), "{:#?}", checker.violations);
        prop_assert_eq!(checker.max_lead, m as i64 + 1, "largest lead of a fast peer");
        for n in out.nodes.iter().filter(|n| n.node.config().id != PeerId(slow)) {
            prop_assert!(n.node.metrics().max_staleness <= m);
            prop_assert!(n.node.metrics().drift_waits > 0);
            prop_assert_eq!(n.node.metrics().batches_applied, peers as u64 * c.clocks);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Seeded: the same cases on every run.
        rng_seed: proptest::test_runner::RngSeed::Fixed(32),
        failure_persistence: None,
        ..ProptestConfig::with_cases(32)
    })]

    /// The same inputs give bitwise the same outcome: replicas, records with their virtual
    /// times, end time and counts.
    #[test]
    fn the_same_seed_gives_a_bitwise_identical_outcome(c in case()) {
        let (a, _, _) = run_checked(&c).map_err(TestCaseError::fail)?;
        let (b, _, _) = run_checked(&c).map_err(TestCaseError::fail)?;
        prop_assert_eq!(a.end, b.end);
        prop_assert_eq!(a.stats, b.stats);
        for (x, y) in a.nodes.iter().zip(&b.nodes) {
            prop_assert_eq!(x.node.replica().checksum(), y.node.replica().checksum());
            prop_assert_eq!(&x.records, &y.records);
            prop_assert_eq!(x.finished_at, y.finished_at);
            prop_assert_eq!(x.node.metrics(), y.node.metrics());
        }
    }

    /// FMS under BSP in virtual time: the server's W and every client's final W are
    /// bitwise equal, and equal to SFB full broadcast's under BSP on the same engines.
    /// Under SSP(s) the clients end on the server's W too, never more than `s` late.
    #[test]
    fn fms_server_and_clients_agree(
        peers in 2..=5usize,
        s in proptest::option::of(1..=3u64),
        clocks in 1..=6u64,
        net_seed in any::<u64>(),
        straggler in proptest::option::of((0..5u32, 0..5_000u64)),
    ) {
        let model = s.map_or(Model::Bsp, Model::Ssp);
        let c = Case {
            peers,
            topo: Topo::Full,
            model,
            clocks,
            net_seed,
            data_seed: net_seed.rotate_left(7),
            latency_us: (0, 2_000),
            straggler: straggler.map(|(p, us)| (p % peers as u32, us)),
        };
        let t = c.topo.build(peers);
        let consistency = model.consistency();
        let clients: Vec<Client<Mlr>> = engines(&t, &consistency, clocks, c.data_seed)
            .into_iter()
            .map(|e| Client::from_engine(e, Push::Factors).unwrap())
            .collect();
        let mut cfg = fms::Config::new(peers);
        cfg.consistency = consistency.clone();
        cfg.clocks = clocks;
        cfg.batch_size = BATCH;
        cfg.lr = 0.3;
        cfg.eval_every = 0;
        let server = Server::new(cfg, Mlr::new(J, D), synthetic::init_w(J, D, 0.01, c.data_seed)).unwrap();
        let out = network(FmsNode::cluster(server, clients), &c)
            .run()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let server = out.nodes[0].node.as_server().unwrap();
        prop_assert!(server.is_done());
        let w = server.replica().checksum();
        for n in &out.nodes[1..] {
            let client = n.node.as_client().unwrap();
            prop_assert!(client.is_done());
            prop_assert_eq!(client.checksum(), w.clone());
            let m = client.metrics();
            prop_assert_eq!(m.batches_applied, peers as u64 * clocks);
            prop_assert!(m.max_staleness <= s.unwrap_or(0), "client staleness {}", m.max_staleness);
        }
        if s.is_none() {
            let (sfb, _, _) = run_checked(&c).map_err(TestCaseError::fail)?;
            for n in &sfb.nodes {
                prop_assert_eq!(n.node.replica().checksum(), w.clone());
            }
        }
    }
}
