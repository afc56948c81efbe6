//! BSP with full broadcast: every replica is bitwise identical, and identical to a
//! single-process run that applies the same batches in the same order.

use crate::common::*;
use sfb_core::{Consistency, FactorBatch, Model, PeerId, Replica, SvList};
use sfb_models::{Mlr, synthetic};

#[test]
fn four_peers_bsp_replicas_are_bitwise_equal_and_match_single_process() {
    let prob = problem("classes=12,features=40,samples=2000,density=0.3", 11);
    let spec = ClusterSpec {
        peers: 4,
        clocks: 20,
        batch: 8,
        lr: 0.5,
        consistency: Consistency::Bsp,
        seed: 11,
        straggler: None,
    };
    let runs = sfb_net::mem::run(engines(&prob, &spec), &opts()).unwrap();
    let sums: Vec<String> = runs.iter().map(|r| r.engine.replica().checksum()).collect();
    assert!(
        sums.iter().all(|s| s == &sums[0]),
        "replicas differ: {sums:?}"
    );
    for r in &runs {
        assert_eq!(r.engine.metrics().max_staleness, 0);
        assert_eq!(r.engine.metrics().batches_applied, 4 * 20);
    }

    // Single process: the same shards, samplers, initial W and model; each clock computes
    // every peer's factors on the shared W, then applies them in origin order in one call.
    let mut w = Replica::new(synthetic::init_w(prob.j, prob.d, 0.01, 11)).unwrap();
    let mut shards: Vec<_> = (0..4).map(|id| shard(&prob, 4, id, 11)).collect();
    let mut model = Mlr::new(prob.j, prob.d);
    let mut sv = SvList::new(prob.j, prob.d);
    for t in 0..20u64 {
        let mut batches: Vec<FactorBatch> = Vec::new();
        for (id, sh) in shards.iter_mut().enumerate() {
            let mb = sh.next_batch(8);
            model.compute_sv(w.w(), &mb, &mut sv).unwrap();
            let scale = model.scale(t, 0.5, sv.len());
            batches.push(sv.to_batch(PeerId(id as u32), t, scale));
            sv.clear();
        }
        let refs: Vec<&FactorBatch> = batches.iter().collect();
        w.apply(&refs).unwrap();
    }
    assert_eq!(
        w.checksum(),
        sums[0],
        "distributed BSP differs from the single-process run"
    );
}
