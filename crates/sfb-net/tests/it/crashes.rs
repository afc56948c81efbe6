//! Crashes as data on the virtual-time driver (issue 31, item 5): seeded runs over
//! topologies, consistency models, delays and crash schedules, checked for what the
//! membership rule promises. Survivors of a minority of crashes finish every clock; no
//! node without a majority reports success after it could know; every survivor that runs
//! past the last loss trains on the same repaired topology; no run stalls. No threads, no
//! sleeps: every run is a function of its inputs.

use std::time::Duration;

use proptest::prelude::*;
use sfb_core::{PeerId, PeerLoss, StateMachine};
use sfb_net::virtual_time::RepairFn;
use sfb_topology::Topology;

use crate::consistency::{Case, Model, engines_with, network, topo};

/// How long after a crash the others learn of it.
const DETECT: Duration = Duration::from_micros(700);

#[derive(Debug, Clone)]
pub(crate) struct CrashCase {
    pub(crate) base: Case,
    /// `(node, µs)`: distinct nodes, crash times.
    pub(crate) crashes: Vec<(u32, u64)>,
    quorum: bool,
}

/// Every survivor's neighbours after the losses so far: [`sfb_topology::repair`] of `t`,
/// the same graph on every survivor (its id: the survivors and their lists).
fn repair_of(t: &Topology) -> RepairFn {
    let t = t.clone();
    Box::new(move |me, lost| {
        let failed: Vec<usize> = lost.iter().map(|p| p.index()).collect();
        let r = sfb_topology::repair(&t, &failed).ok()?;
        let new_me = r.new_id(me)?;
        let lists = r.topology.out_lists();
        let old = |n: usize| PeerId(r.survivors[n] as u32);
        let out = lists[new_me].iter().map(|&n| old(n)).collect();
        let inn = (0..lists.len())
            .filter(|&n| lists[n].contains(&new_me))
            .map(old)
            .collect();
        Some((out, inn, format!("{:?} {lists:?}", r.survivors)))
    })
}

pub(crate) fn crash_case() -> impl Strategy<Value = CrashCase> {
    (3..=8usize)
        .prop_flat_map(|peers| {
            (
                Just(peers),
                topo(peers),
                // Nodes that wait for each other: no node nears its last clock by the last
                // crash's notice (see the known limit below).
                prop_oneof![Just(Model::Bsp), (0..=4u64).prop_map(Model::Ssp)],
                20..=40u64,
                any::<u64>(),
                any::<u64>(),
                (500..2_000u64, 0..2_000u64),
                proptest::sample::subsequence((0..peers as u32).collect::<Vec<_>>(), 1..peers),
                proptest::collection::vec(0..3_000u64, peers),
                any::<bool>(),
            )
        })
        .prop_map(
            |(peers, topo, model, clocks, net_seed, data_seed, (lo, spread), who, when, quorum)| {
                CrashCase {
                    base: Case {
                        peers,
                        topo,
                        model,
                        clocks,
                        net_seed,
                        data_seed,
                        latency_us: (lo, lo + spread),
                        straggler: None,
                    },
                    crashes: who.iter().map(|&p| (p, when[p as usize])).collect(),
                    quorum,
                }
            },
        )
}

proptest! {
    // Seeded: the same 512 cases on every run (explore with PROPTEST_CASES and another
    // seed here).
    #![proptest_config(ProptestConfig {
        cases: 512,
        rng_seed: proptest::test_runner::RngSeed::Fixed(31),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn survivors_follow_the_membership_rule(c in crash_case()) {
        check(&c)?;
    }

    /// Restarts as data (issue 31, item 5): a node crashes at any moment and comes back
    /// 0.1-4 ms after the others count it lost (BSP or SSP, full, random and Kautz
    /// topologies, the quorum rule on or off). No run stalls; every node that never
    /// crashed finishes every clock; the node, if back in time, is taken back with a state
    /// equal, bitwise, to its donor's at the transfer clock, and finishes every clock; if
    /// back after the run ended, it gives up, saying so.
    #[test]
    fn a_restarted_node_rejoins_equal_to_its_donor(c in restart_case(false)) {
        check_restarts(&c)?;
    }

    /// The same with a minority crashing and coming back at once. It found five faults,
    /// all fixed:
    /// - a node back while another was rejoining adopted a state sent before that return
    ///   and counted it lost for good (`Membership` keeps the returns it was told while
    ///   rejoining over the state's);
    /// - two nodes back at once, one the other's only sender, left the second waiting for
    ///   a state nobody would send (a node that adopts hands its state to those it was
    ///   told came back meanwhile);
    /// - a node back after every node that sends to it had finished waited forever (the
    ///   virtual-time driver gives it up, as a process's rejoin timeout does);
    /// - at case 178 (7 peers, Kautz Q = 2, BSP; p3, p0 and p2 back 0.1-0.3 ms after
    ///   detection) p0 adopted p3's state of clock 4 and waited for p6's clock 4, which p6,
    ///   ahead, had sent while p0 was out; p6 waited for p0 to reach the end. A second
    ///   sender's state is not adopted but says where its frames start (`Engine::adopt`);
    /// - at other seeds, a donor's view of who is lost and finished senders counted as
    ///   losses (`a_node_back_takes_its_donors_view_of_who_is_lost`,
    ///   `finished_senders_are_not_counted_against_the_majority`).
    fn several_restarted_nodes_rejoin_equal_to_their_donors(c in restart_case(true)) {
        check_restarts(&c)?;
    }
}

/// Runs `c` and checks the membership rule's promises on it.
fn check(c: &CrashCase) -> Result<(), TestCaseError> {
    let b = &c.base;
    let t = b.topo.build(b.peers);
    let quorum = c.quorum;
    let nodes = engines_with(&t, &b.model.consistency(), b.clocks, b.data_seed, |cfg| {
        cfg.on_peer_loss = PeerLoss::Continue;
        cfg.quorum = quorum;
    });
    let mut net = network(nodes, b).repair(repair_of(&t)).detect_after(DETECT);
    for &(p, us) in &c.crashes {
        net = net.crash(PeerId(p), Duration::from_micros(us));
    }
    // No stall, whatever crashed when.
    let out = net.run().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let p = b.peers;
    let crashed: Vec<PeerId> = out
        .nodes
        .iter()
        .filter(|n| n.crashed)
        .map(|n| n.node.id())
        .collect();
    // Known limit, outside this property: a survivor that has sent its last clock when
    // the others are rewired may become a new in-neighbour that never sends again
    // (asynchronous nodes, or losses near the end of a run): the others then wait for
    // it, or count it lost. Only runs where every survivor was still running when told
    // of every crash are judged (with waiting models, 20+ clocks at 0.5 ms+ links and
    // crashes before 3 ms, all of them).
    prop_assume!(
        out.nodes
            .iter()
            .filter(|n| !n.crashed)
            .all(|n| n.failed.is_some() || n.told.len() == crashed.len())
    );
    // The fewest losses that leave the survivors without a majority.
    let k_min = (1..p).find(|&k| 2 * (p - k) <= p).unwrap_or(p);
    let mut topologies = Vec::new();
    let mut views = Vec::new();
    for (i, n) in out.nodes.iter().enumerate() {
        if n.crashed {
            continue;
        }
        let heard = n.node.metrics().bytes_received;
        match &n.failed {
            Some(why) if why.contains("never heard") => {
                // Left alone having heard from nobody, whatever the quorum rule: every
                // other peer crashed before reaching it.
                prop_assert_eq!(heard, 0, "p{}: {}", i, why);
                prop_assert_eq!(crashed.len(), p - 1, "p{}: {}", i, why);
            }
            Some(why) => {
                // Only the quorum rule stops a survivor, and only once it was told of
                // enough losses.
                prop_assert!(quorum, "p{} failed with the quorum off: {}", i, why);
                prop_assert!(why.contains("no majority"), "p{}: {}", i, why);
                prop_assert!(
                    n.told.len() >= k_min,
                    "p{} stopped early: {}",
                    i,
                    why_not(n)
                );
                prop_assert!(crashed.len() >= k_min);
            }
            None => {
                // No majority left and told so: it must not report success (no crashed
                // node can have delivered all its clocks by 3 ms at these delays, so
                // every loss counts).
                prop_assert!(
                    !(quorum && n.told.len() >= k_min),
                    "p{} reported success without a majority: {}",
                    i,
                    why_not(n)
                );
                prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
                prop_assert_eq!(n.records.last().map(|r| r.clock), Some(b.clocks));
                prop_assert!(heard > 0, "p{} finished having heard from nobody", i);
            }
        }
        if n.failed.is_none() && !crashed.is_empty() && n.told.len() == crashed.len() {
            topologies.push(n.node.metrics().topology.clone());
        }
        if n.failed.is_none() && n.told.len() == crashed.len() {
            views.push((i, n.view.epoch(), n.view.standings()));
        }
    }
    // A minority of losses stops nobody, whatever the timing (a peer of 3 or more
    // that lost everyone lost no minority).
    if crashed.len() < k_min {
        prop_assert!(out.nodes.iter().all(|n| n.failed.is_none()));
    }
    // Every survivor told of every loss trains on the same repaired graph, and ends at
    // the same epoch with the same view (each crash one change).
    prop_assert!(
        topologies.windows(2).all(|w| w[0] == w[1]),
        "{:?}",
        topologies
    );
    same_views(&views)?;
    if let Some((i, epoch, _)) = views.first() {
        prop_assert_eq!(*epoch, crashed.len() as u64, "p{}", i);
    }
    Ok(())
}

/// Found by the property above at another seed (`RngSeed::Fixed(1)`, 4,000 cases): after
/// a repair under BSP, two survivors that the repaired graph newly joins each waited for
/// the other's first frame, which each sends only after its next clock, and the run
/// stalled (`p2 at clock 4 waits on p4 …; p4 at clock 3 waits on p2 …`). A fresh
/// in-neighbour no longer holds the barrier until its first frame (sfb-core `Inbound`).
#[test]
fn a_repaired_bsp_pair_does_not_wait_for_each_others_first_frame() {
    let c = CrashCase {
        base: Case {
            peers: 5,
            topo: crate::consistency::Topo::Random {
                q: 1,
                seed: 2_063_674_012_352_756_728,
            },
            model: Model::Bsp,
            clocks: 20,
            net_seed: 2_368_487_887_212_035_226,
            data_seed: 0,
            latency_us: (651, 1620),
            straggler: None,
        },
        crashes: vec![(0, 252), (1, 1004), (3, 386)],
        quorum: false,
    };
    check(&c).unwrap();
}

fn why_not<N>(n: &sfb_net::virtual_time::NodeRun<N>) -> String {
    format!("told of {:?}, finished at {:?}", n.told, n.finished_at)
}

/// Found by the property at `RngSeed::Fixed(2)`, 4,000 cases: p0 → p7 is an arc of the
/// first graph, not of the one repaired after p6's crash, and again of the one repaired
/// after p3's. p7 held p0's late frames of clocks 0–3 (sent under the first graph) until
/// the second repair, took them as p0's first frames, then refused p0's clock 6 as out of
/// order: p0 had sent clocks 4 and 5 to its neighbours of the middle graph. A node
/// brought back by a repair may now skip clocks once (sfb-core `Inbound`).
#[test]
fn frames_held_across_two_repairs_are_taken_in_order() {
    let c = CrashCase {
        base: Case {
            peers: 8,
            topo: crate::consistency::Topo::Kautz { q: 2 },
            model: Model::Ssp(3),
            clocks: 20,
            net_seed: 8_296_453_969_102_245_770,
            data_seed: 0,
            latency_us: (1257, 2190),
            straggler: None,
        },
        crashes: vec![(3, 1451), (6, 0)],
        quorum: false,
    };
    check(&c).unwrap();
}

/// Issue 31, failure 1 (split brain), on virtual time: peer 3 of 4 is cut off from the
/// others for 70 s, past the 60 s after which a silent peer is lost, under SSP(2) with the
/// continue policy. Each side then counts the other lost. With the quorum rule only the
/// side holding a majority goes on: p0–p2 finish every clock on the repaired topology and
/// p3 stops, naming whom it lost. Without it (`continue-alone`) both sides report success:
/// the split brain a user who wants availability chooses. A cut shorter than the
/// detection delay loses nobody: the held frames are delivered when it heals.
#[test]
fn a_70_s_partition_stops_the_minority_and_the_majority_finishes() {
    let base = Case {
        peers: 4,
        topo: crate::consistency::Topo::Full,
        model: Model::Ssp(2),
        clocks: 200,
        net_seed: 7,
        data_seed: 8,
        latency_us: (50, 150),
        straggler: None,
    };
    let t = base.topo.build(4);
    let run = |quorum: bool, cut_s: u64| {
        let nodes = engines_with(&t, &base.model.consistency(), base.clocks, 8, |cfg| {
            cfg.on_peer_loss = PeerLoss::Continue;
            cfg.quorum = quorum;
        });
        let from = Duration::from_millis(2);
        network(nodes, &base)
            .repair(repair_of(&t))
            .detect_after(Duration::from_secs(60))
            .partition(vec![PeerId(3)], from, from + Duration::from_secs(cut_s))
            .run()
            .unwrap()
    };
    let out = run(true, 70);
    for n in &out.nodes[..3] {
        assert!(n.failed.is_none(), "{:?}: {:?}", n.node.id(), n.failed);
        assert_eq!(n.node.clock(), 200);
        assert_eq!(n.told, [PeerId(3)]);
        let lost: Vec<u32> = n.node.metrics().lost_peers.iter().map(|l| l.0).collect();
        assert_eq!(lost, [3]);
    }
    let p3 = &out.nodes[3];
    let why = p3
        .failed
        .as_deref()
        .expect("the minority reports no success");
    assert!(why.contains("no majority"), "{why}");
    // It stops as soon as the losses it is told of leave it no majority: 2 of 4.
    assert_eq!(p3.told, [PeerId(0), PeerId(1)]);
    assert!(p3.node.clock() < 200, "p3 at clock {}", p3.node.clock());
    eprintln!(
        "70 s cut of p3: p3 stopped at clock {} ({why}); p0 finished 200 clocks at {:?}",
        p3.node.clock(),
        out.nodes[0].finished_at
    );
    // The majority learned of the cut 60 s after it began, and went on from there.
    assert!(out.nodes[0].finished_at > Duration::from_secs(60));
    let topologies: Vec<_> = out.nodes[..3]
        .iter()
        .map(|n| n.node.metrics().topology.clone())
        .collect();
    assert!(
        topologies.windows(2).all(|w| w[0] == w[1]),
        "{topologies:?}"
    );
    // Availability instead: both sides go on and report results of their own.
    let out = run(false, 70);
    assert!(out.nodes.iter().all(|n| n.failed.is_none()));
    assert!(out.nodes.iter().all(|n| n.node.clock() == 200));
    assert_eq!(out.nodes[3].told, [PeerId(0), PeerId(1), PeerId(2)]);
    // A 30 s cut: nobody is lost; the frames held on the cut links arrive when it heals.
    let out = run(true, 30);
    for n in &out.nodes {
        assert!(n.failed.is_none() && n.told.is_empty(), "{:?}", n.failed);
        assert_eq!(n.node.clock(), 200);
    }
    assert!(out.nodes[0].finished_at > Duration::from_secs(30));
}

#[derive(Debug, Clone)]
struct CutCase {
    base: Case,
    /// The nodes on one side of the cut.
    side: Vec<u32>,
    /// When it begins (µs) and whether it outlasts the detection delay.
    from_us: u64,
    long: bool,
    quorum: bool,
}

fn cut_case() -> impl Strategy<Value = CutCase> {
    (3..=8usize)
        .prop_flat_map(|peers| {
            (
                Just(peers),
                topo(peers),
                prop_oneof![Just(Model::Bsp), (0..=4u64).prop_map(Model::Ssp)],
                20..=40u64,
                any::<u64>(),
                any::<u64>(),
                (500..2_000u64, 0..2_000u64),
                proptest::sample::subsequence((0..peers as u32).collect::<Vec<_>>(), 1..peers),
                0..3_000u64,
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(
            |(
                peers,
                topo,
                model,
                clocks,
                net_seed,
                data_seed,
                (lo, spread),
                side,
                from_us,
                long,
                quorum,
            )| {
                CutCase {
                    base: Case {
                        peers,
                        topo,
                        model,
                        clocks,
                        net_seed,
                        data_seed,
                        latency_us: (lo, lo + spread),
                        straggler: None,
                    },
                    side,
                    from_us,
                    long,
                    quorum,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        rng_seed: proptest::test_runner::RngSeed::Fixed(32),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// A partition of any side, short or past the detection delay: no run stalls; a
    /// short cut loses nobody; past it, with the quorum rule, only a side holding a strict
    /// majority finishes and the other reports no success (an even split: neither), and
    /// without it both sides finish.
    #[test]
    fn partitions_follow_the_membership_rule(c in cut_case()) {
        let b = &c.base;
        let t = b.topo.build(b.peers);
        let quorum = c.quorum;
        let nodes = engines_with(&t, &b.model.consistency(), b.clocks, b.data_seed, |cfg| {
            cfg.on_peer_loss = PeerLoss::Continue;
            cfg.quorum = quorum;
        });
        let from = Duration::from_micros(c.from_us);
        let length = if c.long { DETECT * 3 } else { DETECT / 2 };
        let side: Vec<PeerId> = c.side.iter().map(|&p| PeerId(p)).collect();
        let out = network(nodes, b)
            .repair(repair_of(&t))
            .detect_after(DETECT)
            .partition(side.clone(), from, from + length)
            .run()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let p = b.peers;
        let mine = side.len();
        for (i, n) in out.nodes.iter().enumerate() {
            let inside = side.contains(&PeerId(i as u32));
            let here = if inside { mine } else { p - mine };
            // A node that finished before the cut was detected was never told of it.
            let cut_off = c.long && !n.told.is_empty();
            let heard = n.node.metrics().bytes_received;
            match &n.failed {
                Some(why) if why.contains("never heard") => {
                    // Cut off alone from the start: it does not train alone, whatever
                    // the quorum rule.
                    prop_assert!(c.long && here == 1 && heard == 0, "p{}: {}", i, why);
                }
                Some(why) => {
                    prop_assert!(c.long && quorum, "p{} failed: {}", i, why);
                    prop_assert!(why.contains("no majority"), "p{}: {}", i, why);
                    prop_assert!(2 * here <= p, "p{} on the majority side failed: {}", i, why);
                }
                None => {
                    prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
                    prop_assert!(heard > 0, "p{} finished having heard from nobody", i);
                    if !c.long {
                        prop_assert!(n.told.is_empty(), "p{} lost {:?} to a short cut", i, n.told);
                    }
                    prop_assert!(
                        !(quorum && cut_off && 2 * here <= p),
                        "p{} on a side of {} of {} reported success: {}",
                        i,
                        here,
                        p,
                        why_not(n)
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        rng_seed: proptest::test_runner::RngSeed::Fixed(33),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The minority pauses and rejoins when the cut heals (issue 31, item 2): a partition
    /// of any side, three detection delays long, quorum on, every node able to come back
    /// ([`Network::rejoin_when_healed`]). No run stalls; the majority side finishes every
    /// clock; a node that stopped as a minority comes back when the cut heals and is taken
    /// back with a W equal to its donor's state, then finishes every clock, or, if the
    /// run has ended by then, gives up saying so. An even split leaves no side to take
    /// anyone back.
    #[test]
    fn a_minority_rejoins_when_the_cut_heals(c in cut_case()) {
        let b = &c.base;
        let t = b.topo.build(b.peers);
        let build = || {
            engines_with(&t, &b.model.consistency(), b.clocks, b.data_seed, |cfg| {
                cfg.on_peer_loss = PeerLoss::Continue;
                cfg.quorum = true;
            })
        };
        let from = Duration::from_micros(c.from_us);
        let side: Vec<PeerId> = c.side.iter().map(|&p| PeerId(p)).collect();
        let mut net = network(build(), b)
            .repair(repair_of(&t))
            .detect_after(DETECT)
            .partition(side.clone(), from, from + DETECT * 3);
        for (i, fresh) in build().into_iter().enumerate() {
            net = net.rejoin_when_healed(PeerId(i as u32), DETECT * 3, fresh.rejoining());
        }
        let out = net.run().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let p = b.peers;
        let mine = side.len();
        for (i, n) in out.nodes.iter().enumerate() {
            let inside = side.contains(&PeerId(i as u32));
            let here = if inside { mine } else { p - mine };
            if 2 * here > p {
                prop_assert!(n.failed.is_none(), "p{} of the majority: {:?}", i, n.failed);
                prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
                prop_assert!(n.paused_cut_off.is_none());
                continue;
            }
            match (&n.paused_cut_off, &n.rejoined, &n.failed) {
                // Not cut off (it finished before the cut was detected), or alone from the
                // start (it never heard from anyone: not a minority to take back).
                (None, _, None) => prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i),
                (None, _, Some(why)) => prop_assert!(
                    why.contains("never heard") || (2 * here == p && why.contains("no majority")),
                    "p{}: {}", i, why
                ),
                (Some(_), Some(r), None) => {
                    prop_assert!(r.equal, "p{} adopted a state unlike its donor's: {:?}", i, r);
                    prop_assert!(2 * here < p, "p{} taken back after an even split", i);
                    prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
                }
                (Some(_), None, Some(why)) => {
                    prop_assert!(why.contains("no node took it back"), "p{}: {}", i, why);
                }
                (Some(_), r, None) => prop_assert!(false, "p{} paused, {:?}, no failure", i, r),
                (Some(_), Some(_), Some(why)) => {
                    prop_assert!(false, "p{} rejoined then failed: {}", i, why);
                }
            }
        }
    }
}

/// The 70 s partition with the minority pausing (issue 31, item 2), scaled down: p3 of 4
/// is cut off for 8 ms, past the 5 ms after which the others count it lost. It stops as
/// the minority, comes back when the cut heals, adopts a neighbour's state (bitwise equal
/// to what was sent) and finishes every clock with the others.
#[test]
fn a_minority_cut_off_pauses_and_rejoins_when_the_cut_heals() {
    let base = Case {
        peers: 4,
        topo: crate::consistency::Topo::Full,
        model: Model::Ssp(2),
        clocks: 200,
        net_seed: 7,
        data_seed: 8,
        latency_us: (50, 150),
        straggler: None,
    };
    let t = base.topo.build(4);
    let build = || {
        engines_with(&t, &base.model.consistency(), base.clocks, 8, |cfg| {
            cfg.on_peer_loss = PeerLoss::Continue;
        })
    };
    let from = Duration::from_millis(2);
    let heals = from + Duration::from_millis(8);
    let out = network(build(), &base)
        .repair(repair_of(&t))
        .detect_after(Duration::from_millis(5))
        .partition(vec![PeerId(3)], from, heals)
        .rejoin_when_healed(
            PeerId(3),
            Duration::from_secs(1),
            build().swap_remove(3).rejoining(),
        )
        .run()
        .unwrap();
    for n in &out.nodes {
        assert!(n.failed.is_none(), "{:?}: {:?}", n.node.id(), n.failed);
        assert_eq!(n.node.clock(), 200);
    }
    let p3 = &out.nodes[3];
    let paused = p3.paused_cut_off.expect("p3 paused cut off");
    assert!(
        paused >= from + Duration::from_millis(5) && paused < heals,
        "{paused:?}"
    );
    assert_eq!(p3.restarted_at, Some(heals));
    let r = p3.rejoined.as_ref().expect("p3 taken back");
    assert!(r.equal && r.clock > 0 && r.clock < 200, "{r:?}");
    // The others count it back.
    for n in &out.nodes[..3] {
        let m = n.node.metrics();
        assert_eq!(m.lost_peers.iter().map(|l| l.0).collect::<Vec<_>>(), [3]);
        assert_eq!(
            m.rejoined_peers.iter().map(|l| l.0).collect::<Vec<_>>(),
            [3]
        );
    }
    // A cut that heals later than the node keeps trying: it stays stopped.
    let out = network(build(), &base)
        .repair(repair_of(&t))
        .detect_after(Duration::from_millis(5))
        .partition(vec![PeerId(3)], from, heals)
        .rejoin_when_healed(
            PeerId(3),
            Duration::from_millis(2),
            build().swap_remove(3).rejoining(),
        )
        .run()
        .unwrap();
    let p3 = &out.nodes[3];
    assert_eq!(p3.cut_off, Some(sfb_net::virtual_time::CutOff::Minority));
    assert!(p3.paused_cut_off.is_none() && p3.restarted_at.is_none());
}

/// Restarts as data (issue 31, item 5): p2 of 6 crashes after clock 20 and comes back 5 ms
/// later (the others count it lost after 0.7 ms) as a fresh engine waiting to rejoin. The
/// others learn it is back; those that send to it hand it their state over the simulated
/// link; it adopts the first, equal bitwise to what was sent, and every node finishes
/// every clock, on full broadcast and on a Q = 2 topology under SSP(2) and BSP. A restart
/// that cannot happen (too early, of a node that never crashes, of a node not waiting to
/// rejoin) is refused by name.
#[test]
fn a_crashed_node_restarts_rejoins_from_a_neighbour_and_everyone_finishes() {
    for (topo, model) in [
        (crate::consistency::Topo::Full, Model::Ssp(2)),
        (crate::consistency::Topo::Kautz { q: 2 }, Model::Bsp),
    ] {
        let base = Case {
            peers: 6,
            topo,
            model,
            clocks: 60,
            net_seed: 3,
            data_seed: 4,
            latency_us: (100, 300),
            straggler: None,
        };
        let t = base.topo.build(6);
        let build = || {
            engines_with(&t, &base.model.consistency(), base.clocks, 4, |cfg| {
                cfg.on_peer_loss = PeerLoss::Continue;
            })
        };
        let fresh = build().swap_remove(2).rejoining();
        let out = network(build(), &base)
            .repair(repair_of(&t))
            .detect_after(DETECT)
            .crash_after_clock(PeerId(2), 20)
            .restart(PeerId(2), Duration::from_millis(5), fresh)
            .run()
            .unwrap();
        for n in &out.nodes {
            let id = n.node.id();
            assert!(n.failed.is_none() && !n.crashed, "{id}: {:?}", n.failed);
            assert_eq!(n.node.clock(), 60, "{id}");
        }
        let p2 = &out.nodes[2];
        let back = p2.restarted_at.expect("p2 restarted");
        let r = p2.rejoined.as_ref().expect("p2 was taken back");
        assert!(
            r.equal,
            "the rejoined replica equals its donor's state: {r:?}"
        );
        assert!(r.at > back && r.clock > 20, "{r:?} after {back:?}");
        assert!(
            t.out(r.from.index()).contains(&2),
            "{r:?}: a node that sends to p2"
        );
        for n in out.nodes.iter().filter(|n| n.node.id() != PeerId(2)) {
            let m = n.node.metrics();
            assert_eq!(m.gone(), [], "{}: {:?}", n.node.id(), m.lost_peers);
            assert!(m.rejoined_peers.iter().any(|&(p, _)| p == 2), "{m:?}");
        }
        eprintln!(
            "{topo:?} {model:?}: p2 back at {back:?}, took {}'s state of clock {} at {:?}; \
             all finished by {:?}",
            r.from, r.clock, r.at, out.end
        );
    }
    // Refused by name.
    let base = Case {
        peers: 4,
        topo: crate::consistency::Topo::Full,
        model: Model::Bsp,
        clocks: 10,
        net_seed: 1,
        data_seed: 1,
        latency_us: (100, 100),
        straggler: None,
    };
    let t = base.topo.build(4);
    let build = || engines_with(&t, &base.model.consistency(), 10, 1, |_| {});
    let refused = |net: sfb_net::virtual_time::Network<_>| net.run().unwrap_err().to_string();
    let e = refused(
        network(build(), &base)
            .detect_after(DETECT)
            .crash_after_clock(PeerId(1), 3)
            .restart(PeerId(1), DETECT / 2, build().swap_remove(1).rejoining()),
    );
    assert!(e.contains("comes before the others count it lost"), "{e}");
    let e = refused(network(build(), &base).restart(
        PeerId(1),
        DETECT * 2,
        build().swap_remove(1).rejoining(),
    ));
    assert!(
        e.contains("the restart of p1 comes after no crash of it"),
        "{e}"
    );
    let e = refused(
        network(build(), &base)
            .crash_after_clock(PeerId(1), 3)
            .restart(PeerId(1), Duration::from_secs(2), build().swap_remove(1)),
    );
    assert!(e.contains("not waiting to rejoin"), "{e}");
}

/// A restart into a gossip run (the default partial-broadcast mode): the node comes back
/// with no copy of its neighbours' public copies, and its out-neighbours dropped theirs of
/// its own when they lost it. Each in-neighbour sends it its public copy whole
/// (`Message::Copy`) and it sends its out-neighbours its own (the adopted W), so after the
/// run every node mixes with every live in-neighbour, the restarted one included; its
/// replica ends as close to the others' as theirs are to each other.
#[test]
fn a_restart_into_a_gossip_run_mixes_again_both_ways() {
    let base = Case {
        peers: 6,
        topo: crate::consistency::Topo::Kautz { q: 2 },
        model: Model::Ssp(1),
        clocks: 80,
        net_seed: 5,
        data_seed: 6,
        latency_us: (100, 300),
        straggler: None,
    };
    let t = base.topo.build(6);
    let build = || {
        engines_with(&t, &base.model.consistency(), base.clocks, 6, |cfg| {
            cfg.on_peer_loss = PeerLoss::Continue;
            let mut g = sfb_core::gossip::Config::new(vec![1.0; 6].into());
            g.rank = 2;
            cfg.gossip = Some(g);
        })
    };
    let fresh = build().swap_remove(2).rejoining();
    let out = network(build(), &base)
        .repair(repair_of(&t))
        .detect_after(DETECT)
        .crash_after_clock(PeerId(2), 20)
        .restart(PeerId(2), Duration::from_millis(5), fresh)
        .run()
        .unwrap();
    let r = out.nodes[2].rejoined.as_ref().expect("p2 was taken back");
    assert!(r.equal, "{r:?}");
    for n in &out.nodes {
        let id = n.node.id();
        assert!(n.failed.is_none(), "{id}: {:?}", n.failed);
        assert_eq!(n.node.clock(), 80, "{id}");
        let mut inn = n.node.config().in_neighbors.clone();
        let mut mixed = n.node.mixed_with();
        inn.sort();
        mixed.sort();
        assert_eq!(mixed, inn, "{id} mixes with every in-neighbour");
    }
    assert!(
        out.nodes
            .iter()
            .any(|n| n.node.config().in_neighbors.contains(&PeerId(2))),
        "p2 sends to someone"
    );
    let w = |i: usize| out.nodes[i].node.replica().w().to_owned();
    let gap = |a: usize, b: usize| (&w(a) - &w(b)).mapv(f32::abs).sum();
    let others = (0..6)
        .filter(|&i| i != 2)
        .flat_map(|a| {
            (0..6)
                .filter(move |&b| b != 2 && b > a)
                .map(move |b| (a, b))
        })
        .map(|(a, b)| gap(a, b))
        .fold(0.0f32, f32::max);
    let p2 = (0..6)
        .filter(|&i| i != 2)
        .map(|i| gap(2, i))
        .fold(0.0f32, f32::max);
    eprintln!("largest Σ|ΔW|: p2 to another {p2:.4}, between the others {others:.4}");
    assert!(p2 <= 2.0 * others, "p2 {p2} against {others}");
}

/// A node that comes back after the run has ended is taken back by nobody: it gives up,
/// named, instead of stalling the run.
#[test]
fn a_restart_after_the_run_ended_gives_up_and_the_run_does_not_stall() {
    let base = Case {
        peers: 4,
        topo: crate::consistency::Topo::Full,
        model: Model::Bsp,
        clocks: 10,
        net_seed: 2,
        data_seed: 2,
        latency_us: (100, 100),
        straggler: None,
    };
    let t = base.topo.build(4);
    let build = || {
        engines_with(&t, &base.model.consistency(), 10, 2, |cfg| {
            cfg.on_peer_loss = PeerLoss::Continue;
        })
    };
    let out = network(build(), &base)
        .repair(repair_of(&t))
        .detect_after(DETECT)
        .crash_after_clock(PeerId(1), 8)
        .restart(
            PeerId(1),
            Duration::from_secs(1),
            build().swap_remove(1).rejoining(),
        )
        .run()
        .unwrap();
    let p1 = &out.nodes[1];
    assert!(p1.restarted_at.is_some() && p1.rejoined.is_none());
    let why = p1.failed.as_deref().unwrap_or_default();
    assert!(why.contains("no node took it back"), "{why}");
    for n in out.nodes.iter().filter(|n| n.node.id() != PeerId(1)) {
        assert!(n.failed.is_none(), "{:?}", n.failed);
        assert_eq!(n.node.clock(), 10);
    }
}

/// A minority crash case whose crashed nodes each come back, as fresh engines waiting to
/// rejoin, some time after the others count them lost.
#[derive(Debug, Clone)]
struct RestartCase {
    crash: CrashCase,
    /// Per crash, µs after the others count it lost.
    back_after_us: Vec<u64>,
}

/// [`RestartCase`]s of one crash, or of `several` (up to a minority).
fn restart_case(several: bool) -> impl Strategy<Value = RestartCase> {
    crash_case()
        .prop_flat_map(move |mut c| {
            c.crashes
                .truncate(if several { (c.base.peers - 1) / 2 } else { 1 });
            let n = c.crashes.len();
            (Just(c), proptest::collection::vec(100..4_000u64, n))
        })
        .prop_map(|(crash, back_after_us)| RestartCase {
            crash,
            back_after_us,
        })
}

/// Every `(node, epoch, standings)` is the same but for the node.
fn same_views(
    views: &[(usize, u64, Vec<sfb_core::membership::Standing>)],
) -> Result<(), TestCaseError> {
    for w in views.windows(2) {
        prop_assert!(
            (w[0].1, &w[0].2) == (w[1].1, &w[1].2),
            "p{} ends at epoch {} with {:?}, p{} at epoch {} with {:?}",
            w[0].0,
            w[0].1,
            w[0].2,
            w[1].0,
            w[1].1,
            w[1].2
        );
    }
    Ok(())
}

fn check_restarts(c: &RestartCase) -> Result<(), TestCaseError> {
    let b = &c.crash.base;
    let t = b.topo.build(b.peers);
    let quorum = c.crash.quorum;
    let build = || {
        engines_with(&t, &b.model.consistency(), b.clocks, b.data_seed, |cfg| {
            cfg.on_peer_loss = PeerLoss::Continue;
            cfg.quorum = quorum;
        })
    };
    let mut net = network(build(), b)
        .repair(repair_of(&t))
        .detect_after(DETECT);
    for (&(p, us), &after) in c.crash.crashes.iter().zip(&c.back_after_us) {
        let fresh = build().swap_remove(p as usize).rejoining();
        let at = Duration::from_micros(us + after) + DETECT;
        net = net
            .crash(PeerId(p), Duration::from_micros(us))
            .restart(PeerId(p), at, fresh);
    }
    // No stall, whatever crashed and came back when.
    let out = net.run().map_err(|e| TestCaseError::fail(e.to_string()))?;
    for (i, n) in out.nodes.iter().enumerate() {
        if n.restarted_at.is_none() {
            prop_assert!(!n.crashed, "p{} crashed and never came back", i);
            prop_assert!(n.failed.is_none(), "p{}: {:?}", i, n.failed);
            prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
            continue;
        }
        match &n.rejoined {
            Some(r) => {
                prop_assert!(
                    r.equal,
                    "p{} adopted a state unlike its donor's: {:?}",
                    i,
                    r
                );
                prop_assert!(n.failed.is_none(), "p{}: {:?}", i, n.failed);
                prop_assert_eq!(n.node.clock(), b.clocks, "p{}", i);
            }
            None => {
                let why = n.failed.as_deref().unwrap_or_default();
                prop_assert!(why.contains("no node took it back"), "p{}: {}", i, why);
            }
        }
    }
    // When every node back was taken back, every node still running when the last came
    // back (so told of every loss and return) ends at the same epoch with the same view:
    // each node back in its second life (two changes each).
    if out
        .nodes
        .iter()
        .all(|n| n.restarted_at.is_none() || n.rejoined.is_some())
    {
        let last = out.nodes.iter().filter_map(|n| n.restarted_at).max();
        let views: Vec<_> = (out.nodes.iter().enumerate())
            .filter(|(_, n)| last.is_some_and(|t| n.finished_at > t))
            .map(|(i, n)| (i, n.view.epoch(), n.view.standings()))
            .collect();
        same_views(&views)?;
        let back = out.nodes.iter().filter(|n| n.rejoined.is_some()).count();
        if let Some((i, epoch, _)) = views.first() {
            prop_assert_eq!(*epoch, 2 * back as u64, "p{}", i);
        }
    }
    Ok(())
}

/// Found by the several-restarts property at another seed (`RngSeed::Fixed(2)`, 3,000
/// cases): p6 came back while p0, back itself, had just adopted p2's state. p2 had
/// counted p6 lost, but not in its counters (p6 was not its neighbour), so p0 took the
/// state as saying p6 was in, was not told of p6's return as a loss ended, and handed it
/// no state; p6 then waited for p0's clocks 5-8, sent while it was out (`p0 at clock 9
/// waits on p6 …; p6 at clock 6 waits on p0 …`). A rejoin state now carries its sender's
/// membership view (`NodeState::lost` then; `NodeState::view`, with lives, now).
#[test]
fn a_node_back_takes_its_donors_view_of_who_is_lost() {
    check_restarts(&kautz7_bsp_restarts(
        (1_537_156_109_759_962_134, 13_981_424_123_448_631_464),
        (859, 1979),
        vec![(0, 2412), (4, 2519), (6, 2235)],
        false,
        vec![100, 100, 1560],
    ))
    .unwrap();
}

/// Found the same way (`RngSeed::Fixed(2)`): p0, back at clock 6, was rewired to p4 and
/// p6, which had finished the run alone. Their streams had ended, and p0 counted them
/// lost: with p1 and p3 out, that made 4 of 7 and p0 stopped as a minority, though the run
/// held a majority. A node that finished is no loss: the engine counts it as having
/// delivered every clock (`StateMachine::peer_finished`), and the virtual-time driver
/// ends a finished node's stream only after its last frame is taken (it had counted p4
/// gone with frames still on the way, and then refused them as duplicates).
#[test]
fn finished_senders_are_not_counted_against_the_majority() {
    check_restarts(&kautz7_bsp_restarts(
        (71_220_452_898_371, 4_196_812_742_056_801_899),
        (1749, 3244),
        vec![(0, 719), (1, 2372), (3, 2334)],
        true,
        vec![1293, 100, 100],
    ))
    .unwrap();
}

/// A restart case of 7 peers on the Kautz graph of degree 2 under BSP, 20 clocks (the
/// shape of the cases the several-restarts property found): `(net_seed, data_seed)`,
/// link latency range in µs, crashes `(peer, at µs)`, the quorum rule, and each crashed
/// peer's return after detection, µs.
fn kautz7_bsp_restarts(
    (net_seed, data_seed): (u64, u64),
    latency_us: (u64, u64),
    crashes: Vec<(u32, u64)>,
    quorum: bool,
    back_after_us: Vec<u64>,
) -> RestartCase {
    RestartCase {
        crash: CrashCase {
            base: Case {
                peers: 7,
                topo: crate::consistency::Topo::Kautz { q: 2 },
                model: Model::Bsp,
                clocks: 20,
                net_seed,
                data_seed,
                latency_us,
                straggler: None,
            },
            crashes,
            quorum,
        },
        back_after_us,
    }
}
