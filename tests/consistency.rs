//! Consistency models with a straggler: SSP's bound holds and buys the fast peers time;
//! Async and throttled release run to completion.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use sfb::core::{Consistency, ThrottledRelease};

const DELAY: Duration = Duration::from_millis(30);

fn cluster(consistency: Consistency, clocks: u64) -> ClusterSpec {
    ClusterSpec {
        peers: 4,
        clocks,
        batch: 4,
        lr: 0.3,
        consistency,
        seed: 3,
        straggler: Some((3, DELAY)),
    }
}

fn fast_peer_wait(
    runs: &[sfb::net::mem::PeerRun<sfb::models::Straggler<sfb::models::Mlr>>],
) -> f64 {
    runs[..3]
        .iter()
        .map(|r| r.engine.metrics().wait_s)
        .sum::<f64>()
        / 3.0
}

#[test]
fn ssp_never_exceeds_staleness_and_fast_peers_wait_less_than_bsp() {
    let prob = problem("classes=5,features=20,samples=800", 3);
    let clocks = 12;
    let s = 4;
    let bsp =
        sfb::net::mem::run(engines(&prob, &cluster(Consistency::Bsp, clocks)), &opts()).unwrap();
    let ssp = sfb::net::mem::run(
        engines(&prob, &cluster(Consistency::Ssp { staleness: s }, clocks)),
        &opts(),
    )
    .unwrap();
    for r in &ssp {
        let m = r.engine.metrics();
        assert!(
            m.max_staleness <= s,
            "peer staleness {} > {s}",
            m.max_staleness
        );
        assert_eq!(
            m.batches_applied,
            4 * clocks,
            "every batch applied exactly once"
        );
    }
    for r in &bsp {
        assert_eq!(r.engine.metrics().max_staleness, 0);
    }
    // The fast peers ran ahead of the straggler: they applied updates that were late.
    let ahead = ssp[..3]
        .iter()
        .map(|r| r.engine.metrics().max_staleness)
        .max()
        .unwrap();
    assert!(
        ahead >= 1,
        "fast peers never got ahead of the straggler under SSP"
    );
    // Structurally, BSP makes each fast peer wait for the straggler at every clock
    // (≈ clocks × DELAY), SSP(s) lets them skip s of those waits (≈ (clocks − s) × DELAY):
    // a margin of s × DELAY = 120 ms. (The end-of-run flush, where everybody waits for the
    // straggler's last batches, is counted separately as flush_s.)
    let (wb, ws) = (fast_peer_wait(&bsp), fast_peer_wait(&ssp));
    eprintln!("fast peers' mean wait: BSP {wb:.3}s, SSP(s={s}) {ws:.3}s");
    assert!(ws < wb, "SSP wait {ws:.3}s is not below BSP wait {wb:.3}s");
}

#[test]
fn async_runs_to_completion_with_a_straggler() {
    let prob = problem("classes=5,features=20,samples=800", 4);
    let runs =
        sfb::net::mem::run(engines(&prob, &cluster(Consistency::Async, 10)), &opts()).unwrap();
    for r in &runs {
        assert!(r.engine.is_done());
        assert_eq!(r.engine.clock(), 10);
        assert_eq!(r.engine.metrics().batches_applied, 40);
    }
}

#[test]
fn throttled_release_runs_to_completion_with_a_straggler() {
    let prob = problem("classes=5,features=20,samples=800", 5);
    let throttle = Consistency::Custom(Arc::new(ThrottledRelease { min_ready: 2 }));
    let runs = sfb::net::mem::run(engines(&prob, &cluster(throttle, 10)), &opts()).unwrap();
    for r in &runs {
        assert!(r.engine.is_done());
        assert_eq!(r.engine.metrics().batches_applied, 40);
    }
    // With two of three in-neighbours enough, the fast peers did not wait for the
    // straggler at every clock: some of its batches were applied late.
    let late = runs[..3]
        .iter()
        .map(|r| r.engine.metrics().max_staleness)
        .max()
        .unwrap();
    assert!(late >= 1, "throttled release behaved like BSP");
}
