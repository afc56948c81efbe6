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
