//! Engine input handling and the wire codec.

use std::sync::Arc;

use ndarray::{Array2, ArrayView2, ShapeBuilder};
use proptest::prelude::*;
use sfb_core::membership::Standing;
use sfb_core::wire::{self, Expect, Message};
use sfb_core::{
    Config, Consistency, Engine, Error, FactorBatch, ManualTime, Model, ModelError, PeerId,
    Progress, Routes, Shard, SvList, VFactors,
};

/// u = [1; J], v = x: a model whose factors are easy to predict.
struct Echo;
impl Model for Echo {
    type Sample = Vec<f32>;
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Vec<f32>],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let u = vec![1.0; w.nrows()];
        for x in batch {
            sv.push_dense(&u, x)?;
        }
        Ok(())
    }
}

/// Produces a NaN.
struct Broken;
impl Model for Broken {
    type Sample = Vec<f32>;
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Vec<f32>],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        let u = vec![f32::NAN; w.nrows()];
        for x in batch {
            sv.push_dense(&u, x)?;
        }
        Ok(())
    }
}

fn engine<M: Model<Sample = Vec<f32>>>(model: M, id: u32, peers: usize) -> Engine<M> {
    let mut cfg = Config::full_broadcast(PeerId(id), peers);
    cfg.clocks = 3;
    cfg.batch_size = 2;
    engine_for(cfg, model)
}

/// An engine for `cfg` (W 2×3, four samples).
fn engine_for<M: Model<Sample = Vec<f32>>>(cfg: Config, model: M) -> Engine<M> {
    Engine::new(
        cfg,
        model,
        Array2::zeros((2, 3)),
        Shard::new(vec![vec![1.0, 2.0, 3.0]; 4], 1),
    )
    .unwrap()
}

fn batch(origin: u32, clock: u64) -> FactorBatch {
    FactorBatch {
        origin: PeerId(origin),
        clock,
        scale: -0.1,
        j: 2,
        d: 3,
        u: vec![1.0; 2],
        v: VFactors::Dense(vec![1.0; 3]),
    }
}

fn msg(b: FactorBatch) -> Message {
    Message::Factors {
        batch: Arc::new(b),
        mean_iter_us: 10,
    }
}

#[test]
fn engine_rejects_bad_messages_without_changing_state() {
    let mut e = engine(Echo, 0, 3);
    let good = batch(1, 0);
    type Case = (PeerId, FactorBatch, fn(&Error) -> bool);
    let cases: Vec<Case> = vec![
        (
            PeerId(1),
            {
                let mut b = good.clone();
                b.u.push(1.0);
                b
            },
            |e| matches!(e, Error::DimensionMismatch { .. }),
        ),
        (
            PeerId(1),
            {
                let mut b = good.clone();
                b.u[0] = f32::NAN;
                b
            },
            |e| matches!(e, Error::NonFinite { .. }),
        ),
        (
            PeerId(1),
            {
                let mut b = good.clone();
                b.j = 3;
                b.u = vec![1.0; 3];
                b
            },
            |e| matches!(e, Error::DimensionMismatch { .. }),
        ),
        (PeerId(1), batch(1, 1), |e| {
            matches!(e, Error::BadClock { .. })
        }),
        (PeerId(1), batch(1, 99), |e| {
            matches!(e, Error::BadClock { .. })
        }),
        (PeerId(7), batch(7, 0), |e| {
            matches!(e, Error::UnknownPeer { .. })
        }),
        (PeerId(0), batch(0, 0), |e| {
            matches!(e, Error::NotAnInNeighbour { .. })
        }),
        (PeerId(2), batch(1, 0), |e| {
            matches!(e, Error::BadClock { .. })
        }),
    ];
    for (from, b, check) in cases {
        let err = e
            .on_message(from, msg(b), &mut ManualTime::default())
            .unwrap_err();
        assert!(check(&err), "unexpected error {err}");
    }
    assert_eq!(e.metrics().bytes_received, 0);
    // The good batch is still accepted afterwards, and a duplicate is refused.
    e.on_message(PeerId(1), msg(good.clone()), &mut ManualTime::default())
        .unwrap();
    assert!(matches!(
        e.on_message(PeerId(1), msg(good), &mut ManualTime::default())
            .unwrap_err(),
        Error::BadClock { .. }
    ));
}

/// A sender that repaired the topology after a loss before this peer did sends on an arc
/// this peer does not await yet: the frames are held, and delivered when its own repair
/// makes the sender an in-neighbour (a CI run once failed a survivor on exactly this).
#[test]
fn frames_from_a_sender_that_repaired_first_are_held_until_the_repair() {
    let mut cfg = Config::full_broadcast(PeerId(0), 3);
    cfg.clocks = 100;
    cfg.batch_size = 2;
    cfg.in_neighbors = vec![PeerId(1)];
    cfg.out_neighbors = vec![PeerId(1)];
    cfg.consistency = Consistency::Ssp { staleness: 0 };
    let mut e = engine_for(cfg, Echo);
    let t = &mut ManualTime::default();
    for clock in 0..2 {
        e.on_message(PeerId(2), msg(batch(2, clock)), t).unwrap();
    }
    assert_eq!(e.metrics().bytes_received, 0, "held, not applied");
    e.on_message(PeerId(1), msg(batch(1, 0)), t).unwrap();
    let held = e.metrics().bytes_received;
    e.set_neighbors(
        vec![PeerId(1), PeerId(2)],
        vec![PeerId(1), PeerId(2)],
        "repaired".into(),
    );
    assert_eq!(
        e.metrics().bytes_received,
        3 * held,
        "both held frames are delivered at the repair"
    );
    // Clock 1 of peer 2 is in; a duplicate of it is refused as one.
    let dup = e.on_message(PeerId(2), msg(batch(2, 1)), t).unwrap_err();
    assert!(matches!(dup, Error::BadClock { .. }), "{dup}");

    // A sender that never becomes an in-neighbour is refused once it exceeds the hold.
    let mut e = engine(Echo, 0, 3);
    e.set_neighbors(vec![PeerId(1)], vec![PeerId(1)], "cut".into());
    // Peer 2 is a former in-neighbour now: its frames are ignored, never held.
    e.on_message(PeerId(2), msg(batch(2, 0)), t).unwrap();
    let mut cfg = Config::full_broadcast(PeerId(0), 3);
    cfg.in_neighbors = vec![PeerId(1)];
    cfg.out_neighbors = vec![PeerId(1)];
    let mut e = engine_for(cfg, Echo);
    for clock in 0..sfb_core::engine::EARLY_FRAMES as u64 {
        e.on_message(PeerId(2), msg(batch(2, clock)), t).unwrap();
    }
    let err = e.on_message(PeerId(2), msg(batch(2, 64)), t).unwrap_err();
    assert!(matches!(err, Error::NotAnInNeighbour { .. }), "{err}");
}

/// Peer `id` of the ring 0 → 1 → 2 → 0 with relay: p2 gets p1's batches from p1 and
/// p0's relayed by p1.
fn ring_engine(id: u32, relay: bool) -> Engine<Echo> {
    let out: Vec<Vec<PeerId>> = (0..3).map(|i| vec![PeerId((i + 1) % 3)]).collect();
    let routes = Arc::new(Routes::new(&out).unwrap());
    let mut cfg = Config::new(
        PeerId(id),
        3,
        out[id as usize].clone(),
        vec![PeerId((id + 2) % 3)],
    );
    cfg.clocks = 3;
    cfg.batch_size = 2;
    cfg.relay = relay.then_some(routes);
    engine_for(cfg, Echo)
}

/// Peer `id` of 7 in a tree of fan-out 2 (peer 1: parent 0, children 3 and 4).
fn tree_engine(id: u32) -> Engine<Echo> {
    let t = sfb_core::tree::Config::new(2, 2);
    let n = t.neighbors(PeerId(id), 7);
    let mut cfg = Config::new(PeerId(id), 7, n.clone(), n);
    cfg.clocks = 3;
    cfg.batch_size = 2;
    cfg.tree = Some(t);
    engine_for(cfg, Echo)
}

/// Tree sums from the wrong neighbour, of the wrong origin or clock, or of another shape
/// are refused by name, and the peer goes on as if they had not come; a tree with the
/// wrong neighbours or with what it cannot serve yet is refused before anything runs.
#[test]
fn tree_sums_that_do_not_fit_the_tree_are_refused_without_changing_state() {
    let mut e = tree_engine(1);
    let mut time = ManualTime::default();
    let sum = |down: bool, origin: u32, clock: u64| Message::Sum {
        down,
        batch: Arc::new(batch(origin, clock)),
        stats: Arc::from(vec![]),
    };
    let counted = Message::Sum {
        down: true,
        batch: Arc::new(batch(0, 0)),
        stats: Arc::from(vec![1.0]),
    };
    for (from, m, why) in [
        (0, sum(true, 9, 0), "no peer of the run"),
        (0, sum(true, 0, 3), "beyond the run's 3 clocks"),
        (0, counted, "1 optimizer statistics, 0 expected"),
        (0, sum(false, 0, 0), "not a child"),
        (4, sum(false, 3, 0), "not a child"),
        (3, sum(false, 3, 1), "out of order"),
        (9, sum(false, 9, 0), "p9"),
    ] {
        let err = e.on_message(PeerId(from), m, &mut time).unwrap_err();
        assert!(err.to_string().contains(why), "{why}: {err}");
    }
    let mut wide = batch(3, 0);
    wide.d = 4;
    wide.v = VFactors::Dense(vec![1.0; 4]);
    let m = Message::Sum {
        down: false,
        batch: Arc::new(wide),
        stats: Arc::from(vec![]),
    };
    assert!(e.on_message(PeerId(3), m, &mut time).is_err());
    // Nothing was taken: the children's first sums and the parent's are still awaited.
    assert_eq!(e.clock(), 0);
    e.on_tick(&mut time).unwrap();
    assert_eq!(e.clock(), 1);
    e.on_tick(&mut time).unwrap();
    assert_eq!(e.clock(), 1, "BSP: clock 1 waits for the sums of clock 0");
    let mut w = e.waiting_on();
    w.sort();
    assert_eq!(w, vec![(PeerId(0), 0), (PeerId(3), 0), (PeerId(4), 0)]);
    // The right sums let it go on: the children's, then the parent's down message.
    for c in [3, 4] {
        e.on_message(PeerId(c), sum(false, c, 0), &mut time)
            .unwrap();
    }
    e.on_tick(&mut time).unwrap();
    let up: Vec<sfb_core::Output> = std::iter::from_fn(|| e.poll_output()).collect();
    assert!(
        up.iter()
            .any(|o| o.to == PeerId(0) && matches!(o.msg, Message::Sum { down: false, .. })),
        "{up:?}"
    );
    e.on_message(PeerId(0), sum(true, 0, 0), &mut time).unwrap();
    e.on_tick(&mut time).unwrap();
    let down: Vec<PeerId> = std::iter::from_fn(|| e.poll_output())
        .filter(|o| matches!(o.msg, Message::Sum { down: true, .. }))
        .map(|o| o.to)
        .collect();
    assert_eq!(
        down,
        vec![PeerId(3), PeerId(4)],
        "forwarded to the children"
    );
    assert_eq!(e.clock(), 2);
    // Configurations it cannot serve.
    let t = sfb_core::tree::Config::new(2, 2);
    let mut cfg = Config::new(PeerId(1), 7, vec![PeerId(0)], vec![PeerId(0)]);
    cfg.tree = Some(t);
    let err = cfg.validate().unwrap_err().to_string();
    assert!(
        err.contains("neighbours in the tree of fan-out 2 are"),
        "{err}"
    );
    let n = t.neighbors(PeerId(1), 7);
    let mut cfg = Config::new(PeerId(1), 7, n.clone(), n);
    cfg.tree = Some(t);
    cfg.on_peer_loss = sfb_core::PeerLoss::Continue;
    cfg.validate().unwrap();
    cfg.aggregate = Some(Default::default());
    let err = cfg.validate().unwrap_err().to_string();
    assert!(
        err.contains("--partial tree does not work with --aggregate"),
        "{err}"
    );
}

fn relayed(carrier: u64, b: FactorBatch) -> Message {
    Message::Relayed {
        carrier,
        batch: Arc::new(b),
    }
}

#[test]
fn relayed_frames_that_do_not_fit_the_trees_are_refused_without_changing_state() {
    let mut t = ManualTime::default();
    let mut e = ring_engine(2, true);
    let why = |e: &mut Engine<Echo>, from: u32, m: Message, t: &mut ManualTime| {
        let before = e.metrics().bytes_received;
        let err = e.on_message(PeerId(from), m, t).unwrap_err();
        assert_eq!(e.metrics().bytes_received, before, "{err}");
        let Error::BadRelay { reason, .. } = &err else {
            panic!("expected a relay refusal, got {err}");
        };
        reason.clone()
    };
    // p1 sends to p2 itself: its batches are never relayed here.
    let r = why(&mut e, 1, relayed(0, batch(1, 0)), &mut t);
    assert!(r.contains("never relayed here"), "{r}");
    // p0's clock 0 carried by p1's clock 1, before p1's own clock 0.
    let r = why(&mut e, 1, relayed(1, batch(0, 0)), &mut t);
    assert!(r.contains("out of place"), "{r}");
    // p0 does not send to p2 at all; p2 is its own origin.
    let r = why(&mut e, 0, relayed(0, batch(0, 0)), &mut t);
    assert!(r.contains("not an in-neighbour"), "{r}");
    let r = why(&mut e, 1, relayed(0, batch(2, 0)), &mut t);
    assert!(r.contains("not another peer"), "{r}");
    e.on_message(PeerId(1), msg(batch(1, 0)), &mut t).unwrap();
    // A gap, a bad shape (refused by validation, counted nowhere), then the right one.
    let r = why(&mut e, 1, relayed(1, batch(0, 1)), &mut t);
    assert!(r.contains("clock 0 is missing"), "{r}");
    let mut wide = batch(0, 0);
    wide.u.push(1.0);
    let err = e
        .on_message(PeerId(1), relayed(1, wide), &mut t)
        .unwrap_err();
    assert!(matches!(err, Error::DimensionMismatch { .. }), "{err}");
    e.on_message(PeerId(1), relayed(1, batch(0, 0)), &mut t)
        .unwrap();
    assert_eq!(e.metrics().relayed_received, 1);
    let r = why(&mut e, 1, relayed(1, batch(0, 0)), &mut t);
    assert!(r.contains("duplicate"), "{r}");
    // A peer without relay refuses relayed frames, and says why.
    let mut plain = ring_engine(2, false);
    let r = why(&mut plain, 1, relayed(0, batch(0, 0)), &mut t);
    assert!(r.contains("does not relay"), "{r}");
}

#[test]
fn a_relaying_peer_forwards_what_it_applies_and_ends_when_every_relayed_batch_is_in() {
    let mut t = ManualTime::default();
    let mut e = ring_engine(2, true);
    assert_eq!(e.on_tick(&mut t).unwrap(), Progress::Stepped);
    // p1's clock 0, applied before p2's clock 1, goes on to p0 (p1 → p2 → p0) in the
    // transmission of clock 1, before p2's own batch of clock 1.
    e.on_message(PeerId(1), msg(batch(1, 0)), &mut t).unwrap();
    let own0: Vec<_> = std::iter::from_fn(|| e.poll_output()).collect();
    assert_eq!(own0.len(), 1);
    assert_eq!(e.on_tick(&mut t).unwrap(), Progress::Stepped);
    let out: Vec<_> = std::iter::from_fn(|| e.poll_output()).collect();
    assert_eq!(out.len(), 2);
    assert!(
        matches!(&out[0].msg, Message::Relayed { carrier: 1, batch } if batch.origin == PeerId(1))
    );
    assert!(matches!(&out[1].msg, Message::Factors { batch, .. } if batch.clock == 1));
    assert!(out.iter().all(|o| o.to == PeerId(0)));
    for c in 1..3 {
        e.on_message(PeerId(1), relayed(c, batch(0, c - 1)), &mut t)
            .unwrap();
        e.on_message(PeerId(1), msg(batch(1, c)), &mut t).unwrap();
        let _ = e.on_tick(&mut t).unwrap();
    }
    // Every clock computed and every p1 batch in; p0's last is still being relayed.
    assert_eq!(e.clock(), 3);
    assert_eq!(e.on_tick(&mut t).unwrap(), Progress::Blocked);
    assert_eq!(e.waiting_on(), vec![(PeerId(1), 2)]);
    e.on_message(PeerId(1), relayed(3, batch(0, 2)), &mut t)
        .unwrap();
    assert_eq!(e.on_tick(&mut t).unwrap(), Progress::Done);
    assert_eq!(e.metrics().batches_applied, 9);
    assert_eq!(e.metrics().relayed_sent, 3);
}

#[test]
fn relay_refuses_a_configuration_it_cannot_serve() {
    let out: Vec<Vec<PeerId>> = (0..3).map(|i| vec![PeerId((i + 1) % 3)]).collect();
    let routes = Arc::new(Routes::new(&out).unwrap());
    let mut cfg = Config::new(PeerId(0), 3, vec![PeerId(1)], vec![PeerId(2)]);
    cfg.relay = Some(Arc::clone(&routes));
    assert!(cfg.validate().is_ok());
    let mut other = cfg.clone();
    other.out_neighbors = vec![PeerId(2)];
    let err = other.validate().unwrap_err().to_string();
    assert!(err.contains("out-neighbours"), "{err}");
    // Peer loss and checkpoints it serves (issue 31: the trees are computed again without
    // the lost, and the batches on them are kept).
    let mut other = cfg.clone();
    other.on_peer_loss = sfb_core::PeerLoss::Continue;
    other.checkpoint_every = 5;
    assert!(other.validate().is_ok());
    let mut other = cfg;
    other.in_neighbors = vec![PeerId(1)];
    let err = other.validate().unwrap_err().to_string();
    assert!(err.contains("in-neighbours"), "{err}");
}

#[test]
fn engine_rejects_fms_messages_with_a_typed_error() {
    let mut e = engine(Echo, 0, 2);
    let before = e.replica().checksum();
    let params = Message::Params {
        clock: 1,
        w: Arc::new(Array2::zeros((2, 3))),
    };
    let delta = Message::Delta {
        origin: PeerId(1),
        clock: 0,
        mean_iter_us: 1,
        delta: Arc::new(Array2::zeros((2, 3))),
    };
    for (from, m, kind) in [
        (PeerId::SERVER, params, "params"),
        (PeerId(1), delta, "delta"),
    ] {
        let err = e
            .on_message(from, m, &mut ManualTime::default())
            .unwrap_err();
        assert!(
            matches!(err, Error::UnexpectedMessage { kind: k, .. } if k == kind),
            "unexpected error {err}"
        );
    }
    assert_eq!(e.metrics().bytes_received, 0);
    assert_eq!(e.replica().checksum(), before);
    // Still a working peer afterwards.
    e.on_message(PeerId(1), msg(batch(1, 0)), &mut ManualTime::default())
        .unwrap();
}

#[test]
fn model_producing_nan_fails_the_step_and_sends_nothing() {
    let mut e = engine(Broken, 0, 2);
    let before = e.replica().checksum();
    let err = e.on_tick(&mut ManualTime::default()).unwrap_err();
    assert!(matches!(err, Error::Model { clock: 0, .. }), "{err}");
    assert!(e.poll_output().is_none());
    assert_eq!(e.replica().checksum(), before);
}

#[test]
fn bsp_blocks_until_in_neighbours_deliver() {
    let mut e = engine(Echo, 0, 2);
    assert_eq!(
        e.on_tick(&mut ManualTime::default()).unwrap(),
        Progress::Stepped
    );
    assert!(e.poll_output().is_some());
    assert_eq!(
        e.on_tick(&mut ManualTime::default()).unwrap(),
        Progress::Blocked
    );
    assert_eq!(e.waiting_on(), vec![(PeerId(1), 0)]);
    e.on_message(PeerId(1), msg(batch(1, 0)), &mut ManualTime::default())
        .unwrap();
    assert_eq!(
        e.on_tick(&mut ManualTime::default()).unwrap(),
        Progress::Stepped
    );
}

/// A node back in the run adopts the first state; a later sender's state says where that
/// sender's frames to it start (it may have sent its earlier clocks while this node was
/// away, or finished the run), and a sender that finished counts as having delivered
/// every clock: neither is waited for.
#[test]
fn a_node_back_awaits_each_sender_from_where_its_frames_start() {
    let mut cfg = Config::full_broadcast(PeerId(0), 3);
    cfg.clocks = 10;
    cfg.batch_size = 2;
    let from = |id, clock| {
        let mut c = Config::full_broadcast(PeerId(id), 3);
        c.clocks = 10;
        let mut s = engine_for(c, Echo).state();
        s.clock = clock;
        s
    };
    let mut e = engine_for(cfg.clone(), Echo).rejoining();
    let t = &mut ManualTime::default();
    assert!(e.adopt(from(1, 2)).unwrap());
    assert_eq!(e.clock(), 2);
    // p2 was ahead, at clock 10: the end of the run.
    assert!(!e.adopt(from(2, 10)).unwrap());
    assert_eq!(e.on_tick(t).unwrap(), Progress::Stepped);
    assert_eq!(e.on_tick(t).unwrap(), Progress::Blocked);
    assert_eq!(e.waiting_on(), vec![(PeerId(1), 2)]);
    // p1 sends its clock 2, then finishes without sending this node more.
    e.on_message(PeerId(1), msg(batch(1, 2)), t).unwrap();
    assert_eq!(e.on_tick(t).unwrap(), Progress::Stepped);
    e.peer_finished(PeerId(1));
    while e.on_tick(t).unwrap() == Progress::Stepped {}
    assert_eq!(e.on_tick(t).unwrap(), Progress::Done);
    assert_eq!(e.clock(), 10);
    assert!(e.metrics().lost_peers.is_empty());
}

#[test]
fn ssp_lets_a_peer_run_s_clocks_ahead() {
    let mut cfg = Config::full_broadcast(PeerId(0), 2);
    cfg.clocks = 10;
    cfg.consistency = Consistency::Ssp { staleness: 2 };
    let mut e = engine_for(cfg, Echo);
    let mut steps = 0;
    while e.on_tick(&mut ManualTime::default()).unwrap() == Progress::Stepped {
        steps += 1;
    }
    assert_eq!(
        steps, 3,
        "clocks 0, 1, 2 need nothing from the peer; clock 3 needs its clock 0"
    );
}

fn arb_batch() -> impl Strategy<Value = FactorBatch> {
    (
        0u32..4,
        0u64..1000,
        -1.0f32..1.0,
        0usize..5,
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(origin, clock, scale, k, sparse, seed)| {
            let (j, d) = (3usize, 5usize);
            let f = |i: usize| {
                ((seed.wrapping_add(i as u64).wrapping_mul(2654435761) % 1000) as f32) / 500.0 - 1.0
            };
            let u = (0..k * j).map(f).collect();
            let v = if sparse {
                let mut indptr = vec![0u32];
                let mut indices = vec![];
                let mut values = vec![];
                for i in 0..k {
                    for c in 0..d {
                        if (seed >> ((i * d + c) % 60)) & 1 == 1 {
                            indices.push(c as u32);
                            values.push(f(c + i));
                        }
                    }
                    indptr.push(indices.len() as u32);
                }
                VFactors::Sparse {
                    indptr,
                    indices,
                    values,
                }
            } else {
                VFactors::Dense((0..k * d).map(|i| f(i + 7)).collect())
            };
            FactorBatch {
                origin: PeerId(origin),
                clock,
                scale,
                j,
                d,
                u,
                v,
            }
        })
}

/// A 3×5 matrix with seeded values in [-1, 1).
fn matrix(seed: u64) -> Array2<f32> {
    Array2::from_shape_fn((3, 5), |(r, c)| {
        ((seed
            .wrapping_add((r * 5 + c) as u64)
            .wrapping_mul(2654435761)
            % 1000) as f32)
            / 500.0
            - 1.0
    })
}

/// Any message: factors, a full W (server → client) or a dense ΔW (client → server).
fn arb_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        (0u32..4, 0u64..1000).prop_map(|(origin, clock)| Message::Fetch {
            origin: PeerId(origin),
            clock,
        }),
        (
            0u32..4,
            0u32..4,
            0u8..3,
            prop_oneof![0u32..4, wire::MAX_LIFE - 2..=wire::MAX_LIFE]
        )
            .prop_map(|(origin, peer, kind, life)| Message::Notice {
                origin: PeerId(origin),
                notice: match kind {
                    0 => wire::Notice::Lost { peer, life },
                    1 => wire::Notice::Joined { peer, life },
                    _ => wire::Notice::Left { peer, life },
                },
            }),
        (0u32..4, 0u64..1000, any::<u64>()).prop_map(|(origin, clock, seed)| Message::Copy {
            origin: PeerId(origin),
            clock,
            w: Arc::new(matrix(seed)),
        }),
        (
            0u32..4,
            0u64..1000,
            any::<u64>(),
            proptest::collection::btree_map(0u32..4, (0u32..=wire::MAX_LIFE, any::<bool>()), 0..4)
        )
            .prop_map(|(origin, clock, seed, view)| {
                let mut state = node_state(clock, matrix(seed));
                state.view = view
                    .into_iter()
                    .map(|(p, (life, out))| Standing {
                        peer: PeerId(p),
                        life,
                        out,
                    })
                    .collect();
                Message::State {
                    origin: PeerId(origin),
                    state: Arc::new(state),
                }
            }),
        (arb_batch(), any::<u32>()).prop_map(|(b, us)| Message::Factors {
            batch: Arc::new(b),
            mean_iter_us: us,
        }),
        (arb_batch(), any::<bool>(), any::<bool>(), 0u32..100).prop_map(
            |(b, down, stats, seed)| Message::Sum {
                down,
                batch: Arc::new(b),
                stats: if stats {
                    (0..8).map(|i| (i * seed) as f32 / 7.0).collect()
                } else {
                    Arc::from(vec![])
                },
            }
        ),
        arb_batch().prop_map(|b| Message::Part { batch: Arc::new(b) }),
        (arb_batch(), 0u64..1000).prop_map(|(b, carrier)| Message::Relayed {
            carrier,
            batch: Arc::new(b),
        }),
        (0u64..1000, any::<u64>()).prop_map(|(clock, seed)| Message::Params {
            clock,
            w: Arc::new(matrix(seed)),
        }),
        (0u32..4, 0u64..1000, any::<u32>(), any::<u64>()).prop_map(|(origin, clock, us, seed)| {
            Message::Delta {
                origin: PeerId(origin),
                clock,
                mean_iter_us: us,
                delta: Arc::new(matrix(seed)),
            }
        }),
        (
            0u32..4,
            0u64..1000,
            1u64..100,
            0u32..4,
            0u32..3,
            -1e3f64..1e3
        )
            .prop_map(|(origin, clock, lead, by, rule, value)| Message::Stop {
                origin: if origin == 3 {
                    PeerId::SERVER
                } else {
                    PeerId(origin)
                },
                stop: sfb_core::stop::Stop {
                    at: clock + lead,
                    by,
                    clock,
                    rule,
                    value,
                },
            }),
    ]
}

/// A peer's state at `clock` holding `w` and nothing else.
fn node_state(clock: u64, w: Array2<f32>) -> sfb_core::NodeState {
    sfb_core::NodeState {
        role: sfb_core::checkpoint::Role::Peer,
        id: PeerId(2),
        clock,
        w: Some(w),
        optimizer: Vec::new(),
        model: Vec::new(),
        compressor: Vec::new(),
        mixer: Vec::new(),
        relay: Vec::new(),
        sampler: None,
        awaited: Vec::new(),
        view: Vec::new(),
        metrics: sfb_core::metrics::PeerMetrics::default(),
        wall_s: 0.0,
        first_objective: None,
    }
}

/// Membership notices and rejoin states go in the one codec: news about a node outside
/// the run, a state of another shape or with a NaN, and a cut frame are refused.
#[test]
fn wire_refuses_bad_notices_and_states() {
    let notice = |peer, life| {
        wire::encode(&Message::Notice {
            origin: PeerId(1),
            notice: wire::Notice::Lost { peer, life },
        })
    };
    assert!(wire::decode(&notice(3, 0), &EXPECT).is_ok());
    let e = wire::decode(&notice(7, 0), &EXPECT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("news about node p7 of 4"), "{e}");
    let e = wire::decode(&notice(u32::MAX, 0), &EXPECT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("news about node server of 4"), "{e}");
    // A life past the last a node can have (its next return would overflow the count).
    assert!(wire::decode(&notice(3, wire::MAX_LIFE), &EXPECT).is_ok());
    for life in [wire::MAX_LIFE + 1, u32::MAX] {
        let e = wire::decode(&notice(3, life), &EXPECT)
            .unwrap_err()
            .to_string();
        assert!(e.contains("past the most a node can have"), "{e}");
    }
    // A life wider than 32 bits does not decode: the header's varint is refused.
    let mut wide = notice(3, 0);
    let n = wide.len();
    wide.truncate(n - 1);
    wide.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x7f]);
    let e = wire::decode(&wide, &EXPECT).unwrap_err().to_string();
    assert!(e.contains("header"), "{e}");
    let state = |w: Array2<f32>| {
        wire::encode(&Message::State {
            origin: PeerId(2),
            state: Arc::new(node_state(9, w)),
        })
    };
    let good = state(matrix(1));
    assert!(matches!(
        wire::decode(&good, &EXPECT),
        Ok(Message::State { state, .. }) if state.clock == 9
    ));
    let e = wire::decode(&state(Array2::zeros((3, 6))), &EXPECT).unwrap_err();
    assert!(matches!(e, Error::DimensionMismatch { got: 6, .. }), "{e}");
    let mut nan = matrix(1);
    nan[[2, 4]] = f32::NAN;
    let e = wire::decode(&state(nan), &EXPECT).unwrap_err().to_string();
    assert!(e.contains("non-finite"), "{e}");
    let e = wire::decode(&good[..good.len() - 3], &EXPECT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("a rejoin state"), "{e}");
    // A view that names a node outside the run.
    let mut outside = node_state(9, matrix(1));
    outside.view = vec![Standing {
        peer: PeerId(4),
        life: 1,
        out: true,
    }];
    let bad = wire::encode(&Message::State {
        origin: PeerId(2),
        state: Arc::new(outside),
    });
    let e = wire::decode(&bad, &EXPECT).unwrap_err().to_string();
    assert!(e.contains("view names node p4 of 4"), "{e}");
    // An FMS client's request for W: from a client of the run only (not the server),
    // and nothing after its header.
    let fetch = |origin| wire::encode(&Message::Fetch { origin, clock: 5 });
    assert!(matches!(
        wire::decode(&fetch(PeerId(3)), &EXPECT),
        Ok(Message::Fetch { clock: 5, .. })
    ));
    for origin in [PeerId(4), PeerId::SERVER] {
        let e = wire::decode(&fetch(origin), &EXPECT).unwrap_err();
        assert!(matches!(e, Error::UnknownPeer { .. }), "{e}");
    }
    let mut long = fetch(PeerId(1));
    long.push(0);
    assert!(wire::decode(&long, &EXPECT).is_err());
}

/// A stop proposal decodes only when it names a known proposer, ends after the clock it
/// was met at, and carries a finite value.
#[test]
fn wire_refuses_bad_stops() {
    let stop = sfb_core::stop::Stop {
        at: 12,
        by: 2,
        clock: 10,
        rule: 0,
        value: 0.25,
    };
    let msg = |origin: PeerId, stop| wire::encode(&Message::Stop { origin, stop });
    assert_eq!(
        wire::decode(&msg(PeerId(1), stop), &EXPECT).unwrap(),
        Message::Stop {
            origin: PeerId(1),
            stop
        }
    );
    for (bad, why) in [
        (
            msg(PeerId(1), sfb_core::stop::Stop { by: 4, ..stop }),
            "proposed by node 4 of 4",
        ),
        (
            msg(PeerId(1), sfb_core::stop::Stop { at: 10, ..stop }),
            "a stop at clock 10",
        ),
        (
            msg(
                PeerId(1),
                sfb_core::stop::Stop {
                    value: f64::NAN,
                    ..stop
                },
            ),
            "with value NaN",
        ),
        (msg(PeerId(9), stop), "p9"),
    ] {
        let e = wire::decode(&bad, &EXPECT).unwrap_err().to_string();
        assert!(e.contains(why), "{why}: {e}");
    }
    let bytes = msg(PeerId(1), stop);
    assert!(wire::decode(&bytes[..bytes.len() - 1], &EXPECT).is_err());
}

/// Tree sums ([`sfb_core::tree`]) whose statistics are of the wrong length, negative or
/// not finite are refused by name; the rest of the frame is checked as factors are.
#[test]
fn wire_refuses_bad_tree_sums() {
    let sum = |stats: Vec<f32>| Message::Sum {
        down: true,
        batch: Arc::new(FactorBatch {
            origin: PeerId(0),
            clock: 3,
            scale: -0.1,
            j: 3,
            d: 5,
            u: vec![1.0; 3],
            v: VFactors::Dense(vec![1.0; 5]),
        }),
        stats: Arc::from(stats),
    };
    let good = wire::encode(&sum(vec![1.0; 8]));
    assert!(matches!(
        wire::decode(&good, &EXPECT).unwrap(),
        Message::Sum { down: true, .. }
    ));
    for (bad, why) in [
        (
            sum(vec![1.0; 7]),
            "7 optimizer statistics (0 or J + D = 8 expected)",
        ),
        (sum(vec![-1.0; 8]), "negative or not finite"),
        (sum(vec![f32::NAN; 8]), "negative or not finite"),
    ] {
        let e = wire::decode(&wire::encode(&bad), &EXPECT)
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{why}: {e}");
    }
    assert!(wire::decode(&good[..good.len() - 1], &EXPECT).is_err());
}

const EXPECT: Expect = Expect {
    j: 3,
    d: 5,
    peers: 4,
};

#[test]
fn wire_refuses_bad_fms_frames() {
    let good = Message::Delta {
        origin: PeerId(1),
        clock: 0,
        mean_iter_us: 0,
        delta: Arc::new(matrix(1)),
    };
    let bytes = wire::encode(&good);
    // Truncated payload, trailing bytes.
    assert!(matches!(
        wire::decode(&bytes[..bytes.len() - 1], &EXPECT),
        Err(Error::Decode { .. })
    ));
    let mut long = bytes.clone();
    long.push(0);
    assert!(matches!(
        wire::decode(&long, &EXPECT),
        Err(Error::Decode { .. })
    ));
    // Non-finite value in the last entry.
    let mut nan = bytes.clone();
    let n = nan.len();
    nan[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
    assert!(matches!(
        wire::decode(&nan, &EXPECT),
        Err(Error::NonFinite { pair: 2, .. })
    ));
    // Wrong shape, unknown origin.
    let wide = Message::Params {
        clock: 1,
        w: Arc::new(Array2::zeros((3, 6))),
    };
    assert!(matches!(
        wire::decode(&wire::encode(&wide), &EXPECT),
        Err(Error::DimensionMismatch {
            expected: 5,
            got: 6,
            ..
        })
    ));
    let stranger = Message::Delta {
        origin: PeerId(9),
        clock: 0,
        mean_iter_us: 0,
        delta: Arc::new(matrix(1)),
    };
    assert!(matches!(
        wire::decode(&wire::encode(&stranger), &EXPECT),
        Err(Error::UnknownPeer { .. })
    ));
    // A column-major W encodes as its row-major entries.
    let cm = Array2::from_shape_vec((3, 5).f(), (0..15).map(|x| x as f32).collect()).unwrap();
    let m = Message::Params {
        clock: 2,
        w: Arc::new(cm.clone()),
    };
    let bytes = wire::encode(&m);
    assert_eq!(bytes.len(), wire::encoded_len(&m));
    match wire::decode(&bytes, &EXPECT).unwrap() {
        Message::Params { clock: 2, w } => assert_eq!(*w, cm),
        other => panic!("decoded {other:?}"),
    }
}

/// A dense frame's size without its matrix is the encoded size of one, at every clock
/// and shape (varints of several lengths).
#[test]
fn dense_frame_len_is_the_encoded_len_without_the_matrix() {
    for (clock, rows, cols) in [(0, 1, 1), (2, 3, 5), (1000, 130, 7), (1 << 40, 200, 300)] {
        let w = Arc::new(Array2::<f32>::zeros((rows, cols)));
        let params = Message::Params {
            clock,
            w: w.clone(),
        };
        let delta = Message::Delta {
            origin: PeerId(0),
            clock,
            mean_iter_us: 100_000,
            delta: w,
        };
        assert_eq!(
            wire::dense_frame_len(false, clock, rows, cols),
            wire::encode(&params).len()
        );
        assert_eq!(
            wire::dense_frame_len(true, clock, rows, cols),
            wire::encode(&delta).len()
        );
    }
}

proptest! {
    #[test]
    fn wire_round_trip_every_kind(m in arb_message()) {
        let bytes = wire::encode(&m);
        prop_assert_eq!(bytes.len(), wire::encoded_len(&m));
        let back = wire::decode(&bytes, &EXPECT).unwrap();
        prop_assert_eq!(back, m);
    }

    #[test]
    fn wire_decode_of_mutated_frames_of_every_kind_is_valid_or_an_error(
        m in arb_message(),
        pos in any::<usize>(),
        byte in any::<u8>(),
        cut in any::<usize>(),
    ) {
        let mut bytes = wire::encode(&m);
        let i = pos % bytes.len();
        bytes[i] = byte;
        let bytes = &bytes[..bytes.len() - cut % 3];
        match wire::decode(bytes, &EXPECT) {
            Ok(
                Message::Factors { batch, .. }
                | Message::Relayed { batch, .. }
                | Message::Part { batch },
            ) => {
                prop_assert!(batch.validate(3, 5).is_ok());
            }
            Ok(Message::Params { w, .. }) => {
                prop_assert_eq!(w.dim(), (3, 5));
                prop_assert!(w.iter().all(|x| x.is_finite()));
            }
            Ok(Message::Delta { origin, delta, .. }) => {
                prop_assert!(origin.index() < 4);
                prop_assert_eq!(delta.dim(), (3, 5));
                prop_assert!(delta.iter().all(|x| x.is_finite()));
            }
            Ok(Message::Stop { origin, stop }) => {
                prop_assert!(origin.index() < 4 || origin == PeerId::SERVER);
                prop_assert!(stop.by < 4 && stop.at > stop.clock && stop.value.is_finite());
            }
            Ok(Message::Notice { origin, notice }) => {
                prop_assert!(origin.index() < 4 || origin == PeerId::SERVER);
                prop_assert!(notice.about().index() < 4);
                prop_assert!(notice.life() <= wire::MAX_LIFE);
            }
            Ok(Message::Copy { origin, w, .. }) => {
                prop_assert!(origin.index() < 4 || origin == PeerId::SERVER);
                prop_assert_eq!(w.dim(), (3, 5));
                prop_assert!(w.iter().all(|x| x.is_finite()));
            }
            Ok(Message::State { origin, state }) => {
                prop_assert!(origin.index() < 4 || origin == PeerId::SERVER);
                let w = state.w.as_ref().unwrap();
                prop_assert_eq!(w.dim(), (3, 5));
                prop_assert!(w.iter().all(|x| x.is_finite()));
                prop_assert!(state.view.windows(2).all(|w| w[0].peer < w[1].peer));
                prop_assert!(state
                    .view
                    .iter()
                    .all(|s| s.peer.index() < 4 && s.life <= wire::MAX_LIFE));
            }
            Ok(Message::Sum { batch, stats, .. }) => {
                prop_assert!(batch.validate(3, 5).is_ok());
                prop_assert!(stats.is_empty() || stats.len() == 8);
                prop_assert!(stats.iter().all(|x| x.is_finite() && *x >= 0.0));
            }
            Ok(Message::Fetch { origin, .. }) => prop_assert!(origin.index() < 4),
            Ok(other) => prop_assert!(false, "unknown kind {:?}", other),
            Err(_) => {}
        }
    }

    #[test]
    fn wire_decode_of_fms_headers_with_arbitrary_payloads_never_panics(
        kind in 1u8..3,
        rest in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let mut bytes = wire::WIRE_VERSION.to_le_bytes().to_vec();
        bytes.push(kind);
        bytes.extend_from_slice(&rest);
        let _ = wire::decode(&bytes, &EXPECT);
    }

    #[test]
    fn wire_round_trip(b in arb_batch(), us in any::<u32>()) {
        let m = Message::Factors { batch: Arc::new(b), mean_iter_us: us };
        let bytes = wire::encode(&m);
        prop_assert_eq!(bytes.len(), wire::encoded_len(&m));
        let back = wire::decode(&bytes, &Expect { j: 3, d: 5, peers: 4 }).unwrap();
        prop_assert_eq!(back, m);
    }

    #[test]
    fn wire_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = wire::decode(&bytes, &Expect { j: 3, d: 5, peers: 4 });
    }

    #[test]
    fn wire_decode_of_mutated_frames_is_valid_or_an_error(b in arb_batch(), pos in any::<usize>(), byte in any::<u8>()) {
        let m = Message::Factors { batch: Arc::new(b), mean_iter_us: 1 };
        let mut bytes = wire::encode(&m);
        let i = pos % bytes.len();
        bytes[i] = byte;
        if let Ok(Message::Factors { batch, .. }) = wire::decode(&bytes, &Expect { j: 3, d: 5, peers: 4 }) {
            prop_assert!(batch.validate(3, 5).is_ok());
        }
    }
}

#[test]
fn f16_wire_halves_value_bytes_and_decodes_to_the_senders_rounded_values() {
    let mut b = FactorBatch {
        origin: PeerId(1),
        clock: 0,
        scale: -0.1,
        j: 3,
        d: 5,
        u: vec![0.1, -0.25, 1.0 / 3.0, 7.0, -2.5, 0.001],
        v: VFactors::Dense((0..10).map(|i| i as f32 * 0.37 - 1.1).collect()),
    };
    let m32 = Message::Factors {
        batch: Arc::new(b.clone()),
        mean_iter_us: 1,
    };
    let f32_len = wire::encoded_len_with(&m32, wire::Dtype::F32);
    let f16_len = wire::encoded_len_with(&m32, wire::Dtype::F16);
    let bytes = wire::encode_with(&m32, wire::Dtype::F16);
    assert_eq!(bytes.len(), f16_len);
    // 16 values × 2 bytes saved; the header may differ by its variant tag only.
    assert_eq!(f32_len - f16_len, 16 * 2);
    let Message::Factors { batch: got, .. } = wire::decode(
        &bytes,
        &Expect {
            j: 3,
            d: 5,
            peers: 4,
        },
    )
    .unwrap() else {
        panic!("not factors")
    };
    assert!(wire::round_to_f16(&mut b));
    assert_eq!(
        *got, b,
        "receiver must see exactly the sender's rounded batch"
    );
    // Rounding again changes nothing (the sender applies what receivers decode).
    let mut again = b.clone();
    wire::round_to_f16(&mut again);
    assert_eq!(again, b);
}

#[test]
fn f16_wire_falls_back_to_f32_for_values_out_of_half_range() {
    let b = FactorBatch {
        origin: PeerId(0),
        clock: 0,
        scale: 1.0,
        j: 1,
        d: 2,
        u: vec![1.0],
        v: VFactors::Dense(vec![1.0e6, 2.0]),
    };
    assert!(!wire::fits_f16(&b));
    let m = Message::Factors {
        batch: Arc::new(b.clone()),
        mean_iter_us: 0,
    };
    assert_eq!(wire::encode_with(&m, wire::Dtype::F16), wire::encode(&m));
    let back = wire::decode(
        &wire::encode_with(&m, wire::Dtype::F16),
        &Expect {
            j: 1,
            d: 2,
            peers: 1,
        },
    )
    .unwrap();
    assert_eq!(back, m);
}

proptest! {
    #[test]
    fn f16_frames_round_trip_and_never_panic_when_mutated(b in arb_batch(), pos in any::<usize>(), byte in any::<u8>()) {
        let m = Message::Factors { batch: Arc::new(b.clone()), mean_iter_us: 3 };
        let bytes = wire::encode_with(&m, wire::Dtype::F16);
        let mut rounded = b;
        wire::round_to_f16(&mut rounded);
        let back = wire::decode(&bytes, &Expect { j: 3, d: 5, peers: 4 }).unwrap();
        prop_assert_eq!(back, Message::Factors { batch: Arc::new(rounded), mean_iter_us: 3 });
        let mut bad = bytes.clone();
        let i = pos % bad.len();
        bad[i] = byte;
        if let Ok(Message::Factors { batch, .. }) = wire::decode(&bad, &Expect { j: 3, d: 5, peers: 4 }) {
            prop_assert!(batch.validate(3, 5).is_ok());
        }
    }
}
