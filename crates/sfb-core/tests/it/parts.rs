//! A clock computed and sent in parts (`Config::send_parts`): the same run, bitwise, and
//! parts that do not fit refused without changing anything.

use std::sync::Arc;

use ndarray::{Array2, ArrayView2};
use sfb_core::wire::Message;
use sfb_core::{
    Budget, Config, Consistency, Engine, Error, FactorBatch, ManualTime, Model, ModelError, PeerId,
    Policy, Prioritize, Progress, Shard, SvList, VFactors,
};

/// Multi-output least squares, one pair per sample: separable.
struct Ls {
    separable: bool,
}

impl Model for Ls {
    type Sample = (Vec<f32>, Vec<f32>);
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
                .zip(y)
                .map(|(row, yj)| row.dot(&ndarray::aview1(x)) - yj)
                .collect();
            sv.push_dense(&u, x)?;
        }
        Ok(())
    }
    fn separable(&self) -> bool {
        self.separable
    }
}

const J: usize = 3;
const D: usize = 4;

fn shard(peer: u32) -> Shard<(Vec<f32>, Vec<f32>)> {
    let samples = (0..9)
        .map(|i| {
            let x: Vec<f32> = (0..D)
                .map(|k| (((i * 5 + k * 3 + peer as usize) % 11) as f32 - 5.0) / 5.0)
                .collect();
            let y: Vec<f32> = (0..J).map(|j| ((i + j) % 3) as f32 - 1.0).collect();
            (x, y)
        })
        .collect();
    Shard::new(samples, 7 + u64::from(peer))
}

fn config(id: u32, peers: usize, parts: usize, consistency: Consistency) -> Config {
    let mut cfg = Config::full_broadcast(PeerId(id), peers);
    cfg.clocks = 20;
    cfg.batch_size = 5;
    cfg.lr = 0.05;
    cfg.eval_every = 0;
    cfg.consistency = consistency;
    cfg.send_parts = parts;
    cfg
}

fn engine(cfg: Config) -> Engine<Ls> {
    let id = cfg.id.0;
    Engine::new(
        cfg,
        Ls { separable: true },
        Array2::from_elem((J, D), 0.01),
        shard(id),
    )
    .unwrap()
}

/// Drives every engine round-robin until all are done, delivering each output at once;
/// returns the replicas and the kinds of frames sent.
fn run(engines: Vec<Engine<Ls>>) -> (Vec<Array2<f32>>, Vec<&'static str>) {
    let (ws, sent) = run_counting(engines);
    (ws, sent.into_iter().map(|(kind, _, _)| kind).collect())
}

/// A frame sent: its kind, its sender and its pairs (0 for frames without a batch).
type Sent = (&'static str, u32, usize);

/// [`run`], returning each frame sent.
fn run_counting(mut engines: Vec<Engine<Ls>>) -> (Vec<Array2<f32>>, Vec<Sent>) {
    let mut time = ManualTime::default();
    let mut kinds = Vec::new();
    let mut done = vec![false; engines.len()];
    for _ in 0..100_000 {
        if done.iter().all(|&d| d) {
            let ws = engines.iter().map(|e| e.replica().w().to_owned()).collect();
            return (ws, kinds);
        }
        for i in 0..engines.len() {
            if !done[i] && engines[i].on_tick(&mut time).unwrap() == Progress::Done {
                done[i] = true;
            }
            while let Some(out) = engines[i].poll_output() {
                let from = engines[i].config().id;
                let pairs = match &out.msg {
                    Message::Part { batch } | Message::Factors { batch, .. } => batch.len(),
                    _ => 0,
                };
                kinds.push((out.msg.kind(), from.0, pairs));
                engines[out.to.index()]
                    .on_message(from, out.msg, &mut time)
                    .unwrap();
            }
        }
    }
    panic!("the run did not finish");
}

fn cluster(peers: usize, parts: usize, consistency: &Consistency) -> Vec<Engine<Ls>> {
    (0..peers as u32)
        .map(|id| engine(config(id, peers, parts, consistency.clone())))
        .collect()
}

#[test]
fn a_clock_sent_in_parts_is_the_same_run_bitwise() {
    let (whole, kinds) = run(cluster(3, 1, &Consistency::Bsp));
    assert!(!kinds.contains(&"part"));
    assert!(whole.windows(2).all(|w| w[0] == w[1]));
    for parts in [2, 3, 5] {
        let (ws, kinds) = run(cluster(3, parts, &Consistency::Bsp));
        for w in &ws {
            assert_eq!(w, &whole[0], "{parts} parts");
        }
        // Each clock: parts − 1 early parts and the last as the clock's factors, to each
        // of the two others, from each of three peers.
        let count = |k| kinds.iter().filter(|&&x| x == k).count();
        assert_eq!(count("part"), 3 * 2 * 20 * (parts - 1));
        assert_eq!(count("factors"), 3 * 2 * 20);
    }
    // Under SSP the parts change when batches are applied, not what is applied: every
    // replica still ends with every update (this drive delivers at once, so alike).
    let (ssp, _) = run(cluster(3, 3, &Consistency::Ssp { staleness: 2 }));
    assert!(ssp.windows(2).all(|w| w[0] == w[1]));
}

/// Under `--prioritize` a clock's budget is shared out over its parts, each part sending
/// its share of its own and the held-back pairs as it is computed: under BSP every replica
/// stays the same, each clock sends exactly its budget, and a budget of K sends every part
/// as it is (the run of no budget, bitwise).
#[test]
fn prioritized_parts_send_the_clocks_budget_in_shares() {
    let prioritized = |parts: usize, pairs: usize| -> Vec<Engine<Ls>> {
        (0..3)
            .map(|id| {
                let mut cfg = config(id, 3, parts, Consistency::Bsp);
                cfg.prioritize = Some(Prioritize {
                    policy: Policy::Magnitude,
                    budget: Budget::Pairs(pairs),
                    seed: 1,
                });
                engine(cfg)
            })
            .collect()
    };
    let (unbudgeted, _) = run(cluster(3, 3, &Consistency::Bsp));
    let (full, _) = run(prioritized(3, 5));
    assert_eq!(full, unbudgeted, "a budget of K: every part as it is");
    let (ws, sent) = run_counting(prioritized(3, 2));
    assert!(ws.windows(2).all(|w| w[0] == w[1]), "BSP: one replica");
    assert_ne!(ws[0], unbudgeted[0], "2 pairs of 5 a clock send less");
    // Parts of 1, 2 and 2 samples; a budget of 2 in shares of 0, 1 and 1 pairs.
    let from0: Vec<(&str, usize)> = sent
        .iter()
        .filter(|&&(kind, from, _)| from == 0 && kind != "stop")
        .map(|&(kind, _, pairs)| (kind, pairs))
        .collect();
    assert_eq!(
        from0.len(),
        2 * 20 * 3,
        "two out-neighbours, 20 clocks, 3 parts"
    );
    for clock in from0.chunks(6) {
        assert_eq!(
            clock,
            [
                ("part", 0),
                ("part", 0),
                ("part", 1),
                ("part", 1),
                ("factors", 1),
                ("factors", 1)
            ]
        );
    }
}

fn part(origin: u32, clock: u64, pairs: usize) -> FactorBatch {
    FactorBatch {
        origin: PeerId(origin),
        clock,
        scale: -0.01,
        j: J,
        d: D,
        u: vec![1.0; pairs * J],
        v: VFactors::Dense(vec![0.5; pairs * D]),
    }
}

fn part_msg(b: FactorBatch) -> Message {
    Message::Part { batch: Arc::new(b) }
}

fn last_msg(b: FactorBatch) -> Message {
    Message::Factors {
        batch: Arc::new(b),
        mean_iter_us: 1,
    }
}

#[test]
fn parts_that_do_not_fit_their_clock_are_refused_and_change_nothing() {
    let mut time = ManualTime::default();
    let mut e = engine(config(0, 2, 3, Consistency::Bsp));
    let w0 = e.replica().w().to_owned();
    let refuse = |e: &mut Engine<Ls>, m: Message, what: &str| {
        let err = e.on_message(PeerId(1), m, &mut ManualTime::default());
        let err = err.expect_err(what);
        assert_eq!(
            err.blames_sender().is_some(),
            matches!(err, Error::BadPart { .. })
        );
        err.to_string()
    };
    // The clock's last part before its earlier ones.
    let msg = refuse(&mut e, last_msg(part(1, 0, 2)), "last part alone");
    assert!(msg.contains("after 0 earlier parts"), "{msg}");
    // A part of a later clock than the next expected.
    refuse(&mut e, part_msg(part(1, 1, 1)), "clock 1 first");
    // A part with a non-finite value.
    let mut nan = part(1, 0, 1);
    nan.u[0] = f32::NAN;
    refuse(&mut e, part_msg(nan), "NaN");
    // Good parts, then one too many, and a part whose scale differs.
    e.on_message(PeerId(1), part_msg(part(1, 0, 1)), &mut time)
        .unwrap();
    let mut scaled = part(1, 0, 1);
    scaled.scale = -0.02;
    let msg = refuse(&mut e, part_msg(scaled), "another scale");
    assert!(msg.contains("scale"), "{msg}");
    e.on_message(PeerId(1), part_msg(part(1, 0, 1)), &mut time)
        .unwrap();
    let msg = refuse(&mut e, part_msg(part(1, 0, 1)), "a third early part");
    assert!(
        msg.contains("part 3 of a clock this run sends in 3"),
        "{msg}"
    );
    // More pairs than a mini-batch (5).
    let msg = refuse(&mut e, last_msg(part(1, 0, 4)), "six pairs");
    assert!(msg.contains("more than the mini-batch's 5"), "{msg}");
    assert_eq!(e.replica().w(), w0, "nothing was applied");
    // The clock completes with a last part that fits, and is applied at the next clock.
    e.on_message(PeerId(1), last_msg(part(1, 0, 3)), &mut time)
        .unwrap();
    while e.on_tick(&mut time).unwrap() == Progress::Stepped && e.clock() < 2 {}
    assert_ne!(e.replica().w(), w0);
    // A run that sends whole clocks takes no parts.
    let mut whole = engine(config(0, 2, 1, Consistency::Bsp));
    let err = whole
        .on_message(PeerId(1), part_msg(part(1, 0, 1)), &mut time)
        .unwrap_err();
    assert!(err.to_string().contains("--send-parts 1"), "{err}");
}

#[test]
fn parts_need_a_separable_model_and_a_mode_that_sends_what_it_computes() {
    let try_new = |cfg: Config, separable| {
        Engine::new(cfg, Ls { separable }, Array2::zeros((J, D)), shard(0))
            .err()
            .map(|e| e.to_string())
    };
    let msg = try_new(config(0, 2, 2, Consistency::Bsp), false).unwrap();
    assert!(msg.contains("not separable"), "{msg}");
    let msg = try_new(config(0, 2, 6, Consistency::Bsp), true).unwrap();
    assert!(msg.contains("more parts than the mini-batch's 5"), "{msg}");
    let mut cfg = config(0, 2, 2, Consistency::Bsp);
    cfg.compress = Some(1);
    let msg = try_new(cfg, true).unwrap();
    assert!(msg.contains("--compress"), "{msg}");
    assert!(try_new(config(0, 2, 0, Consistency::Bsp), true).is_some());
    assert!(try_new(config(0, 2, 5, Consistency::Bsp), true).is_none());
}

/// Between parts a peer applies what it may: under SSP, a batch of an earlier clock that
/// arrives while a clock is being computed changes W before the clock's next part.
#[test]
fn under_ssp_a_late_batch_is_applied_between_parts() {
    let mut time = ManualTime::default();
    let mut e = engine(config(0, 2, 2, Consistency::Ssp { staleness: 1 }));
    // Clock 0 in two parts, then clock 1's first part (SSP(1) lets it start without
    // peer 1's clock 0).
    for _ in 0..3 {
        assert_eq!(e.on_tick(&mut time).unwrap(), Progress::Stepped);
    }
    assert_eq!(e.clock(), 1);
    let before = e.replica().w().to_owned();
    e.on_message(PeerId(1), part_msg(part(1, 0, 2)), &mut time)
        .unwrap();
    e.on_message(PeerId(1), last_msg(part(1, 0, 3)), &mut time)
        .unwrap();
    // Clock 1's second part: peer 1's clock 0 is applied first.
    assert_eq!(e.on_tick(&mut time).unwrap(), Progress::Stepped);
    assert_eq!(e.clock(), 2);
    assert_ne!(e.replica().w(), before);
}
