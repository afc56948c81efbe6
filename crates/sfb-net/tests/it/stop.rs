//! Stop rules (`sfb_core::stop`) as properties on the virtual-time driver: whatever the
//! topology, consistency model, link delays, straggler and the clocks at which each node's
//! evaluations first meet the rule, every node ends at the same clock, holds the same
//! stop, and has applied exactly the batches of the clocks before it (a consistent cut).
//! No threads, no sleeps: every run is a function of its inputs.

use proptest::prelude::*;
use sfb_core::fms::{self, Client, Push, Server};
use sfb_core::stop::{self, Rule, Stop, Until};
use sfb_core::{Evaluation, Evaluator, PeerId};
use sfb_models::{Mlr, synthetic};
use sfb_net::virtual_time::FmsNode;

use crate::consistency::{BATCH, Case, D, J, Model, engines_with, model, network, topo};

/// An evaluator whose objective drops from 1 to 0 (meeting `objective<=0.5`) after its
/// `meet`-th evaluation (the first is the untrained one at clock 0); never when `None`.
struct Scripted {
    evals: u32,
    meet: Option<u32>,
}

impl Evaluator for Scripted {
    fn evaluate(&mut self, _w: ndarray::ArrayView2<'_, f32>) -> Evaluation {
        self.evals += 1;
        let met = self.meet.is_some_and(|m| self.evals > m);
        Evaluation::new(if met { 0.0 } else { 1.0 }, None)
    }
}

/// One generated run with stop rules.
#[derive(Debug, Clone)]
struct StopCase {
    base: Case,
    eval_every: u64,
    max_drift: u64,
    /// Per node: the evaluation after which its rule is met.
    meet: Vec<Option<u32>>,
}

fn stop_case() -> impl Strategy<Value = StopCase> {
    (2..=7usize)
        .prop_flat_map(|peers| {
            (
                Just(peers),
                topo(peers),
                model(),
                10..=90u64,
                any::<u64>(),
                (0..3_000u64, 0..5_000u64),
                proptest::option::of((0..peers as u32, 0..8_000u64)),
                1..=4u64,
                1..=6u64,
                proptest::collection::vec(proptest::option::of(0..=12u32), peers),
            )
        })
        .prop_map(
            |(
                peers,
                topo,
                model,
                clocks,
                net_seed,
                (lo, spread),
                straggler,
                eval_every,
                max_drift,
                meet,
            )| {
                StopCase {
                    base: Case {
                        peers,
                        topo,
                        model,
                        clocks,
                        net_seed,
                        data_seed: net_seed.rotate_left(9),
                        latency_us: (lo, lo + spread),
                        straggler,
                    },
                    eval_every,
                    max_drift,
                    meet,
                }
            },
        )
}

/// The clock at which node `i` proposes a stop unless it holds an earlier one: its first
/// evaluation that meets the rule (never the untrained one at clock 0).
fn proposal_clock(c: &StopCase, i: usize) -> Option<u64> {
    c.meet[i].map(|m| u64::from(m).max(1) * c.eval_every)
}

/// Every node's final clock and stop agree; when a stop came before the last clock, it is
/// the one every node holds, at `clock + lead`, proposed by a node whose rule was met
/// then, and no later than the earliest proposal the script guarantees.
fn check_agreement(
    c: &StopCase,
    lead: u64,
    finals: &[(u64, Option<Stop>)],
) -> Result<u64, TestCaseError> {
    let end = finals[0].0;
    for (i, f) in finals.iter().enumerate() {
        prop_assert_eq!(f.0, end, "node {} ended at {} (node 0 at {})", i, f.0, end);
    }
    let earliest = (0..c.base.peers)
        .filter_map(|i| proposal_clock(c, i))
        .map(|t| t + lead)
        .min();
    if end < c.base.clocks {
        let stop = finals[0].1.expect("a run cut short holds its stop");
        for f in finals {
            prop_assert_eq!(f.1, Some(stop));
        }
        prop_assert_eq!(stop.at, end);
        prop_assert_eq!(stop.at, stop.clock + lead);
        prop_assert_eq!(stop.clock % c.eval_every, 0);
        let by = stop.by as usize;
        prop_assert!(
            proposal_clock(c, by).is_some_and(|t| t <= stop.clock),
            "node {} proposed at {} before its rule was met",
            by,
            stop.clock
        );
        prop_assert!(earliest.is_some_and(|e| stop.at <= e));
    } else {
        // Nothing could stop the run before its end.
        prop_assert!(earliest.is_none_or(|e| e >= c.base.clocks), "{earliest:?}");
    }
    Ok(end)
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Seeded: the same cases on every run.
        rng_seed: proptest::test_runner::RngSeed::Fixed(384),
        failure_persistence: None,
        ..ProptestConfig::with_cases(384)
    })]

    /// SFB peers on generated topologies under every consistency model.
    #[test]
    fn every_peer_stops_at_the_same_clock(c in stop_case()) {
        let b = &c.base;
        let t = b.topo.build(b.peers);
        let out: Vec<Vec<PeerId>> = (0..b.peers)
            .map(|i| t.out(i).iter().map(|&q| PeerId(q as u32)).collect())
            .collect();
        let slack = b.model.bound().unwrap_or(c.max_drift);
        let hops = sfb_core::Routes::new(&out).expect("generated topologies are strongly connected").height();
        let lead = stop::lead(hops, slack);
        let until = Until { rules: vec![Rule::Objective(0.5)], lead };
        let nodes: Vec<_> = engines_with(&t, &b.model.consistency(), b.clocks, b.data_seed, |cfg| {
            cfg.eval_every = c.eval_every;
            cfg.max_drift = c.max_drift;
            cfg.until = Some(until.clone());
        })
        .into_iter()
        .enumerate()
        .map(|(i, e)| e.with_evaluator(Box::new(Scripted { evals: 0, meet: c.meet[i] })))
        .collect();
        let run = network(nodes, b).run().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let finals: Vec<(u64, Option<Stop>)> = run
            .nodes
            .iter()
            .map(|n| (n.node.clock(), n.node.metrics().stop))
            .collect();
        let end = check_agreement(&c, lead, &finals)?;
        for (i, n) in run.nodes.iter().enumerate() {
            prop_assert!(n.node.is_done());
            // A consistent cut: its own and every in-neighbour's batch of each clock
            // before the end, exactly once.
            let indeg = t.in_neighbours(i).len() as u64;
            prop_assert_eq!(n.node.metrics().batches_applied, (indeg + 1) * end, "p{}", i);
        }
    }

    /// FMS clients propose, the server forwards: the server and every client end together.
    #[test]
    fn fms_server_and_clients_stop_together(
        c in stop_case().prop_filter("BSP or SSP", |c| c.base.model.bound().is_some()),
    ) {
        let b = &c.base;
        let t = sfb_topology::full(b.peers).unwrap();
        let consistency = b.model.consistency();
        let until = Until { rules: vec![Rule::Objective(0.5)], lead: 0 };
        let clients: Vec<Client<Mlr>> = engines_with(&t, &consistency, b.clocks, b.data_seed, |cfg| {
            cfg.eval_every = c.eval_every;
            cfg.until = Some(until.clone());
        })
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            Client::from_engine(e, Push::Factors)
                .unwrap()
                .with_evaluator(Box::new(Scripted { evals: 0, meet: c.meet[i] }))
        })
        .collect();
        let mut cfg = fms::Config::new(b.peers);
        cfg.consistency = consistency;
        cfg.clocks = b.clocks;
        cfg.batch_size = BATCH;
        cfg.lr = 0.3;
        cfg.eval_every = c.eval_every;
        let lead = cfg.stop_lead();
        let server = Server::new(cfg, Mlr::new(J, D), synthetic::init_w(J, D, 0.01, b.data_seed)).unwrap();
        let run = network(FmsNode::cluster(server, clients), b)
            .run()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let server = run.nodes[0].node.as_server().unwrap();
        prop_assert!(server.is_done());
        let finals: Vec<(u64, Option<Stop>)> = run.nodes[1..]
            .iter()
            .map(|n| {
                let client = n.node.as_client().unwrap();
                (client.clock(), client.metrics().stop)
            })
            .collect();
        let end = check_agreement(&c, lead, &finals)?;
        prop_assert_eq!(server.clock(), end);
        if end < b.clocks {
            prop_assert_eq!(server.metrics().stop, finals[0].1);
        }
        let w = server.replica().checksum();
        for n in &run.nodes[1..] {
            let client = n.node.as_client().unwrap();
            prop_assert!(client.is_done());
            prop_assert_eq!(client.checksum(), w.clone());
            prop_assert_eq!(client.metrics().batches_applied, b.peers as u64 * end);
        }
    }
}

/// A stop no node can reach in time (a lead of 0 under SSP with a slow link) is refused
/// with an error naming the stop, not a silent disagreement or a hang.
#[test]
fn a_stop_that_comes_too_late_is_an_error() {
    use crate::consistency::Topo;
    let b = Case {
        peers: 3,
        topo: Topo::Full,
        model: Model::Ssp(3),
        clocks: 60,
        net_seed: 5,
        data_seed: 6,
        latency_us: (20_000, 20_000),
        straggler: Some((0, 30_000)),
    };
    let t = b.topo.build(b.peers);
    let until = Until {
        rules: vec![Rule::Objective(0.5)],
        lead: 1,
    };
    let nodes: Vec<_> = engines_with(&t, &b.model.consistency(), b.clocks, b.data_seed, |cfg| {
        cfg.eval_every = 2;
        cfg.until = Some(until.clone());
    })
    .into_iter()
    .enumerate()
    .map(|(i, e)| {
        // The straggler (node 0) meets the rule first, at its clock 10; the others are
        // ahead by then.
        let meet = (i == 0).then_some(5);
        e.with_evaluator(Box::new(Scripted { evals: 0, meet }))
    })
    .collect();
    let err = network(nodes, &b).run().unwrap_err().to_string();
    assert!(err.contains("stop") && err.contains("lead"), "{err}");
}
