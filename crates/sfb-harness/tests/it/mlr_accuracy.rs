//! MLR on 4 peers reaches at least 0.9 of the single-process accuracy for the same number
//! of samples.

use crate::common::*;
use sfb_core::Consistency;

#[test]
fn four_peer_mlr_matches_single_process_accuracy() {
    let prob = problem("classes=20,features=100,samples=20000,noise=0.3", 21);
    let run = |peers: usize, clocks: u64| {
        let spec = ClusterSpec {
            peers,
            clocks,
            batch: 16,
            lr: 0.5,
            consistency: Consistency::Bsp,
            seed: 21,
            straggler: None,
        };
        let runs = sfb_net::mem::run(engines(&prob, &spec), &opts()).unwrap();
        runs[0].engine.last_evaluation().unwrap().accuracy.unwrap()
    };
    let single = run(1, 1200);
    let four = run(4, 300);
    eprintln!("single-process accuracy {single:.4}, 4 peers {four:.4}");
    assert!(
        single > 0.5,
        "single-process baseline did not learn: {single}"
    );
    assert!(
        four >= 0.9 * single,
        "4 peers {four:.4} < 0.9 × single {single:.4}"
    );
}
