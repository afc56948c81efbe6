//! The step bound ([`sfb_core::bound`]) on the virtual-time driver: a peer whose steps
//! are far too large (its code or step size went wrong, past what the handshake's run
//! agreement can see) is shut out by the peers it sends to, and the healthy majority
//! trains on with replicas it never reached; one a few times off is accepted (the bound
//! catches gross faults only), and without the bound every replica is poisoned.

use std::time::Duration;

use ndarray::{Array2, ArrayView2};
use sfb_core::{Config, Consistency, Engine, Model, ModelError, PeerId, PeerLoss, Shard, SvList};
use sfb_net::virtual_time::{CutOff, Latency, Network, Outcome};

/// Least squares with J = 2 ([`crate::relay::Ls`]) whose steps are `by` times the run's: a
/// peer with a bug in its step, or a step size the run agreement did not see.
struct Scaled {
    by: f32,
}

impl Model for Scaled {
    type Sample = (Vec<f32>, f32);
    fn compute_sv(
        &mut self,
        w: ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        crate::relay::Ls.compute_sv(w, batch, sv)
    }
    fn scale(&self, _clock: u64, lr: f32, pairs: usize) -> f32 {
        if pairs == 0 {
            0.0
        } else {
            -self.by * lr / pairs as f32
        }
    }
}

const P: usize = 5;
const FAULTY: usize = 3;
const CLOCKS: u64 = 40;

/// Five peers, full broadcast, SSP(2), going on after losses; peer 3's steps are `by`
/// times the others'. `bound`: every peer's step bound.
fn run(
    by: f32,
    bound: Option<f32>,
) -> Result<Outcome<Engine<Scaled>>, sfb_net::virtual_time::Error> {
    let engines = (0..P)
        .map(|p| {
            let mut cfg = Config::full_broadcast(PeerId(p as u32), P);
            cfg.clocks = CLOCKS;
            cfg.batch_size = 4;
            cfg.lr = 0.05;
            cfg.eval_every = 0;
            cfg.consistency = Consistency::Ssp { staleness: 2 };
            cfg.on_peer_loss = PeerLoss::Continue;
            cfg.step_bound = bound;
            let data = (0..16)
                .map(|i| {
                    let x = vec![1.0, ((p * 5 + i) % 9) as f32 * 0.1];
                    let y = 0.5 + 0.3 * x[1];
                    (x, y)
                })
                .collect();
            let model = Scaled {
                by: if p == FAULTY { by } else { 1.0 },
            };
            Engine::new(
                cfg,
                model,
                Array2::zeros((2, 2)),
                Shard::new(data, p as u64),
            )
            .unwrap()
        })
        .collect();
    Network::new(engines)
        .seed(31)
        .latency(Latency::uniform(
            Duration::from_micros(10),
            Duration::from_micros(300),
        ))
        .detect_after(Duration::from_millis(2))
        .run()
}

fn largest_entry(w: ndarray::ArrayView2<'_, f32>) -> f32 {
    w.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

#[test]
fn a_peer_with_far_too_large_steps_is_shut_out_and_the_majority_trains_on() {
    let run = run(1e6, Some(sfb_core::bound::DEFAULT_STEP_BOUND)).unwrap();
    let faulty = &run.nodes[FAULTY];
    // Cut off from everyone it sent to, it stops as the minority (exit 3 over libp2p).
    assert_eq!(
        faulty.cut_off,
        Some(CutOff::Minority),
        "{:?}",
        faulty.failed
    );
    for (p, n) in run.nodes.iter().enumerate().filter(|&(p, _)| p != FAULTY) {
        assert!(n.failed.is_none(), "p{p}: {:?}", n.failed);
        let m = n.node.metrics();
        assert_eq!(m.clocks, CLOCKS, "p{p}");
        assert_eq!(
            n.node
                .metrics()
                .lost_peers
                .iter()
                .map(|&(q, _)| q)
                .collect::<Vec<_>>(),
            [FAULTY as u32],
            "p{p}"
        );
        // Never poisoned: no step of the faulty peer reached the replica (W* ≈ [0.5, 0.3]).
        let w = n.node.replica().w();
        assert!(largest_entry(w) < 2.0, "p{p}: {w:?}");
        assert!(m.max_step_ratio < 10.0, "p{p}: {}", m.max_step_ratio);
    }
}

#[test]
fn a_peer_a_few_times_off_is_accepted_and_without_the_bound_a_gross_one_poisons_all() {
    // Five times the run's step: within the bound, so nobody is shut out (the bound
    // catches gross faults only); the ratio is measured.
    let run = run(5.0, Some(sfb_core::bound::DEFAULT_STEP_BOUND)).unwrap();
    for n in &run.nodes {
        assert!(n.failed.is_none(), "{:?}", n.failed);
        assert!(n.node.metrics().lost_peers.is_empty());
    }
    let ratio = run.nodes[0].node.metrics().max_step_ratio;
    assert!((2.0..1000.0).contains(&ratio), "{ratio}");
    // The bound off: the faulty peer's steps reach every replica. Either W blows up (to
    // non-finite factors, which every receiver refuses: the run fails) or every healthy
    // replica ends far from the optimum.
    match run_off() {
        Err(e) => assert!(e.to_string().contains("non-finite"), "{e}"),
        Ok(run) => {
            for n in &run.nodes {
                assert!(largest_entry(n.node.replica().w()) > 1e3);
            }
        }
    }
}

fn run_off() -> Result<Outcome<Engine<Scaled>>, sfb_net::virtual_time::Error> {
    run(1e6, None)
}
