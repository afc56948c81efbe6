//! The FMS parameter-server baseline over the in-memory transport, like for like with SFB:
//! same model, data, seed and initial W.

use std::time::Duration;

use crate::common::*;
use sfb_core::fms::Push;
use sfb_core::wire::{self, Message};
use sfb_core::{Consistency, PeerId};

fn spec(consistency: Consistency) -> ClusterSpec {
    ClusterSpec {
        peers: 4,
        clocks: 20,
        batch: 8,
        lr: 0.5,
        consistency,
        seed: 11,
        straggler: None,
    }
}

const DATA: &str = "classes=12,features=40,samples=2000,density=0.3";

/// ‖a − b‖_F / ‖b‖_F.
fn rel_diff(a: ndarray::ArrayView2<'_, f32>, b: ndarray::ArrayView2<'_, f32>) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (x, y) in a.iter().zip(b.iter()) {
        num += (f64::from(*x) - f64::from(*y)).powi(2);
        den += f64::from(*y).powi(2);
    }
    (num / den).sqrt()
}

#[test]
fn fms_factor_push_is_bitwise_identical_to_sfb_full_broadcast_and_dense_push_is_close() {
    let prob = problem(DATA, 11);
    let c = spec(Consistency::Bsp);
    let sfb_runs = sfb_net::mem::run(engines(&prob, &c), &opts()).unwrap();
    let sfb_sum = sfb_runs[0].engine.replica().checksum();
    assert!(
        sfb_runs
            .iter()
            .all(|r| r.engine.replica().checksum() == sfb_sum)
    );

    let (server, clients) = fms_nodes(&prob, &c, Push::Factors);
    let fms = sfb_net::mem_fms::run(server, clients, &opts()).unwrap();
    assert_eq!(
        fms.server.server.replica().checksum(),
        sfb_sum,
        "FMS server's W differs from SFB's"
    );
    let (j, d) = (prob.j, prob.d);
    for r in &fms.clients {
        assert_eq!(r.client.checksum(), sfb_sum, "client {}", r.client.id());
        let m = r.client.metrics();
        assert_eq!(m.batches_applied, 4 * 20, "same accounting as an SFB peer");
        assert_eq!(m.max_staleness, 0);
        assert_eq!(m.samples, 20 * 8);
        // Records like an SFB peer's: one per clock, then the final one.
        assert_eq!(r.records.len(), 21);
        assert_eq!(r.records[19].clock, 20);
        assert_eq!(r.records[20].bytes_sent, m.bytes_sent);
    }
    // The server sent every client the full W once per clock, and its bytes are counted
    // exactly as the wire encodes them.
    let w_frame = wire::encoded_len(&Message::Params {
        clock: 20,
        w: std::sync::Arc::new(ndarray::Array2::zeros((j, d))),
    }) as u64;
    let sm = fms.server.server.metrics();
    assert_eq!(sm.bytes_sent, 20 * 4 * w_frame);
    assert!(w_frame >= (j * d * 4) as u64);
    let client_sent: u64 = fms
        .clients
        .iter()
        .map(|r| r.client.metrics().bytes_sent)
        .sum();
    assert_eq!(sm.bytes_received, client_sent);
    assert_eq!(sm.batches_applied, 4 * 20);
    assert_eq!(fms.server.records.last().unwrap().peer, PeerId::SERVER.0);

    // Dense ΔW push: same W up to float rounding.
    let (server, clients) = fms_nodes(&prob, &c, Push::Dense);
    let dense = sfb_net::mem_fms::run(server, clients, &opts()).unwrap();
    let sfb_w = sfb_runs[0].engine.replica().w();
    let rel = rel_diff(dense.server.server.replica().w(), sfb_w);
    assert!(
        rel <= 1e-5,
        "dense push differs from SFB by {rel:e} (relative)"
    );
    for r in &dense.clients {
        assert_eq!(
            r.client.checksum(),
            dense.server.server.replica().checksum()
        );
        // One ΔW frame per clock: J·D floats plus a header of a few varints.
        let sent = r.client.metrics().bytes_sent;
        let payload = 20 * (j * d * 4) as u64;
        assert!((payload..payload + 20 * 32).contains(&sent), "{sent} bytes");
    }
    println!("dense push vs SFB: relative Frobenius difference {rel:e}");
}

#[test]
fn fms_ssp_with_a_straggler_respects_the_bound_and_tiny_inboxes_do_not_deadlock() {
    let prob = problem("classes=5,features=20,samples=800", 3);
    let s = 2;
    let c = ClusterSpec {
        peers: 4,
        clocks: 12,
        batch: 4,
        lr: 0.3,
        consistency: Consistency::Ssp { staleness: s },
        seed: 3,
        straggler: Some((3, Duration::from_millis(5))),
    };
    let opts = sfb_net::mem::Options {
        capacity: 1,
        ..opts_for(&prob, &c)
    };
    assert!(!opts.stragglers.is_none());
    for push in [Push::Factors, Push::Dense] {
        let (server, clients) = fms_nodes(&prob, &c, push);
        let run = sfb_net::mem_fms::run(server, clients, &opts).unwrap();
        let server_sum = run.server.server.replica().checksum();
        for r in &run.clients {
            let m = r.client.metrics();
            assert!(m.max_staleness <= s, "staleness {} > {s}", m.max_staleness);
            assert_eq!(
                m.batches_applied,
                4 * 12,
                "every update reached every client once"
            );
            assert_eq!(r.client.checksum(), server_sum, "final W is the server's");
        }
    }
}

/// Runs `engines` (BSP, full broadcast) and the FMS `nodes` with factor push: every replica,
/// the server and every client hold bitwise the same W. Returns its checksum, W and the
/// final objective.
fn bsp_equals_fms<M: sfb_core::Model>(
    method: sfb_core::Method,
    engines: Vec<sfb_core::Engine<M>>,
    (server, clients): (sfb_core::fms::Server<M>, Vec<sfb_core::fms::Client<M>>),
) -> (String, ndarray::Array2<f32>, Option<f64>) {
    let sfb_runs = sfb_net::mem::run(engines, &opts()).unwrap();
    let sum = sfb_runs[0].engine.replica().checksum();
    for r in &sfb_runs {
        assert_eq!(
            r.engine.replica().checksum(),
            sum,
            "{method}: peer replicas differ"
        );
    }
    let fms = sfb_net::mem_fms::run(server, clients, &opts()).unwrap();
    assert_eq!(
        fms.server.server.replica().checksum(),
        sum,
        "{method}: FMS differs"
    );
    for r in &fms.clients {
        assert_eq!(r.client.checksum(), sum, "{method}: FMS client differs");
    }
    let obj = sfb_runs[0].engine.last_evaluation().map(|e| e.objective);
    (sum, sfb_runs[0].engine.replica().w().to_owned(), obj)
}

/// SAGA (with its own model, λ and the builder's `n`) keeps BSP full broadcast bitwise
/// identical and equal to FMS with factor push, and refuses dense push before running.
#[test]
fn saga_keeps_bsp_replicas_identical_and_equal_to_fms_and_refuses_dense_push() {
    use sfb_core::{Method, Optimizer};
    let prob = problem(DATA, 11);
    let mut c = spec(Consistency::Bsp);
    c.clocks = 12;
    c.lr = 0.3;
    let mut opt = Optimizer::new(Method::Saga);
    opt.l2 = 1e-2;
    let fms = saga_fms(&prob, &c, sfb_harness::Push::Factors, &opt).unwrap();
    let (sum, _, obj) = bsp_equals_fms(Method::Saga, saga_engines(&prob, &c, &opt), fms);
    let err = saga_fms(&prob, &c, sfb_harness::Push::Dense, &opt).unwrap_err();
    assert!(err.to_string().contains("factor push"), "{err}");
    println!("saga with its model: checksum {sum}, objective {obj:?}");
}

/// Every optimizer (and a schedule with warm-up) keeps BSP full broadcast bitwise identical
/// across replicas and equal to the FMS server, which plays the optimizer for its clients;
/// dense push gives the same W up to float rounding (SAGA, whose table mean needs the
/// factors, refuses it).
#[test]
fn every_optimizer_keeps_bsp_replicas_identical_and_equal_to_fms() {
    use sfb_core::{Method, Optimizer, Schedule};
    let prob = problem(DATA, 11);
    let mut c = spec(Consistency::Bsp);
    c.clocks = 12;
    let mut seen = std::collections::BTreeSet::new();
    for method in Method::ALL {
        let mut opt = Optimizer::new(method).with_schedule(Schedule::Cosine { floor: 0.1 });
        opt.warmup = 3;
        opt.snapshots = 4;
        c.lr = if method.is_adaptive() { 0.05 } else { 0.3 };
        if method == Method::Saga {
            // SAGA runs with its own model (the builder sets n from the data).
            let fms = saga_fms(&prob, &c, sfb_harness::Push::Factors, &opt).unwrap();
            let (sum, _, obj) = bsp_equals_fms(method, saga_engines(&prob, &c, &opt), fms);
            assert!(saga_fms(&prob, &c, sfb_harness::Push::Dense, &opt).is_err());
            assert!(
                seen.insert(sum.clone()),
                "{method} gave the same W as another method"
            );
            println!("{method}: checksum {sum}, dense push refused, objective {obj:?}");
            continue;
        }
        let sfb_runs = sfb_net::mem::run(engines_opt(&prob, &c, &opt), &opts()).unwrap();
        let sum = sfb_runs[0].engine.replica().checksum();
        for r in &sfb_runs {
            assert_eq!(
                r.engine.replica().checksum(),
                sum,
                "{method}: peer replicas differ"
            );
        }
        let (server, clients) = fms_nodes_opt(&prob, &c, sfb_harness::Push::Factors, &opt);
        let fms = sfb_net::mem_fms::run(server, clients, &opts()).unwrap();
        assert_eq!(
            fms.server.server.replica().checksum(),
            sum,
            "{method}: FMS differs"
        );
        for r in &fms.clients {
            assert_eq!(r.client.checksum(), sum, "{method}: FMS client differs");
        }
        let Ok((server, clients)) = try_fms_nodes_opt(&prob, &c, sfb_harness::Push::Dense, &opt)
        else {
            // The factored step's statistics need each sample's factors: dense push is
            // refused before anything runs.
            assert_eq!(method, Method::Factored, "{method}: dense push refused");
            assert!(
                seen.insert(sum.clone()),
                "{method} gave the same W as another method"
            );
            println!("{method}: checksum {sum}, dense push refused");
            continue;
        };
        let dense = sfb_net::mem_fms::run(server, clients, &opts()).unwrap();
        let rel = rel_diff(
            dense.server.server.replica().w(),
            sfb_runs[0].engine.replica().w(),
        );
        assert!(rel <= 1e-4, "{method}: dense push differs by {rel:e}");
        // The methods really differ from one another.
        assert!(
            seen.insert(sum.clone()),
            "{method} gave the same W as another method"
        );
        let obj = sfb_runs[0].engine.last_evaluation().map(|e| e.objective);
        println!("{method}: checksum {sum}, dense push rel diff {rel:e}, objective {obj:?}");
    }
}
