//! Relay for partial broadcast in the virtual-time driver: every batch reaches every peer
//! exactly once, along its origin's shortest-path tree, and a BSP run is the same whatever
//! the link delays.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ndarray::{Array2, ArrayView2};
use proptest::prelude::*;
use sfb_core::wire::Message;
use sfb_core::{
    Config, Consistency, Engine, Model, ModelError, PeerId, Progress, Routes, Shard, SvList,
};
use sfb_net::virtual_time::{Costs, Latency, Network, Observer, Outcome};

/// Least squares with J = 2: u = W·x − y (y the same for both rows), v = x.
pub(crate) struct Ls;

impl Model for Ls {
    type Sample = (Vec<f32>, f32);
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        for (x, y) in batch {
            let u: Vec<f32> = w
                .rows()
                .into_iter()
                .map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum::<f32>() - y)
                .collect();
            sv.push_dense(&u, x)?;
        }
        Ok(())
    }
}

const P: usize = 12;
const CLOCKS: u64 = 12;

/// Peer `i` sends to `i+1`, `i+4` and `i+9` (mod 12): strongly connected, diameter 3.
fn topology() -> Vec<Vec<PeerId>> {
    (0..P)
        .map(|i| {
            [1, 4, 9]
                .iter()
                .map(|k| PeerId(((i + k) % P) as u32))
                .collect()
        })
        .collect()
}

fn engines(consistency: Consistency, relay: bool) -> (Vec<Engine<Ls>>, Arc<Routes>) {
    engines_with(consistency, relay, None)
}

fn engines_with(
    consistency: Consistency,
    relay: bool,
    relay_compress: Option<usize>,
) -> (Vec<Engine<Ls>>, Arc<Routes>) {
    let out = topology();
    let routes = Arc::new(Routes::new(&out).unwrap());
    let engines = (0..P)
        .map(|p| {
            let me = PeerId(p as u32);
            let inn = (0..P as u32)
                .map(PeerId)
                .filter(|q| out[q.index()].contains(&me))
                .collect();
            let mut cfg = Config::new(me, P, out[p].clone(), inn);
            cfg.clocks = CLOCKS;
            cfg.batch_size = 2;
            cfg.lr = 0.05;
            cfg.eval_every = 0;
            cfg.consistency = consistency.clone();
            cfg.relay = relay.then(|| Arc::clone(&routes));
            cfg.relay_compress = relay_compress;
            let data = (0..8)
                .map(|i| (vec![1.0, ((p * 3 + i) % 7) as f32 * 0.1], (i % 3) as f32))
                .collect();
            Engine::new(cfg, Ls, Array2::zeros((2, 2)), Shard::new(data, p as u64)).unwrap()
        })
        .collect();
    (engines, routes)
}

/// Every batch delivered to each peer: `(to, origin, clock) → (times, the sender)`.
#[derive(Default)]
struct Deliveries {
    got: BTreeMap<(PeerId, PeerId, u64), (u32, PeerId)>,
}

impl<N> Observer<N> for Deliveries {
    fn on_deliver(&mut self, _: Duration, from: PeerId, to: PeerId, msg: &Message) {
        let batch = match msg {
            Message::Factors { batch, .. } | Message::Relayed { batch, .. } => batch,
            _ => return,
        };
        let e = self
            .got
            .entry((to, batch.origin, batch.clock))
            .or_insert((0, from));
        e.0 += 1;
        e.1 = from;
    }
    fn on_tick(&mut self, _: Duration, _: usize, _: Progress, _: &[N]) {}
}

fn run(
    consistency: Consistency,
    relay: bool,
    seed: u64,
) -> (Outcome<Engine<Ls>>, Deliveries, Arc<Routes>) {
    let (engines, routes) = engines(consistency, relay);
    let mut log = Deliveries::default();
    let outcome = Network::new(engines)
        .seed(seed)
        .costs(Costs::free())
        .latency(Latency::uniform(
            Duration::from_micros(1),
            Duration::from_millis(5),
        ))
        .run_with(&mut log)
        .unwrap();
    (outcome, log, routes)
}

#[test]
fn relay_delivers_every_batch_exactly_once_to_every_peer() {
    for consistency in [
        Consistency::Bsp,
        Consistency::Ssp { staleness: 2 },
        Consistency::Async,
    ] {
        let (outcome, log, routes) = run(consistency.clone(), true, 3);
        for to in 0..P as u32 {
            for origin in (0..P as u32).filter(|&o| o != to) {
                let (to, origin) = (PeerId(to), PeerId(origin));
                for clock in 0..CLOCKS {
                    let (times, from) =
                        log.got
                            .get(&(to, origin, clock))
                            .copied()
                            .unwrap_or_else(|| {
                                panic!("{consistency:?}: {to} never got {origin}'s clock {clock}")
                            });
                    assert_eq!(
                        times, 1,
                        "{consistency:?}: {to} got {origin}'s {clock} twice"
                    );
                    assert_eq!(Some(from), routes.parent(origin, to), "along the tree");
                }
            }
        }
        assert_eq!(log.got.len(), P * (P - 1) * CLOCKS as usize);
        for n in &outcome.nodes {
            let m = n.node.metrics();
            assert!(n.node.is_done());
            assert_eq!(m.batches_applied, (P as u64) * CLOCKS, "{consistency:?}");
            let me = n.node.config().id;
            assert_eq!(m.relayed_sent, routes.forwards(me) as u64 * CLOCKS);
            let direct = (0..P as u32)
                .filter(|&o| routes.parent(PeerId(o), me) == Some(PeerId(o)))
                .count() as u64;
            assert_eq!(m.relayed_received, (P as u64 - 1 - direct) * CLOCKS);
        }
    }
}

#[test]
fn under_bsp_a_batch_is_applied_as_many_clocks_late_as_it_is_hops_away() {
    let (outcome, _, routes) = run(Consistency::Bsp, true, 4);
    assert_eq!(routes.height(), 3);
    for n in &outcome.nodes {
        let me = n.node.config().id;
        let m = n.node.metrics();
        // Of each origin, the clocks that are not the run's last few are applied `depth − 1`
        // clocks late (the last ones all at the end).
        let mut expected = vec![0u64; 3];
        for o in 0..P as u32 {
            let d = routes.depth(PeerId(o), me) as u64;
            let late = d.saturating_sub(1);
            for c in 0..CLOCKS {
                let at = (c + late + 1).min(CLOCKS);
                expected[(at - 1 - c) as usize] += 1;
            }
        }
        assert_eq!(m.staleness_trimmed(), expected.as_slice(), "{me}");
    }
}

#[test]
fn a_bsp_run_with_relay_is_the_same_whatever_the_delays_and_its_replicas_agree() {
    let (a, _, _) = run(Consistency::Bsp, true, 5);
    let (b, _, _) = run(Consistency::Bsp, true, 6);
    assert_ne!(a.end, b.end, "the seeds should change the delays");
    for (x, y) in a.nodes.iter().zip(&b.nodes) {
        assert_eq!(x.node.replica().checksum(), y.node.replica().checksum());
    }
    // Every replica holds the same sum of updates, applied in other groupings.
    let w0 = a.nodes[0].node.replica().w().to_owned();
    for n in &a.nodes {
        let w = n.node.replica().w();
        let diff = (&w - &w0).mapv(f32::abs).sum();
        assert!(diff <= 1e-4 * w0.mapv(f32::abs).sum(), "{diff} vs {w0}");
    }
    // Without relay each replica applies only its in-neighbours' batches and its own.
    let (c, _, _) = run(Consistency::Bsp, false, 5);
    for n in &c.nodes {
        assert_eq!(n.node.metrics().batches_applied, 4 * CLOCKS);
        assert_eq!(n.node.metrics().relayed_sent, 0);
    }
}

/// The largest batch delivered by relay, and by its origin.
#[derive(Default)]
struct Sizes {
    relayed: usize,
    direct: usize,
    deliveries: Deliveries,
}

impl<N> Observer<N> for Sizes {
    fn on_deliver(&mut self, at: Duration, from: PeerId, to: PeerId, msg: &Message) {
        match msg {
            Message::Relayed { batch, .. } => self.relayed = self.relayed.max(batch.len()),
            Message::Factors { batch, .. } => self.direct = self.direct.max(batch.len()),
            _ => {}
        }
        Observer::<N>::on_deliver(&mut self.deliveries, at, from, to, msg);
    }
    fn on_tick(&mut self, _: Duration, _: usize, _: Progress, _: &[N]) {}
}

#[test]
fn forwarders_that_re_compress_still_deliver_every_batch_once_with_fewer_pairs() {
    let (engines, routes) = engines_with(Consistency::Bsp, true, Some(1));
    let mut sizes = Sizes::default();
    let outcome = Network::new(engines)
        .seed(8)
        .costs(Costs::free())
        .latency(Latency::uniform(
            Duration::from_micros(1),
            Duration::from_millis(5),
        ))
        .run_with(&mut sizes)
        .unwrap();
    assert_eq!(sizes.direct, 2, "origins send their K = 2 pairs");
    assert_eq!(sizes.relayed, 1, "forwarders send rank 1");
    assert_eq!(sizes.deliveries.got.len(), P * (P - 1) * CLOCKS as usize);
    assert!(sizes.deliveries.got.values().all(|(times, _)| *times == 1));
    // Only the first forwarder of a batch re-compresses it (once for all its children;
    // after that it has one pair).
    let first_hop: u64 = (0..P as u32)
        .flat_map(|o| (0..P as u32).map(move |n| (PeerId(o), PeerId(n))))
        .filter(|&(o, n)| routes.depth(o, n) == 1 && !routes.children(o, n).is_empty())
        .count() as u64
        * CLOCKS;
    let compressed: u64 = outcome
        .nodes
        .iter()
        .map(|n| n.node.metrics().relay_compressed)
        .sum();
    assert_eq!(compressed, first_hop);
    for n in &outcome.nodes {
        assert_eq!(n.node.metrics().batches_applied, (P as u64) * CLOCKS);
    }
}

/// Issue 31: relay under peer loss (`--on-peer-loss continue`), as data.
mod loss {
    use std::collections::{BTreeMap, BTreeSet};
    use std::time::Duration;

    use proptest::prelude::*;
    use sfb_core::wire::Message;
    use sfb_core::{Engine, PeerId, Routes};
    use sfb_models::Mlr;
    use sfb_net::virtual_time::{Observer, RepairFn};

    use crate::consistency::{engines_with, network};
    use crate::crashes::CrashCase;

    /// The topology's lists without the lost peers (relay adds no arcs): what every
    /// survivor's transport is told.
    fn repair_of(out: Vec<Vec<PeerId>>) -> RepairFn {
        Box::new(move |me, lost| {
            let gone = |p: &PeerId| lost.contains(p);
            let mine = out[me].iter().copied().filter(|p| !gone(p)).collect();
            let inn = (0..out.len())
                .filter(|&n| !gone(&PeerId(n as u32)) && out[n].contains(&PeerId(me as u32)))
                .map(|n| PeerId(n as u32))
                .collect();
            Some((mine, inn, format!("without {lost:?}")))
        })
    }

    /// Every `(origin, clock)` of another origin delivered to each peer, by factors or relay.
    #[derive(Default)]
    struct Got(BTreeMap<usize, BTreeSet<(u32, u64)>>);

    impl Observer<Engine<Mlr>> for Got {
        fn on_deliver(&mut self, _: Duration, _: PeerId, to: PeerId, msg: &Message) {
            let batch = match msg {
                Message::Factors { batch, .. } | Message::Relayed { batch, .. } => batch,
                _ => return,
            };
            self.0
                .entry(to.index())
                .or_default()
                .insert((batch.origin.0, batch.clock));
        }
    }

    pub(super) fn check(c: &CrashCase) -> Result<(), TestCaseError> {
        let b = &c.base;
        let t = b.topo.build(b.peers);
        let out: Vec<Vec<PeerId>> = (0..b.peers)
            .map(|i| t.out(i).iter().map(|&n| PeerId(n as u32)).collect())
            .collect();
        let routes = std::sync::Arc::new(Routes::new(&out).unwrap());
        let nodes = engines_with(&t, &b.model.consistency(), b.clocks, b.data_seed, |cfg| {
            cfg.relay = Some(std::sync::Arc::clone(&routes));
            cfg.on_peer_loss = sfb_core::PeerLoss::Continue;
        });
        let mut net = network(nodes, b)
            .repair(repair_of(out))
            .detect_after(Duration::from_micros(700));
        for &(p, us) in &c.crashes {
            net = net.crash(PeerId(p), Duration::from_micros(us));
        }
        let mut got = Got::default();
        // No stall, whatever crashed when.
        let done = net
            .run_with(&mut got)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let crashed: Vec<PeerId> = done
            .nodes
            .iter()
            .filter(|n| n.crashed)
            .map(|n| n.node.config().id)
            .collect();
        let survivors: Vec<u32> = (0..b.peers as u32)
            .filter(|p| !crashed.contains(&PeerId(*p)))
            .collect();
        // Whether the arcs left may not connect the survivors, for the losses a peer knows
        // of at some moment (any subset of the crashed): then a survivor may stop, saying
        // so, and its neighbours lose it in turn.
        let may_cut = (1u32..1 << crashed.len()).any(|m| {
            let some: Vec<PeerId> = (0..crashed.len())
                .filter(|k| m >> k & 1 == 1)
                .map(|k| crashed[k])
                .collect();
            routes.without(&some).1.is_some()
        });
        for (i, n) in done.nodes.iter().enumerate() {
            if n.crashed {
                continue;
            }
            if let Some(e) = &n.failed {
                prop_assert!(
                    may_cut
                        && [
                            "relay trees do not reach",
                            "no majority",
                            "never heard from"
                        ]
                        .iter()
                        .any(|w| e.contains(w)),
                    "p{}: {} (crashed {:?})",
                    i,
                    e,
                    crashed
                );
                continue;
            }
            if may_cut {
                continue;
            }
            prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
            let m = n.node.metrics();
            prop_assert_eq!(m.relay_missed, 0, "p{}", i);
            // Every surviving origin's every batch reached it...
            let seen = got.0.get(&i).cloned().unwrap_or_default();
            for &o in survivors.iter().filter(|&&o| o != i as u32) {
                for clock in 0..b.clocks {
                    prop_assert!(
                        seen.contains(&(o, clock)),
                        "p{} never got p{}'s clock {} (crashed {:?})",
                        i,
                        o,
                        clock,
                        crashed
                    );
                }
            }
            // ...and it applied each once: its own, every surviving origin's, and at most
            // the distinct ones of lost origins it got (those that arrive after it learned
            // of the loss are dropped, as without relay).
            let others = (survivors.len() as u64 - 1) * b.clocks;
            prop_assert!(
                (b.clocks + others..=b.clocks + seen.len() as u64).contains(&m.batches_applied),
                "p{} applied {} batches, got {} distinct (crashed {:?})",
                i,
                m.batches_applied,
                seen.len(),
                crashed
            );
        }
        Ok(())
    }
}

/// The crash cases of `crashes.rs`, cut to a minority, one in four made asynchronous.
fn minority_crash_case() -> impl Strategy<Value = crate::crashes::CrashCase> {
    (crate::crashes::crash_case(), 0..4u8).prop_map(|(mut c, k)| {
        let keep = (c.base.peers - 1) / 2;
        c.crashes.truncate(keep);
        if k == 0 {
            c.base.model = crate::consistency::Model::Async;
        }
        c
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        rng_seed: proptest::test_runner::RngSeed::Fixed(31),
        failure_persistence: None,
        ..ProptestConfig::with_cases(512)
    })]

    /// Issue 31: relay goes on after a minority of crashes (any peer, any moment, BSP,
    /// SSP or async, full, random and Kautz topologies): no run stalls; a survivor stops only when
    /// the arcs left may not connect the survivors, and says so; where they do, every
    /// survivor finishes, gets every surviving origin's every batch and applies each once,
    /// with none missed by a repair.
    #[test]
    fn relay_routes_around_a_minority_of_crashes(c in minority_crash_case()) {
        loss::check(&c)?;
    }
}
