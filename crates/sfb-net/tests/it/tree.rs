//! The tree mode (`--partial tree`, [`sfb_core::tree`]) on the virtual-time driver, as a
//! property over peers, fan-outs, consistency models, link delays and stragglers: every
//! run ends, each link carries the sums of one clock after another, every peer takes every
//! clock's down message exactly once (so every replica applies every peer's batch of every
//! clock, in the sum), no peer starts a clock further than the staleness bound from the
//! sums, and under BSP the replicas are bitwise identical.
use std::time::Duration;

use proptest::prelude::*;
use sfb_core::wire::Message;
use sfb_core::{Config, Engine, PeerId, Progress, Shard, shard_indices};
use sfb_models::{Mlr, synthetic};
use sfb_net::virtual_time::{Observer, Outcome};

use crate::consistency::{BATCH, Case, D, J, Model, case_in, network, train};

/// MLR engines in a tree of fan-out `q` over `peers` peers, peer `i` at index `i`.
fn tree_engines(peers: usize, q: usize, c: &Case) -> Vec<Engine<Mlr>> {
    tree_engines_with(peers, q, c, |_| {})
}

/// [`tree_engines`] with `f` applied to each configuration.
fn tree_engines_with(
    peers: usize,
    q: usize,
    c: &Case,
    f: impl Fn(&mut Config),
) -> Vec<Engine<Mlr>> {
    let tree = sfb_core::tree::Config::new(q, BATCH);
    let data = train();
    (0..peers)
        .map(|i| {
            let id = PeerId(i as u32);
            let n = tree.neighbors(id, peers);
            let mut cfg = Config::new(id, peers, n.clone(), n);
            cfg.consistency = c.model.consistency();
            cfg.clocks = c.clocks;
            cfg.batch_size = BATCH;
            cfg.lr = 0.3;
            cfg.eval_every = 0;
            cfg.tree = Some(tree);
            f(&mut cfg);
            let samples = shard_indices(data.len(), peers, i)
                .map(|k| data[k].clone())
                .collect();
            let shard = Shard::new(samples, c.data_seed ^ (i as u64).wrapping_mul(0x9e37_79b9));
            Engine::new(
                cfg,
                Mlr::new(J, D),
                synthetic::init_w(J, D, 0.01, c.data_seed),
                shard,
            )
            .unwrap()
        })
        .collect()
}

/// What the driver delivered, checked as it goes.
struct Checker {
    tree: sfb_core::tree::Config,
    peers: usize,
    /// `ups[p][c]`: clocks of up messages child `c` delivered to `p` (by child position).
    next_up: Vec<Vec<u64>>,
    /// `downs[p]`: down messages `p` received.
    downs: Vec<u64>,
    bound: Option<u64>,
    violations: Vec<String>,
}

impl Checker {
    fn violation(&mut self, v: String) {
        if self.violations.len() < 5 {
            self.violations.push(v);
        }
    }
}

impl Observer<Engine<Mlr>> for Checker {
    fn on_deliver(&mut self, at: Duration, from: PeerId, to: PeerId, msg: &Message) {
        let Message::Sum { down, batch, .. } = msg else {
            return self.violation(format!("{at:?}: {to} got a {} from {from}", msg.kind()));
        };
        let (p, clock) = (to.index(), batch.clock);
        if *down {
            if self.tree.parent(to) != Some(from) || batch.origin != PeerId(0) {
                self.violation(format!("{at:?}: a down message {from}→{to}"));
            }
            if clock != self.downs[p] {
                let got = self.downs[p];
                self.violation(format!("{at:?}: {to} got down {clock} after {got} downs"));
            }
            self.downs[p] += 1;
        } else {
            let children = self.tree.children(to, self.peers);
            let Some(k) = children.iter().position(|&c| c == from) else {
                return self.violation(format!("{at:?}: an up message {from}→{to}"));
            };
            if clock != self.next_up[p][k] {
                let got = self.next_up[p][k];
                self.violation(format!("{at:?}: {from}→{to} up {clock} after {got} ups"));
            }
            self.next_up[p][k] += 1;
        }
    }

    fn on_tick(&mut self, at: Duration, i: usize, progress: Progress, nodes: &[Engine<Mlr>]) {
        if progress != Progress::Stepped || nodes[i].clock() == 0 {
            return;
        }
        // A non-root peer that has just started clock t holds the downs of clocks < t − s
        // at least (the root makes them itself).
        let t = nodes[i].clock() - 1;
        if let (Some(s), true) = (self.bound, i > 0) {
            let d = self.downs[i];
            if d + s < t && nodes[i].clock() <= nodes[i].config().clocks {
                self.violation(format!(
                    "{at:?}: p{i} at clock {t} with {d} downs (s = {s})"
                ));
            }
        }
    }
}

/// A run (its topology unused: the tree is the topology) and a fan-out.
fn case() -> impl Strategy<Value = (Case, usize)> {
    (case_in(2..=12), 1..=4usize)
}

fn run(c: &Case, q: usize) -> Result<(Outcome<Engine<Mlr>>, Checker), String> {
    let tree = sfb_core::tree::Config::new(q, BATCH);
    let mut checker = Checker {
        tree,
        peers: c.peers,
        next_up: (0..c.peers)
            .map(|p| vec![0; tree.children(PeerId(p as u32), c.peers).len()])
            .collect(),
        downs: vec![0; c.peers],
        bound: c.model.bound(),
        violations: Vec::new(),
    };
    let out = network(tree_engines(c.peers, q, c), c)
        .run_with(&mut checker)
        .map_err(|e| e.to_string())?;
    Ok((out, checker))
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Seeded: the same cases on every run.
        rng_seed: proptest::test_runner::RngSeed::Fixed(28),
        failure_persistence: None,
        ..ProptestConfig::with_cases(512)
    })]

    #[test]
    fn every_peer_applies_every_clocks_sum_once_and_bsp_replicas_are_equal(
        (c, q) in case()
    ) {
        let (out, checker) = run(&c, q).map_err(TestCaseError::fail)?;
        prop_assert!(checker.violations.is_empty(), "{:#?}", checker.violations);
        for (i, n) in out.nodes.iter().enumerate() {
            let (e, m) = (&n.node, n.node.metrics());
            prop_assert!(e.is_done());
            prop_assert_eq!(e.clock(), c.clocks);
            // Every clock's down message once, each standing for every peer's batch.
            if i > 0 {
                prop_assert_eq!(checker.downs[i], c.clocks, "p{}", i);
            }
            prop_assert_eq!(m.batches_applied, c.peers as u64 * c.clocks, "p{}", i);
            // Every child's up message of every clock.
            for (k, &got) in checker.next_up[i].iter().enumerate() {
                prop_assert_eq!(got, c.clocks, "p{} child {}", i, k);
            }
        }
        if c.model == Model::Bsp {
            let first = out.nodes[0].node.replica().checksum();
            for n in &out.nodes {
                prop_assert_eq!(n.node.replica().checksum(), first.clone());
            }
        }
    }
}

/// A run of the tree mode with crashes: its peers, fan-out, crashes `(peer, µs)`.
#[derive(Debug, Clone)]
struct CrashCase {
    base: Case,
    q: usize,
    crashes: Vec<(u32, u64)>,
}

/// The crash property's cases (`crashes.rs`) with a fan-out, cut to a minority of crashes
/// (the survivors train on).
fn crash_case() -> impl Strategy<Value = CrashCase> {
    (crate::crashes::crash_case(), 1..=3usize).prop_map(|(c, q)| {
        let mut crashes = c.crashes;
        crashes.truncate((c.base.peers - 1) / 2);
        CrashCase {
            base: c.base,
            q,
            crashes,
        }
    })
}

/// The down messages each peer held at the end, as `(clock, origin)`: those delivered to
/// it and those it made (as a root).
#[derive(Default)]
struct Downs {
    held: std::collections::BTreeMap<usize, std::collections::BTreeSet<(u64, u32)>>,
    made: std::collections::BTreeSet<(u64, u32)>,
}

impl Observer<Engine<Mlr>> for Downs {
    fn on_deliver(&mut self, _: Duration, _: PeerId, to: PeerId, msg: &Message) {
        if let Message::Sum {
            down: true, batch, ..
        } = msg
        {
            let key = (batch.clock, batch.origin.0);
            self.held.entry(to.index()).or_default().insert(key);
            self.made.insert(key);
        }
    }
}

fn check_crashes(c: &CrashCase) -> Result<(), TestCaseError> {
    let b = &c.base;
    let tree = sfb_core::tree::Config::new(c.q, BATCH);
    let nodes = tree_engines_with(b.peers, c.q, b, |cfg| {
        cfg.on_peer_loss = sfb_core::PeerLoss::Continue;
        cfg.quorum = true;
    });
    let peers = b.peers;
    let mut net = network(nodes, b)
        .repair(Box::new(move |me, lost| {
            tree.repaired(peers, lost, PeerId(me as u32))
        }))
        .detect_after(Duration::from_micros(700));
    for &(p, us) in &c.crashes {
        net = net.crash(PeerId(p), Duration::from_micros(us));
    }
    let mut downs = Downs::default();
    // No stall, whatever crashed when (the root included).
    let out = net
        .run_with(&mut downs)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let crashed: Vec<u32> = out
        .nodes
        .iter()
        .filter(|n| n.crashed)
        .map(|n| n.node.config().id.0)
        .collect();
    let mut sets = Vec::new();
    let mut replicas = Vec::new();
    for (i, n) in out.nodes.iter().enumerate() {
        if n.crashed {
            continue;
        }
        // A minority lost: every survivor finishes every clock.
        prop_assert!(n.failed.is_none(), "p{}: {:?}", i, n.failed);
        prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
        prop_assert!(n.node.is_done(), "p{}", i);
        // Every down message any peer made, the survivor holds (exactly once: the engine
        // takes a copy as nothing), and one at least of every clock.
        let mut set = downs.held.get(&i).cloned().unwrap_or_default();
        set.extend(downs.made.iter().filter(|k| k.1 == i as u32));
        let clocks: std::collections::BTreeSet<u64> = set.iter().map(|k| k.0).collect();
        prop_assert_eq!(clocks.len() as u64, b.clocks, "p{} lacks a clock's down", i);
        sets.push((i, set));
        replicas.push((i, n.node.replica().w().to_owned()));
    }
    // Every survivor took the same down messages: those of the dead root that reached any
    // survivor, and the new roots' (crashed peers' own are not judged).
    let survivors_made: std::collections::BTreeSet<(u64, u32)> =
        sets.iter().flat_map(|(_, s)| s.iter().copied()).collect();
    for (i, s) in &sets {
        prop_assert!(
            s == &survivors_made,
            "p{} took {:?}, the others also {:?} (crashed {:?})",
            i,
            s.len(),
            survivors_made.difference(s).collect::<Vec<_>>(),
            crashed
        );
    }
    // So under BSP the replicas are bitwise equal when one down message of each clock
    // exists (each applies the same ones at the same clocks); when a new root's empty one
    // and the dead root's both exist, a peer may apply the latter a clock late.
    if b.model == Model::Bsp {
        let one_each = survivors_made.len() as u64 == b.clocks;
        let (_, first) = &replicas[0];
        let scale = first.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
        for (i, w) in &replicas[1..] {
            let gap = w
                .iter()
                .zip(first.iter())
                .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            if one_each {
                prop_assert!(gap == 0.0, "p{} differs by {}", i, gap);
            }
            prop_assert!(
                gap <= 0.05 * scale,
                "p{} differs by {} of {}",
                i,
                gap,
                scale
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        rng_seed: proptest::test_runner::RngSeed::Fixed(28),
        failure_persistence: None,
        ..ProptestConfig::with_cases(256)
    })]

    /// Issue 28: the tree mode under peer loss (`--on-peer-loss continue`), as data: a
    /// minority of peers, the root among them or not, crash at any moment; the tree is laid
    /// out again over the survivors; no run stalls, every survivor finishes, and every
    /// survivor holds the same down messages, one at least of every clock.
    #[test]
    fn the_tree_repairs_itself_after_a_minority_of_crashes(c in crash_case()) {
        check_crashes(&c)?;
    }
}
