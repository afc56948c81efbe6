//! Resilience of the state machines. Checkpoints: under BSP a run resumed from
//! every node's state at one clock ends bitwise where the uninterrupted run ends (SFB and
//! FMS, every optimizer with state, a model with state); states that do not fit are refused.
//! Peer loss: survivors train on without a lost peer (SSP, async, BSP with `continue`), BSP
//! fails by default, the FMS server serves the clients left.

use ndarray::{Array2, ArrayView2};
use sfb_core::checkpoint::{ByteReader, ByteWriter};
use sfb_core::fms;
use sfb_core::{
    Config, Consistency, Engine, Event, ManualTime, Method, Model, ModelError, NodeState,
    Optimizer, PeerId, Progress, Shard, StateMachine, SvList,
};

/// Least squares with per-sample state: each sample's residual is weighted by how often the
/// sample was drawn (mod 3), so a resume that lost the model's state computes other factors.
#[derive(Clone)]
struct Counting {
    seen: Vec<u64>,
}

impl Model for Counting {
    type Sample = (Vec<f32>, Vec<f32>);
    fn compute_sv(
        &mut self,
        _: ArrayView2<'_, f32>,
        _: &[&Self::Sample],
        _: &mut SvList,
    ) -> Result<(), ModelError> {
        unreachable!("the engine calls compute_sv_indexed")
    }
    fn compute_sv_indexed(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[(usize, &Self::Sample)],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        for &(i, (x, y)) in batch {
            if self.seen.len() <= i {
                self.seen.resize(i + 1, 0);
            }
            self.seen[i] += 1;
            let weight = 1.0 + (self.seen[i] % 3) as f32;
            let u: Vec<f32> = w
                .rows()
                .into_iter()
                .zip(y)
                .map(|(row, yj)| weight * (row.dot(&ndarray::aview1(x)) - yj))
                .collect();
            sv.push_dense(&u, x)?;
        }
        Ok(())
    }
    fn save_state(&self) -> Vec<u8> {
        let v: Vec<f64> = self.seen.iter().map(|&c| c as f64).collect();
        ByteWriter::new().f64s(&v).finish()
    }
    fn restore_state(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        let mut r = ByteReader::new(bytes);
        let v = r.f64s(None).map_err(ModelError::msg)?;
        r.finish().map_err(ModelError::msg)?;
        self.seen = v.into_iter().map(|c| c as u64).collect();
        Ok(())
    }
}

const J: usize = 3;
const D: usize = 5;

fn shard(peer: u32) -> Shard<(Vec<f32>, Vec<f32>)> {
    let samples = (0..7)
        .map(|i| {
            let x: Vec<f32> = (0..D)
                .map(|k| (((i * 7 + k * 3 + peer as usize) % 11) as f32 - 5.0) / 5.0)
                .collect();
            let y: Vec<f32> = (0..J).map(|j| ((i + j) % 3) as f32 - 1.0).collect();
            (x, y)
        })
        .collect();
    Shard::new(samples, 100 + u64::from(peer))
}

fn config(id: u32, peers: usize, method: Method, consistency: Consistency) -> Config {
    let mut cfg = Config::full_broadcast(PeerId(id), peers);
    cfg.clocks = 12;
    cfg.batch_size = 3;
    cfg.lr = if method.is_adaptive() { 0.05 } else { 0.02 };
    cfg.consistency = consistency;
    cfg.checkpoint_every = 4;
    cfg.optimizer = Optimizer {
        method,
        ..Optimizer::default()
    };
    cfg
}

fn w0() -> Array2<f32> {
    Array2::from_shape_fn((J, D), |(j, d)| ((j * D + d) % 5) as f32 * 0.01)
}

/// Drives every node round-robin in one thread until all are done; returns the states
/// their checkpoint events carried. `index` maps a destination to a node.
fn drive_all(
    nodes: &mut [&mut dyn StateMachine],
    index: impl Fn(PeerId) -> usize,
) -> Vec<NodeState> {
    let mut time = ManualTime::default();
    let mut states = Vec::new();
    let mut done = vec![false; nodes.len()];
    for _ in 0..100_000 {
        if done.iter().all(|&d| d) {
            return states;
        }
        for i in 0..nodes.len() {
            if done[i] {
                continue;
            }
            if nodes[i].on_tick(&mut time).unwrap() == Progress::Done {
                nodes[i].finish(&mut time);
                done[i] = true;
            }
            let from = nodes[i].id();
            while let Some(out) = nodes[i].poll_output() {
                let to = index(out.to);
                nodes[to].on_message(from, out.msg, &mut time).unwrap();
            }
            while let Some(ev) = nodes[i].poll_event() {
                if let Event::Checkpoint(s) = ev {
                    states.push(*s);
                }
            }
        }
    }
    panic!("the cluster did not finish");
}

fn peers(method: Method, consistency: &Consistency, every: u64) -> Vec<Engine<Counting>> {
    cluster(3, method, consistency, |cfg| cfg.checkpoint_every = every)
}

/// `n` peers of [`config`] with `method` and `consistency`, each config then edited by
/// `tweak`.
fn cluster(
    n: u32,
    method: Method,
    consistency: &Consistency,
    tweak: impl Fn(&mut Config),
) -> Vec<Engine<Counting>> {
    (0..n)
        .map(|p| {
            let mut cfg = config(p, n as usize, method, consistency.clone());
            tweak(&mut cfg);
            Engine::new(cfg, Counting { seen: Vec::new() }, w0(), shard(p)).unwrap()
        })
        .collect()
}

fn drive_peers(engines: &mut [Engine<Counting>]) -> Vec<NodeState> {
    let mut nodes: Vec<&mut dyn StateMachine> = engines
        .iter_mut()
        .map(|e| e as &mut dyn StateMachine)
        .collect();
    drive_all(&mut nodes, |p| p.index())
}

/// Final checksums of a cluster (SFB peers), and the states taken.
fn run_peers(mut engines: Vec<Engine<Counting>>) -> (Vec<String>, Vec<NodeState>) {
    let states = drive_peers(&mut engines);
    let sums = engines.iter().map(|e| e.replica().checksum()).collect();
    (sums, states)
}

/// Every peer resumed from its state at `cut` (after `edit`), with `method` and
/// `consistency`.
fn resumed(
    states: &[NodeState],
    cut: u64,
    method: Method,
    consistency: &Consistency,
    edit: impl Fn(&mut NodeState),
) -> Vec<Engine<Counting>> {
    at(states, cut)
        .into_iter()
        .map(|mut s| {
            edit(&mut s);
            let p = s.id.0;
            let cfg = config(p, 3, method, consistency.clone());
            Engine::resume(cfg, Counting { seen: Vec::new() }, shard(p), s).unwrap()
        })
        .collect()
}

fn at(states: &[NodeState], clock: u64) -> Vec<NodeState> {
    let mut v: Vec<NodeState> = states
        .iter()
        .filter(|s| s.clock == clock)
        .cloned()
        .collect();
    v.sort_by_key(|s| s.id);
    v
}

#[test]
fn bsp_resumed_from_a_cut_ends_bitwise_equal_for_every_stateful_optimizer() {
    for method in [
        Method::Sgd,
        Method::Factored,
        Method::AdaGrad,
        Method::AdaRevision,
        Method::Momentum,
    ] {
        let (plain, none) = run_peers(peers(method, &Consistency::Bsp, 0));
        assert!(none.is_empty());
        let (full, states) = run_peers(peers(method, &Consistency::Bsp, 4));
        assert_eq!(
            full, plain,
            "{method}: checkpoints change nothing under BSP"
        );
        assert!(full.windows(2).all(|w| w[0] == w[1]));
        // Every peer took its state at 4 and 8 (not 0, not at the last clock).
        let mut clocks: Vec<(u64, PeerId)> = states.iter().map(|s| (s.clock, s.id)).collect();
        clocks.sort();
        assert_eq!(clocks.len(), 6, "{method}: {clocks:?}");
        for cut in [4, 8] {
            let again = resumed(&states, cut, method, &Consistency::Bsp, |_| {});
            let (sums, _) = run_peers(again);
            assert_eq!(sums, full, "{method}: resumed at {cut}");
        }
    }
}

#[test]
fn losing_the_model_state_or_the_sampler_changes_the_result() {
    // The test above would pass for a model whose state does not matter: check it does.
    let (full, states) = run_peers(peers(Method::Sgd, &Consistency::Bsp, 4));
    let again = resumed(
        &states,
        8,
        Method::Sgd,
        &Consistency::Bsp,
        |s: &mut NodeState| {
            s.model = Counting { seen: Vec::new() }.save_state();
        },
    );
    assert_ne!(run_peers(again).0, full);
    let again = resumed(
        &states,
        8,
        Method::Sgd,
        &Consistency::Bsp,
        |s: &mut NodeState| {
            s.sampler.as_mut().unwrap().pos = 0;
        },
    );
    assert_ne!(run_peers(again).0, full);
}

#[test]
fn ssp_and_async_cuts_hold_every_update_once() {
    for consistency in [Consistency::Ssp { staleness: 2 }, Consistency::Async] {
        let (_, states) = run_peers(peers(Method::Sgd, &consistency, 4));
        for s in at(&states, 8) {
            // The cut: exactly the clocks < 8 of all three peers are in W.
            assert_eq!(s.metrics.batches_applied, 3 * 8, "{consistency}");
        }
        let again = resumed(&states, 8, Method::Sgd, &consistency, |_| {});
        let mut nodes = again;
        drive_peers(&mut nodes);
        for e in &nodes {
            assert_eq!(e.metrics().batches_applied, 3 * 12, "{consistency}");
            assert_eq!(e.metrics().clocks, 12);
        }
    }
}

#[test]
fn states_that_do_not_fit_are_refused_with_the_reason() {
    let (_, states) = run_peers(peers(Method::Factored, &Consistency::Bsp, 4));
    let s1 = at(&states, 4).remove(1);
    let resume = |cfg: Config, s: NodeState, shard| {
        Engine::resume(cfg, Counting { seen: Vec::new() }, shard, s)
            .unwrap_err()
            .to_string()
    };
    let e = resume(
        config(2, 3, Method::Factored, Consistency::Bsp),
        s1.clone(),
        shard(2),
    );
    assert!(
        e.contains("written by SFB peer p1, not by SFB peer p2"),
        "{e}"
    );
    let e = resume(
        config(1, 3, Method::Momentum, Consistency::Bsp),
        s1.clone(),
        shard(1),
    );
    assert!(
        e.contains("written by optimizer factored, this run uses momentum"),
        "{e}"
    );
    let e = resume(
        config(1, 4, Method::Factored, Consistency::Bsp),
        s1.clone(),
        shard(1),
    );
    assert!(e.contains("another topology"), "{e}");
    let small = Shard::new(shard(1).samples()[..5].to_vec(), 101);
    let e = resume(
        config(1, 3, Method::Factored, Consistency::Bsp),
        s1.clone(),
        small,
    );
    assert!(e.contains("shard of 7 samples"), "{e}");
    let mut cfg = config(1, 3, Method::Factored, Consistency::Bsp);
    cfg.clocks = 3;
    let e = resume(cfg, s1.clone(), shard(1));
    assert!(e.contains("past this run's last clock"), "{e}");
    let mut wide = s1.clone();
    wide.w = Some(Array2::zeros((J, D + 1)));
    let mut fresh = Engine::new(
        config(1, 3, Method::Factored, Consistency::Bsp),
        Counting { seen: Vec::new() },
        w0(),
        shard(1),
    )
    .unwrap();
    let e = fresh.restore(wide).unwrap_err().to_string();
    assert!(
        e.contains("another model shape: W is 3×6, this run's is 3×5"),
        "{e}"
    );
    let mut bad = s1.clone();
    bad.model = vec![1, 2, 3];
    let e = resume(
        config(1, 3, Method::Factored, Consistency::Bsp),
        bad,
        shard(1),
    );
    assert!(e.contains("model state"), "{e}");
}

fn fms_config(every: u64) -> fms::Config {
    let mut cfg = fms::Config::new(3);
    cfg.on_peer_loss = sfb_core::PeerLoss::Continue;
    cfg.clocks = 12;
    cfg.batch_size = 3;
    cfg.lr = 0.05;
    cfg.checkpoint_every = every;
    cfg.optimizer = Optimizer {
        method: Method::Factored,
        ..Optimizer::default()
    };
    cfg
}

struct Fms {
    clients: Vec<fms::Client<Counting>>,
    server: fms::Server<Counting>,
}

impl Fms {
    fn new(every: u64) -> Self {
        let cfg = fms_config(every);
        let clients = (0..3)
            .map(|p| {
                fms::Client::new(
                    PeerId(p),
                    cfg.clone(),
                    Counting { seen: Vec::new() },
                    w0(),
                    shard(p),
                )
                .unwrap()
            })
            .collect();
        let server = fms::Server::new(cfg, Counting { seen: Vec::new() }, w0()).unwrap();
        Self { clients, server }
    }

    fn run(&mut self) -> Vec<NodeState> {
        let mut nodes: Vec<&mut dyn StateMachine> = self
            .clients
            .iter_mut()
            .map(|c| c as &mut dyn StateMachine)
            .chain(std::iter::once(&mut self.server as &mut dyn StateMachine))
            .collect();
        drive_all(
            &mut nodes,
            |p| if p == PeerId::SERVER { 3 } else { p.index() },
        )
    }
}

#[test]
fn fms_resumed_from_a_cut_ends_bitwise_equal() {
    let mut plain = Fms::new(0);
    plain.run();
    let mut full = Fms::new(4);
    let states = full.run();
    let want = full.server.replica().checksum();
    assert_eq!(want, plain.server.replica().checksum());
    assert_eq!(states.len(), 8, "3 clients and the server, at 4 and 8");
    let cut = at(&states, 8);
    let cfg = fms_config(4);
    let clients = cut
        .iter()
        .filter(|s| s.id != PeerId::SERVER)
        .map(|s| {
            fms::Client::resume(
                s.id,
                cfg.clone(),
                Counting { seen: Vec::new() },
                shard(s.id.0),
                s.clone(),
            )
            .unwrap()
        })
        .collect();
    let server = cut.iter().find(|s| s.id == PeerId::SERVER).unwrap().clone();
    let server = fms::Server::resume(cfg.clone(), Counting { seen: Vec::new() }, server).unwrap();
    let mut resumed = Fms { clients, server };
    resumed.run();
    assert_eq!(resumed.server.replica().checksum(), want);
    for c in &resumed.clients {
        assert_eq!(c.checksum(), want);
    }
    // A client's state is refused by the server.
    let e = fms::Server::resume(cfg, Counting { seen: Vec::new() }, cut[0].clone())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not by the FMS server"), "{e}");
}

/// Drives `nodes` round-robin; node `victim` stops being driven (it "dies") once it has
/// completed `at` clocks, and every other node is then told so. Returns each survivor's
/// final clock and the error, if any, it raised on the news.
fn run_with_loss(
    nodes: &mut [&mut dyn StateMachine],
    index: impl Fn(PeerId) -> usize,
    victim: usize,
    at: u64,
) -> Vec<Option<sfb_core::Error>> {
    let mut time = ManualTime::default();
    let n = nodes.len();
    let mut done = vec![false; n];
    let mut errors: Vec<Option<sfb_core::Error>> = (0..n).map(|_| None).collect();
    let mut told = false;
    for _ in 0..100_000 {
        if !told && nodes[victim].clock() >= at {
            told = true;
            done[victim] = true;
            let dead = nodes[victim].id();
            for k in (0..n).filter(|&k| k != victim) {
                if let Err(e) = nodes[k].peer_lost(dead) {
                    errors[k] = Some(e);
                    done[k] = true;
                }
            }
        }
        if done.iter().all(|&d| d) {
            return errors;
        }
        for i in 0..n {
            if done[i] {
                continue;
            }
            if nodes[i].on_tick(&mut time).unwrap() == Progress::Done {
                nodes[i].finish(&mut time);
                done[i] = true;
            }
            let from = nodes[i].id();
            while let Some(out) = nodes[i].poll_output() {
                let to = index(out.to);
                if !(told && to == victim) {
                    nodes[to].on_message(from, out.msg, &mut time).unwrap();
                }
            }
            while nodes[i].poll_event().is_some() {}
        }
    }
    panic!("the cluster did not finish");
}

#[test]
fn survivors_train_on_without_a_lost_peer_under_ssp_and_bsp_fails_by_default() {
    for (consistency, policy) in [
        (
            Consistency::Ssp { staleness: 2 },
            sfb_core::PeerLoss::Continue,
        ),
        (Consistency::Async, sfb_core::PeerLoss::Continue),
        (Consistency::Bsp, sfb_core::PeerLoss::Continue),
        (Consistency::Bsp, sfb_core::PeerLoss::Fail),
    ] {
        let mut engines = cluster(4, Method::Sgd, &consistency, |cfg| {
            cfg.on_peer_loss = policy
        });
        let mut nodes: Vec<&mut dyn StateMachine> = engines
            .iter_mut()
            .map(|e| e as &mut dyn StateMachine)
            .collect();
        let errors = run_with_loss(&mut nodes, |p| p.index(), 2, 5);
        for (k, e) in engines.iter().enumerate().filter(|(k, _)| *k != 2) {
            if policy == sfb_core::PeerLoss::Fail {
                let err = errors[k]
                    .as_ref()
                    .expect("BSP fails by default")
                    .to_string();
                assert!(err.contains("lost p2"), "{err}");
                continue;
            }
            assert!(errors[k].is_none());
            assert!(e.is_done(), "{consistency}: peer {k} finished");
            assert_eq!(e.metrics().clocks, 12);
            let lost = &e.metrics().lost_peers;
            assert_eq!(lost.len(), 1);
            assert_eq!(lost[0].0, 2);
            assert!(e.config().in_neighbors.iter().all(|&p| p != PeerId(2)));
            // Every batch the victim delivered before it died was applied.
            assert!(e.metrics().batches_applied >= 3 * 12 + 5, "{consistency}");
        }
    }
}

#[test]
fn the_fms_server_serves_the_clients_left() {
    let mut f = Fms::new(0);
    let mut nodes: Vec<&mut dyn StateMachine> = f
        .clients
        .iter_mut()
        .map(|c| c as &mut dyn StateMachine)
        .chain(std::iter::once(&mut f.server as &mut dyn StateMachine))
        .collect();
    let errors = run_with_loss(
        &mut nodes,
        |p| if p == PeerId::SERVER { 3 } else { p.index() },
        1,
        4,
    );
    assert!(errors.iter().all(Option::is_none));
    assert!(f.server.is_done());
    assert_eq!(
        f.server.metrics().lost_peers,
        vec![(1, f.server.metrics().lost_peers[0].1)]
    );
    for k in [0, 2] {
        assert!(f.clients[k].is_done());
        assert_eq!(f.clients[k].checksum(), f.server.replica().checksum());
    }
    // A client that loses the server cannot go on.
    let mut f = Fms::new(0);
    let mut nodes: Vec<&mut dyn StateMachine> = f
        .clients
        .iter_mut()
        .map(|c| c as &mut dyn StateMachine)
        .chain(std::iter::once(&mut f.server as &mut dyn StateMachine))
        .collect();
    let errors = run_with_loss(
        &mut nodes,
        |p| if p == PeerId::SERVER { 3 } else { p.index() },
        3,
        4,
    );
    for e in errors.iter().take(3) {
        let e = e.as_ref().unwrap().to_string();
        assert!(e.contains("cannot train without its server"), "{e}");
    }
}

#[test]
fn a_coordinated_stop_checkpoints_its_clock_and_resumes_bitwise() {
    let (full, _) = run_peers(peers(Method::Factored, &Consistency::Bsp, 4));
    let mut engines = peers(Method::Factored, &Consistency::Bsp, 4);
    for e in &mut engines {
        assert_eq!(e.stop_at(6), 6);
    }
    let states = drive_peers(&mut engines);
    for e in &engines {
        assert!(e.is_done());
        assert_eq!(e.clock(), 6);
    }
    // The periodic checkpoint at 4, and the stop's at 6.
    assert_eq!(at(&states, 6).len(), 3);
    assert_eq!(at(&states, 4).len(), 3);
    let again = resumed(&states, 6, Method::Factored, &Consistency::Bsp, |_| {});
    assert_eq!(run_peers(again).0, full);
    // FMS: the server and its clients stop at 6 and resume to the same end.
    let mut plain = Fms::new(4);
    plain.run();
    let mut f = Fms::new(4);
    for c in &mut f.clients {
        c.stop_at(6);
    }
    f.server.stop_at(6);
    let states = f.run();
    let cut = at(&states, 6);
    assert_eq!(cut.len(), 4);
    let cfg = fms_config(4);
    let clients = cut
        .iter()
        .filter(|s| s.id != PeerId::SERVER)
        .map(|s| {
            let model = Counting { seen: Vec::new() };
            fms::Client::resume(s.id, cfg.clone(), model, shard(s.id.0), s.clone()).unwrap()
        })
        .collect();
    let server = cut.iter().find(|s| s.id == PeerId::SERVER).unwrap().clone();
    let server = fms::Server::resume(cfg, Counting { seen: Vec::new() }, server).unwrap();
    let mut resumed_fms = Fms { clients, server };
    resumed_fms.run();
    assert_eq!(
        resumed_fms.server.replica().checksum(),
        plain.server.replica().checksum()
    );
}

/// Least squares that records the id of every sample it is given (sample = (id, x, y)).
struct Tagged {
    drawn: Vec<usize>,
}

type TaggedSample = (usize, Vec<f32>, Vec<f32>);

impl Model for Tagged {
    type Sample = TaggedSample;
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        for &(id, x, y) in batch {
            self.drawn.push(*id);
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
}

/// 4 peers over 40 tagged samples (peer p owns the ids ≡ p mod 4); peer 2 dies after
/// clock 5 of 12; with `takeover`, every peer's source is [`takeover_indices`]. Returns the
/// engines and, per survivor, the ids it drew after the loss.
fn run_takeover(takeover: bool) -> (Vec<Engine<Tagged>>, Vec<Vec<usize>>) {
    let data: std::sync::Arc<Vec<TaggedSample>> = std::sync::Arc::new(
        (0..40)
            .map(|i| {
                let x: Vec<f32> = (0..D).map(|k| ((i * 3 + k) % 7) as f32 / 7.0).collect();
                let y: Vec<f32> = (0..J).map(|j| ((i + j) % 2) as f32).collect();
                (i, x, y)
            })
            .collect(),
    );
    let mut engines: Vec<Engine<Tagged>> = (0..4u32)
        .map(|p| {
            let mut cfg = config(p, 4, Method::Sgd, Consistency::Ssp { staleness: 1 });
            cfg.checkpoint_every = 0;
            cfg.on_peer_loss = sfb_core::PeerLoss::Continue;
            let own = sfb_core::shard_indices(40, 4, p as usize)
                .map(|i| data[i].clone())
                .collect();
            let e =
                Engine::new(cfg, Tagged { drawn: Vec::new() }, w0(), Shard::new(own, 7)).unwrap();
            if !takeover {
                return e;
            }
            let data = std::sync::Arc::clone(&data);
            e.with_takeover(std::sync::Arc::new(move |lost| {
                let lost = lost.iter().map(|q: &PeerId| q.index()).collect();
                sfb_core::takeover_indices(40, 4, p as usize, &lost)
                    .into_iter()
                    .map(|i| data[i].clone())
                    .collect()
            }))
        })
        .collect();
    let mut nodes: Vec<&mut dyn StateMachine> = engines
        .iter_mut()
        .map(|e| e as &mut dyn StateMachine)
        .collect();
    let errors = run_with_loss(&mut nodes, |p| p.index(), 2, 5);
    assert!(errors.iter().all(Option::is_none));
    // Draws are K = 3 per clock: those of clocks ≥ the clock each survivor was at when told.
    let after: Vec<Vec<usize>> = engines
        .iter()
        .enumerate()
        .map(|(k, e)| {
            if k == 2 {
                return Vec::new();
            }
            let at = e.metrics().lost_peers[0].1 as usize;
            e.model().drawn[at * 3..].to_vec()
        })
        .collect();
    (engines, after)
}

#[test]
fn survivors_take_over_a_lost_shard_in_disjoint_parts_and_give_it_back_on_rejoin() {
    let (mut engines, after) = run_takeover(true);
    let mut taken: Vec<usize> = Vec::new();
    for k in [0usize, 1, 3] {
        assert!(engines[k].is_done());
        let theirs: Vec<usize> = after[k].iter().copied().filter(|i| i % 4 == 2).collect();
        // Every id a survivor draws is its own or one of its share of peer 2's.
        let share = sfb_core::takeover_indices(40, 4, k, &[2].into_iter().collect());
        assert!(
            after[k].iter().all(|i| share.contains(i)),
            "peer {k}: {:?}",
            after[k]
        );
        let mut mine: Vec<usize> = theirs.clone();
        mine.sort_unstable();
        mine.dedup();
        assert_eq!(
            mine.len() as u64,
            engines[k].metrics().taken_over_samples,
            "peer {k}"
        );
        taken.extend(mine);
    }
    // The shares are disjoint and cover the lost shard (each survivor drew at least one
    // full epoch over its new shard after the loss).
    taken.sort_unstable();
    assert_eq!(taken, (0..40).filter(|i| i % 4 == 2).collect::<Vec<_>>());
    let total: u64 = [0usize, 1, 3]
        .iter()
        .map(|&k| engines[k].metrics().taken_over_samples)
        .sum();
    assert_eq!(total, 10);
    // Peer 2 back: the survivors' shards are their own again.
    for k in [0usize, 1, 3] {
        engines[k].peer_rejoined(PeerId(2));
        assert_eq!(engines[k].metrics().taken_over_samples, 0);
    }

    // Dropped: nobody trains on peer 2's samples after its loss.
    let (engines, after) = run_takeover(false);
    for k in [0usize, 1, 3] {
        assert!(engines[k].is_done());
        assert!(
            after[k].iter().all(|i| i % 4 == k),
            "peer {k}: {:?}",
            after[k]
        );
        assert_eq!(engines[k].metrics().taken_over_samples, 0);
    }
}

#[test]
fn a_bsp_peer_failing_on_a_loss_holds_its_latest_cut_bitwise() {
    let make = |every: u64| {
        cluster(4, Method::AdaGrad, &Consistency::Bsp, |cfg| {
            cfg.checkpoint_every = every;
        })
    };
    // Peer 2 dies after clock 6 (not a checkpoint clock of every 4): the survivors fail.
    let mut engines = make(4);
    let mut nodes: Vec<&mut dyn StateMachine> = engines
        .iter_mut()
        .map(|e| e as &mut dyn StateMachine)
        .collect();
    let errors = run_with_loss(&mut nodes, |p| p.index(), 2, 6);
    // The same run checkpointing at every clock: the reference cuts.
    let mut reference = make(1);
    let cuts = drive_peers(&mut reference);
    for k in [0usize, 1, 3] {
        assert!(errors[k].is_some(), "peer {k} fails under BSP");
        let last = engines[k].final_state().expect("a cut to save");
        assert!(
            !last.clock.is_multiple_of(4),
            "a periodic clock is already saved"
        );
        let want = cuts
            .iter()
            .find(|s| s.id == PeerId(k as u32) && s.clock == last.clock)
            .unwrap();
        assert_eq!(last.w, want.w, "peer {k} at clock {}", last.clock);
        assert_eq!(last.optimizer, want.optimizer);
        assert_eq!(last.model, want.model);
        assert_eq!(last.sampler, want.sampler);
        assert_eq!(last.awaited, want.awaited);
    }
    // A node without checkpoints keeps no cut.
    assert!(make(0)[0].final_state().is_none());
}

#[test]
fn a_compressing_run_resumes_bitwise_with_its_residual() {
    // K = 3 pairs re-compressed to 1: every peer keeps a residual between clocks.
    resumes_bitwise_with_what_it_held_back(&|cfg| cfg.compress = Some(1));
}

#[test]
fn a_prioritizing_run_resumes_bitwise_with_its_backlog() {
    // K = 3 pairs, one sent per clock by magnitude: every peer carries a backlog (merged
    // once it exceeds a clock's worth).
    resumes_bitwise_with_what_it_held_back(&|cfg| {
        cfg.prioritize = Some(sfb_core::Prioritize {
            policy: sfb_core::Policy::Magnitude,
            budget: sfb_core::Budget::Pairs(1),
            seed: 5,
        });
    });
}

/// A BSP run of 3 peers that hold something back between clocks (`send`: compression or
/// prioritization), checkpointed every 4 clocks, resumed at clock 8: bitwise the
/// uninterrupted run's end; without what was held back it ends elsewhere; a run that holds
/// nothing back refuses such a state.
fn resumes_bitwise_with_what_it_held_back(send: &dyn Fn(&mut Config)) {
    let make = |every: u64| {
        cluster(3, Method::Sgd, &Consistency::Bsp, |cfg| {
            cfg.checkpoint_every = every;
            send(cfg);
        })
    };
    let (plain, _) = run_peers(make(0));
    let (full, states) = run_peers(make(4));
    assert_eq!(full, plain);
    assert!(states.iter().all(|s| !s.compressor.is_empty()));
    let resume = |edit: &dyn Fn(&mut NodeState), holds: bool| {
        at(&states, 8)
            .into_iter()
            .map(|mut s| {
                edit(&mut s);
                let p = s.id.0;
                let mut cfg = config(p, 3, Method::Sgd, Consistency::Bsp);
                if holds {
                    send(&mut cfg);
                }
                Engine::resume(cfg, Counting { seen: Vec::new() }, shard(p), s)
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let (sums, _) = run_peers(resume(&|_| {}, true).unwrap());
    assert_eq!(sums, full, "resumed at 8 with what was held back");
    let (lost, _) = run_peers(resume(&|s| s.compressor.clear(), true).unwrap());
    assert_ne!(lost, full);
    let e = resume(&|_| {}, false).unwrap_err().to_string();
    assert!(
        e.contains("written by a run with --compress, --prioritize or --partial tree"),
        "{e}"
    );
}

/// A partition of 5 peers into {0, 1, 2} and {3, 4} (issue 31's split brain): each side
/// learns the other side's peers are lost. Only the majority side trains on; every node
/// of the minority stops with a reason naming who it lost, so no side reports a result
/// of its own unless it holds a majority. With the quorum off (`continue-alone`) both
/// sides go on.
#[test]
fn only_the_side_of_a_partition_holding_a_majority_trains_on() {
    for quorum in [true, false] {
        let mut engines = cluster(5, Method::Sgd, &Consistency::Ssp { staleness: 2 }, |cfg| {
            cfg.on_peer_loss = sfb_core::PeerLoss::Continue;
            cfg.quorum = quorum;
        });
        let side = |p: usize| usize::from(p >= 3);
        let mut outcome: Vec<Option<String>> = vec![None; 5];
        for (k, e) in engines.iter_mut().enumerate() {
            for other in (0..5).filter(|&o| side(o) != side(k)) {
                if let Err(err) = e.peer_lost(PeerId(other as u32)) {
                    outcome[k] = Some(err.to_string());
                    break;
                }
            }
        }
        for (k, o) in outcome.iter().enumerate() {
            match (quorum, side(k)) {
                (true, 1) => {
                    let err = o.as_deref().unwrap_or_else(|| panic!("p{k} went on alone"));
                    assert!(
                        err.contains(&format!(
                            "p{k} stops at clock 0: it has lost 3 of the run's 5 peers (p0, p1, p2)"
                        )),
                        "{err}"
                    );
                }
                _ => assert!(o.is_none(), "p{k} (quorum {quorum}): {o:?}"),
            }
        }
        // The majority trains to the end on its own.
        let mut majority: Vec<&mut dyn StateMachine> = engines[..3]
            .iter_mut()
            .map(|e| e as &mut dyn StateMachine)
            .collect();
        let mut time = ManualTime::default();
        let mut done = [false; 3];
        for _ in 0..10_000 {
            for i in 0..3 {
                if done[i] {
                    continue;
                }
                if majority[i].on_tick(&mut time).unwrap() == Progress::Done {
                    majority[i].finish(&mut time);
                    done[i] = true;
                }
                let from = majority[i].id();
                while let Some(out) = majority[i].poll_output() {
                    majority[out.to.index()]
                        .on_message(from, out.msg, &mut time)
                        .unwrap();
                }
                while majority[i].poll_event().is_some() {}
            }
            if done.iter().all(|&d| d) {
                break;
            }
        }
        assert!(
            done.iter().all(|&d| d),
            "quorum {quorum}: the majority did not finish"
        );
        assert!(engines[..3].iter().all(|e| e.metrics().clocks == 12));
    }
}

/// One peer of 4 cut off from the others (or started late, or with a key nobody accepts):
/// after its second loss it holds no majority and stops, instead of training all its
/// clocks alone; the three others lose one peer and go on. Losses learnt from the others'
/// notices count as much as the node's own.
#[test]
fn a_peer_cut_off_from_the_rest_stops_at_its_second_loss() {
    let mut engines = cluster(4, Method::Sgd, &Consistency::Async, |cfg| {
        cfg.on_peer_loss = sfb_core::PeerLoss::Continue;
    });
    assert!(engines[3].peer_lost(PeerId(0)).is_ok());
    let e = engines[3].loss_reported(PeerId(1)).unwrap_err().to_string();
    assert!(e.contains("lost 2 of the run's 4 peers (p0, p1)"), "{e}");
    assert!(e.contains("--on-peer-loss continue-alone"), "{e}");
    for e in &mut engines[..3] {
        assert!(e.peer_lost(PeerId(3)).is_ok());
    }
    // A peer that comes back counts as reachable again.
    engines[0].peer_rejoined(PeerId(3));
    assert!(engines[0].peer_lost(PeerId(1)).is_ok());
}
