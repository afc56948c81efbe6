//! Aggregated apply (`--aggregate`) in the virtual-time driver: where the cost model
//! chooses it, every replica makes the same choice and keeps the same residual, so BSP
//! with full broadcast still ends with one W.

use std::time::Duration;

use ndarray::{Array2, ArrayView2};
use sfb_core::{Config, Engine, Model, ModelError, PeerId, Shard, SvList};
use sfb_net::virtual_time::{Costs, Latency, Network};

/// u = the sample's first J values, v = its last D: random pairs of full rank.
struct Pairs {
    j: usize,
}

impl Model for Pairs {
    type Sample = Vec<f32>;
    fn compute_sv(
        &mut self,
        _: ArrayView2<'_, f32>,
        batch: &[&Vec<f32>],
        sv: &mut SvList,
    ) -> Result<(), ModelError> {
        for x in batch {
            sv.push_dense(&x[..self.j], &x[self.j..])?;
        }
        Ok(())
    }
}

const P: usize = 4;
const N: usize = 4096;

fn run(aggregate: Option<usize>, seed: u64) -> Vec<Engine<Pairs>> {
    let engines = (0..P)
        .map(|p| {
            let mut cfg = Config::full_broadcast(PeerId(p as u32), P);
            cfg.clocks = 3;
            cfg.batch_size = 16;
            cfg.lr = 1e-3;
            cfg.eval_every = 0;
            cfg.aggregate = aggregate;
            let samples = sfb_core::replica::seeded_w(10 + p as u64, 16, 2 * N);
            let data = samples.rows().into_iter().map(|r| r.to_vec()).collect();
            Engine::new(
                cfg,
                Pairs { j: N },
                Array2::zeros((N, N)),
                Shard::new(data, 1),
            )
            .unwrap()
        })
        .collect();
    Network::new(engines)
        .seed(seed)
        .costs(Costs::free())
        .latency(Latency::uniform(
            Duration::from_micros(1),
            Duration::from_millis(3),
        ))
        .run()
        .unwrap()
        .nodes
        .into_iter()
        .map(|n| n.node)
        .collect()
}

#[test]
fn aggregated_apply_keeps_bsp_replicas_equal_whatever_the_delays() {
    // 4 peers × 16 pairs on a 4096² W: the model aggregates (see sfb_core::aggregate).
    assert!(sfb_core::aggregate::Aggregator::new(16).worth(64, N, N));
    let a = run(Some(16), 1);
    let b = run(Some(16), 2);
    let sums: Vec<String> = a.iter().map(|e| e.replica().checksum()).collect();
    assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}");
    assert_eq!(
        b[0].replica().checksum(),
        sums[0],
        "the same run for other delays"
    );
    for e in &a {
        // The apply before clocks 1 and 2, and the final one.
        assert_eq!(e.metrics().aggregated_applies, 3);
        assert!(e.replica().w().iter().all(|x| x.is_finite()));
    }
    // It is an approximation: not the W of applying every pair.
    let direct = run(None, 1);
    assert_eq!(direct[0].metrics().aggregated_applies, 0);
    assert_ne!(direct[0].replica().checksum(), sums[0]);
}
