//! The cluster builder and `run`: seeds, FMS like for like with SFB, summaries, errors.

use std::time::Duration;

use ndarray::Array2;
use sfb_core::metrics::ClockRecord;
use sfb_harness::{
    Backend, Cluster, DataSource, Error, Push, RunSpec, StragglerSpec, peer_seed, run,
};

fn spec(data: &str, clocks: u64, batch: usize) -> RunSpec {
    let mut s = RunSpec {
        data: DataSource::Synthetic(data.into()),
        ..RunSpec::default()
    };
    (s.train.clocks, s.train.batch, s.train.eval_every) = (clocks, batch, 0);
    s.net.timeout_s = 60.0;
    s
}

/// A model of the program's own that sends nothing.
struct Zero;
impl sfb_core::Model for Zero {
    type Sample = f32;
    fn compute_sv(
        &mut self,
        _: ndarray::ArrayView2<'_, f32>,
        _: &[&f32],
        _: &mut sfb_core::SvList,
    ) -> Result<(), sfb_core::ModelError> {
        Ok(())
    }
}

/// Server bytes from the server's records (`peer = PeerId::SERVER.0`).
fn server_bytes(records: &[ClockRecord]) -> (u64, u64) {
    let last = records
        .iter()
        .rfind(|r| r.peer == sfb_core::PeerId::SERVER.0)
        .expect("server records");
    (last.bytes_sent, last.bytes_received)
}

#[test]
fn fms_matches_sfb_and_counts_the_server_bytes() {
    let p = 4;
    let s = spec("classes=6,features=10,samples=400", 8, 4);
    let sfb = run(&s, None).unwrap();
    let fms = run(
        &RunSpec {
            backend: Backend::Fms,
            ..s.clone()
        },
        None,
    )
    .unwrap();
    let (fms, records) = (fms.summary, fms.records);
    assert_eq!(fms.backend, "fms");
    assert_eq!(fms.out_degree, 1);
    assert_eq!(fms.replica_checksums.len(), p);
    assert_eq!(fms.replica_checksums, sfb.summary.replica_checksums);
    assert_eq!(fms.max_replica_divergence, Some(0.0));
    let (server_sent, server_received) = server_bytes(&records);
    let client_sent: u64 = (0..p as u32)
        .map(|c| records.iter().rfind(|r| r.peer == c).unwrap().bytes_sent)
        .sum();
    assert_eq!(server_received, client_sent);
    assert_eq!(fms.bytes_sent, client_sent + server_sent);
    // W pushes: P frames of J·D floats (plus a few header bytes) per clock; D counts the
    // intercept column.
    let w_bytes = (6 * 11 * 4) as u64;
    assert!(server_sent >= 8 * p as u64 * w_bytes);
    assert!(server_sent <= 8 * p as u64 * (w_bytes + 16));
    assert_eq!(
        sfb_core::fms::Push::from(Push::Dense),
        sfb_core::fms::Push::Dense
    );
}

#[test]
fn spec_and_builder_give_the_same_bitwise_run_and_the_summary_reports_it() {
    let mut s = spec("classes=5,features=12,samples=300", 6, 4);
    s.peers = 3;
    s.train.eval_every = 3;
    s.output.keep_records = true;
    let from_spec = run(&s, None).unwrap();
    // The spec prepares the data it loads (train.scale, train.intercept); a builder takes
    // data as given.
    let (problem, _) = s
        .data
        .load(&s.model, s.train.seed)
        .unwrap()
        .prepare(
            s.train.scale_for(&s.model),
            s.train.intercept_for(&s.model),
            &Default::default(),
        )
        .unwrap();
    let by_hand = Cluster::builder()
        .peers(3)
        .spec(s.model.spec())
        .data(problem)
        .clocks(6)
        .batch(4)
        .eval_every(3)
        .run_mem()
        .unwrap();
    let summary = by_hand.summary();
    assert_eq!(
        summary.replica_checksums,
        from_spec.summary.replica_checksums
    );
    assert_eq!(summary.objective, from_spec.summary.objective);
    assert_eq!(
        (summary.peers, summary.out_degree, summary.clocks),
        (3, 2, 6)
    );
    assert_eq!(
        (summary.backend.as_str(), summary.model.as_str()),
        ("sfb", "mlr")
    );
    // Records: one per clock and peer, plus each peer's final one.
    assert_eq!(from_spec.records.len(), 3 * (6 + 1));
    assert!(summary.objective.is_some() && summary.test_accuracy.is_some());
}

#[test]
fn records_stream_to_the_metrics_file_and_only_the_final_ones_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec("classes=5,features=12,samples=300", 6, 4);
    s.peers = 3;
    s.output.metrics = Some(dir.path().join("m.jsonl"));
    let streamed = run(&s, None).unwrap();
    // In memory: each peer's final record only.
    let last: Vec<(u32, u64)> = streamed.records.iter().map(|r| (r.peer, r.clock)).collect();
    assert_eq!(last.len(), 3);
    assert!(last.iter().all(|&(_, c)| c == 6), "{last:?}");
    // On disk: every record, as with keep_records.
    let text = std::fs::read_to_string(dir.path().join("m.jsonl")).unwrap();
    let mut on_disk: Vec<sfb_core::metrics::ClockRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    s.output.metrics = None;
    s.output.keep_records = true;
    let mut kept = run(&s, None).unwrap().records;
    let key = |r: &sfb_core::metrics::ClockRecord| (r.peer, r.clock, r.objective.is_some());
    on_disk.sort_by_key(key);
    kept.sort_by_key(key);
    assert_eq!(on_disk.len(), 3 * (6 + 1));
    assert_eq!(
        on_disk.iter().map(key).collect::<Vec<_>>(),
        kept.iter().map(key).collect::<Vec<_>>()
    );
    // The same bytes, up to the frames' varint of the sender's mean iteration time (a
    // measured duration: one or two bytes, whichever side of 128 µs it falls).
    for (a, b) in on_disk.iter().zip(&kept) {
        let frames = 2 * a.clock.max(1);
        assert!(
            a.bytes_sent.abs_diff(b.bytes_sent) <= 4 * frames,
            "{} vs {}",
            a.bytes_sent,
            b.bytes_sent
        );
    }
}

#[test]
fn partial_broadcast_is_one_more_call_and_replicas_drift() {
    let s = spec("classes=5,features=12,samples=400", 10, 4);
    let problem = s.data.load(&s.model, 1).unwrap();
    let run = Cluster::builder()
        .peers(5)
        .spec(s.model.spec())
        .data(problem)
        .clocks(10)
        .batch(4)
        .out_degree(2)
        .run_mem()
        .unwrap();
    for p in &run.peers {
        assert_eq!(p.engine.config().out_neighbors.len(), 2);
    }
    let arcs_in: usize = run
        .peers
        .iter()
        .map(|p| p.engine.config().in_neighbors.len())
        .sum();
    assert_eq!(arcs_in, 5 * 2);
    let s = run.summary();
    assert_eq!(s.out_degree, 2);
    assert!(s.max_replica_divergence.unwrap() > 0.0);
}

#[test]
fn model_extras_are_averaged_into_the_summary() {
    let mut s = spec("classes=4,features=8,samples=300", 4, 4);
    s.model = sfb_harness::ModelChoice::L2mlr { lambda: 1e-2 };
    let out = run(&s, None).unwrap();
    assert!(out.summary.extra.contains_key("duality_gap"));
}

#[test]
fn the_seed_scheme_is_the_documented_one() {
    assert_eq!(peer_seed(1, 0), 1_000_003);
    assert_eq!(peer_seed(2, 3), 2_000_009);
    assert_eq!(peer_seed(u64::MAX, 1), u64::MAX.wrapping_mul(1_000_003) + 1);
    // The builder's shards are sfb_core::shard_indices with that seed.
    let data: Vec<u32> = (0..10).collect();
    let sh = sfb_harness::shard(&data, 3, 1, 5);
    assert_eq!(sh.samples(), &[1, 4, 7]);
}

#[test]
fn builder_errors_are_typed() {
    // Batches of 1: these samples are fewer than the default batch.
    let b = || Cluster::builder().peers(4).batch(1).model(|_| Zero);
    assert!(matches!(
        b().data(vec![1.0; 8]).run_mem(),
        Err(Error::MissingInitialW)
    ));
    assert!(matches!(
        b().init_w(Array2::zeros((1, 1))).run_mem(),
        Err(Error::MissingData)
    ));
    assert!(matches!(
        b().init_w(Array2::zeros((1, 1)))
            .data(vec![1.0; 3])
            .run_mem(),
        Err(Error::EmptyShard {
            peer: 3,
            samples: 3,
            peers: 4
        })
    ));
    assert!(matches!(
        b().init_w(Array2::zeros((1, 1)))
            .data(vec![1.0; 8])
            .out_lists(vec![vec![1], vec![0]])
            .run_mem(),
        Err(Error::TopologyPeers { peers: 4, got: 2 })
    ));
    assert!(matches!(
        b().init_w(Array2::zeros((1, 1)))
            .data(vec![1.0; 8])
            .out_degree(4)
            .run_mem(),
        Err(Error::OutDegree { peers: 4, got: 4 })
    ));
    assert!(matches!(
        b().init_w(Array2::zeros((1, 1)))
            .data(vec![1.0; 8])
            .batch(9)
            .run_mem(),
        Err(Error::Models(sfb_models::Error::BatchTooLarge {
            batch: 9,
            samples: 8
        }))
    ));
    assert!(matches!(
        b().init_w(Array2::zeros((1, 1)))
            .data(vec![1.0; 8])
            .lr(0.0)
            .run_mem(),
        Err(Error::OutOfRange {
            field: "train.lr",
            ..
        })
    ));
    let s = RunSpec {
        transport: sfb_harness::Transport::Libp2p,
        ..RunSpec::default()
    };
    // libp2p runs through the launcher: a missing executable is its error, not a panic.
    let r = sfb_harness::launch::Launcher::new("/nonexistent/sfb").run(&s);
    assert!(matches!(&r, Err(Error::Launch(_))), "{:?}", r.err());
}

/// The builder's settings are a `RunSpec`: its setters write the spec's fields, a spec
/// read back gives the same builder, and a model of the program's own is refused for what
/// `RunSpec::validate` refuses, with the same error as the spec.
#[test]
fn the_builder_is_a_spec_and_every_model_gets_its_checks() {
    use sfb_harness::{CompressSpec, PeerLossSpec, TopologyMethod};
    let b = Cluster::builder()
        .peers(6)
        .out_degree(2)
        .topology_method(TopologyMethod::Kautz)
        .clocks(50)
        .batch(4)
        .lr(0.1)
        .seed(9)
        .consistency(sfb_core::Consistency::Ssp { staleness: 2 })
        .on_peer_loss(PeerLossSpec::ContinueAlone)
        .compress(3)
        .checkpoints("ck", 5, 3)
        .resume(Some(10));
    let got = b.to_spec().clone();
    let mut want = RunSpec {
        peers: 6,
        ..RunSpec::default()
    };
    want.topology.out_degree = Some(2);
    want.topology.method = TopologyMethod::Kautz;
    (
        want.train.clocks,
        want.train.batch,
        want.train.lr,
        want.train.seed,
    ) = (50, 4, Some(0.1), 9);
    want.train.consistency = sfb_harness::ConsistencySpec::Ssp { staleness: 2 };
    want.fault.on_peer_loss = Some(PeerLossSpec::ContinueAlone);
    want.net.compress = Some(CompressSpec { rank: 3 });
    want.fault.checkpoint_dir = Some("ck".into());
    (want.fault.checkpoint_every, want.fault.checkpoint_keep) = (5, 3);
    (want.fault.resume, want.fault.resume_at) = (true, Some(10));
    // In memory a builder keeps every record unless told otherwise.
    want.output.keep_records = true;
    assert_eq!(got, want);
    // Back through `with_spec`: the same spec.
    assert_eq!(Cluster::builder().with_spec(&want).to_spec(), &want);

    // Settings `sfb run` refuses are refused for a model of the program's own too, before
    // anything runs, with the spec's own error.
    let user = |f: &dyn Fn(RunSpec) -> RunSpec| {
        let spec = f(RunSpec {
            peers: 4,
            ..RunSpec::default()
        });
        let from_spec = spec.validate().unwrap_err().to_string();
        let built = Cluster::builder()
            .with_spec(&spec)
            .model(|_| Zero)
            .init_w(Array2::zeros((1, 1)))
            .data(vec![1.0; 64])
            .run_mem()
            .err()
            .map(|e| e.to_string());
        assert_eq!(built.as_deref(), Some(from_spec.as_str()));
        from_spec
    };
    let straggler = user(&|mut s| {
        s.train.straggler = Some(StragglerSpec::Peer {
            peer: 7,
            delay_ms: 1,
        });
        s
    });
    assert!(straggler.contains("train.straggler"), "{straggler}");
    let limit = user(&|mut s| {
        s.topology.time_limit_s = f64::NAN;
        s
    });
    assert!(limit.contains("topology.time_limit_s"), "{limit}");
    let dir = std::env::temp_dir().join(format!("sfb-refused-ck-{}", std::process::id()));
    let relay = user(&|mut s| {
        s.net.relay = true;
        s.fault.rejoin = true;
        s.fault.checkpoint_dir = Some(dir.clone());
        s
    });
    assert!(relay.contains("rejoin"), "{relay}");
    assert!(
        !dir.exists(),
        "a refused run wrote its checkpoint directory"
    );
    // And through the setters, not only a spec.
    let e = Cluster::builder()
        .peers(4)
        .straggler(StragglerSpec::Peer {
            peer: 4,
            delay_ms: 1,
        })
        .model(|_| Zero)
        .init_w(Array2::zeros((1, 1)))
        .data(vec![1.0; 64])
        .run_mem()
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                field: "train.straggler",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_straggler_slows_only_its_peer() {
    let mut s = spec("classes=4,features=8,samples=200", 3, 4);
    s.train.straggler = Some(StragglerSpec::Peer {
        peer: 1,
        delay_ms: 20,
    });
    let problem = s.data.load(&s.model, 1).unwrap();
    let run = Cluster::builder()
        .spec(s.model.spec())
        .data(problem)
        .clocks(3)
        .batch(4)
        .straggler(s.train.straggler.unwrap())
        .timeout(Duration::from_secs(60))
        .run_mem()
        .unwrap();
    let compute: Vec<f64> = run
        .peers
        .iter()
        .map(|p| p.engine.metrics().compute_s)
        .collect();
    assert!(compute[1] >= 0.06, "{compute:?}");
    assert!(
        compute[0] < compute[1] && compute[2] < compute[1],
        "{compute:?}"
    );
}

/// The figure for the FMS note: server bytes per clock against 2·P·J·D·4 (+ factor
/// bytes). `SFB_FMS_MEASURE=J,D,K,P,clocks` overrides the shape.
/// Run: `cargo test -p sfb-harness --test it -- --ignored --nocapture measure`.
#[test]
#[ignore = "measurement; prints figures"]
fn measure_server_bytes_per_clock() {
    let shape = std::env::var("SFB_FMS_MEASURE").unwrap_or_else(|_| "1024,1024,16,4,5".into());
    let v: Vec<usize> = shape.split(',').map(|x| x.parse().unwrap()).collect();
    let (j, d, k, p, clocks) = (v[0], v[1], v[2], v[3], v[4] as u64);
    let mut s = spec(
        &format!("classes={j},features={d},samples={},density=0.1", 8 * k * p),
        clocks,
        k,
    );
    s.peers = p;
    s.net.timeout_s = 600.0;
    for push in [Push::Factors, Push::Dense] {
        let out = run(
            &RunSpec {
                backend: Backend::Fms,
                fms_push: push,
                ..s.clone()
            },
            None,
        )
        .unwrap();
        let (sent, received) = server_bytes(&out.records);
        let jd4 = (j * d * 4) as f64;
        let c = clocks as f64;
        println!(
            "FMS {push:?} push, P={p} J={j} D={d} K={k}, {clocks} clocks: server sent {:.0} B/clock \
             (P·J·D·4 = {:.0}), received {:.0} B/clock; server in+out {:.0} B/clock vs \
             2·P·J·D·4 = {:.0}; cluster bytes_per_clock {:.0}; wall {:.2}s",
            sent as f64 / c,
            p as f64 * jd4,
            received as f64 / c,
            (sent + received) as f64 / c,
            2.0 * p as f64 * jd4,
            out.summary.bytes_per_clock,
            out.summary.wall_s,
        );
    }
    let out = run(&s, None).unwrap();
    println!(
        "SFB full broadcast, same run: cluster bytes_per_clock {:.0} (P·(P−1)·K·(J+D)·4 = {:.0}); wall {:.2}s",
        out.summary.bytes_per_clock,
        (p * (p - 1) * k * (j + d) * 4) as f64,
        out.summary.wall_s
    );
}

/// `--model l2mlr --optimizer saga`: SAGA on the primal over W (`J × D`, not SDCA's Z),
/// with λ and `n` set by the builder; replicas identical under BSP, the primal decreasing.
/// `saga` is refused for models it is not implemented for and with dense FMS push.
#[test]
fn l2mlr_with_saga_trains_the_primal_on_w() {
    let mut s = spec("classes=4,features=8,samples=300", 30, 4);
    s.peers = 3;
    s.model = sfb_harness::ModelChoice::L2mlr { lambda: 1e-2 };
    s.train.optimizer = Some(sfb_harness::MethodSpec(sfb_core::Method::Saga));
    s.train.lr = Some(0.2);
    s.train.eval_every = 10;
    s.output.keep_records = true;
    s.validate().unwrap();
    let mut b = Cluster::from_spec(&s).unwrap();
    let e = b.build_peer(0).unwrap();
    assert_eq!(e.replica().dim(), (4, 8 + 1)); // + the intercept column
    let o = &e.config().optimizer;
    assert_eq!(
        (o.method, o.saga_samples, o.l2),
        (sfb_core::Method::Saga, 300, 1e-2)
    );
    let out = run(&s, None).unwrap();
    let sums = &out.summary.replica_checksums;
    assert!(sums.iter().all(|c| c == &sums[0]), "{sums:?}");
    assert_eq!(out.summary.model, "l2mlr");
    let primal: Vec<f64> = out
        .records
        .iter()
        .filter(|r| r.peer == 0)
        .filter_map(|r| r.objective)
        .collect();
    assert!(
        primal.len() >= 3 && primal.last() < primal.first(),
        "{primal:?}"
    );
    assert!(out.summary.extra.contains_key("primal_objective"));

    let mut bad = s.clone();
    bad.model = sfb_harness::ModelChoice::Dml {
        latent: 2,
        margin: 1.0,
        candidates: 32,
    };
    assert!(matches!(bad.validate(), Err(Error::Requires { .. })));
    let mut bad = s.clone();
    bad.backend = Backend::Fms;
    bad.fms_push = Push::Dense;
    assert!(matches!(bad.validate(), Err(Error::Requires { .. })));
    bad.fms_push = Push::Factors;
    assert!(bad.validate().is_ok());
}

/// Least squares `½‖W x − y‖²` with `x` of norm ~20: plain SGD at its default step diverges
/// within a few clocks, and the error says which step it was and how to change it.
struct LeastSquares;

impl sfb_core::Model for LeastSquares {
    type Sample = (Vec<f32>, Vec<f32>);
    fn compute_sv(
        &mut self,
        w: ndarray::ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut sfb_core::SvList,
    ) -> Result<(), sfb_core::ModelError> {
        for (x, y) in batch {
            let u: Vec<f32> = w
                .rows()
                .into_iter()
                .zip(y)
                .map(|(row, yj)| row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>() - yj)
                .collect();
            sv.push_dense(&u, x)?;
        }
        Ok(())
    }
}

fn scaled_least_squares() -> Vec<(Vec<f32>, Vec<f32>)> {
    (0..64)
        .map(|i| {
            let x: Vec<f32> = (0..8)
                .map(|k| (((i * 7 + k * 3) % 11) as f32 - 5.0) * 2.0)
                .collect();
            let y = vec![x.iter().sum::<f32>(), x[0] - x[1]];
            (x, y)
        })
        .collect()
}

#[test]
fn a_diverging_custom_model_is_told_its_step_and_how_to_change_it() {
    let data = scaled_least_squares();
    let e = Cluster::builder()
        .peers(2)
        .model(|_| LeastSquares)
        .init_w(Array2::zeros((2, 8)))
        .data(data)
        .clocks(200)
        .optimizer(sfb_core::Optimizer::new(sfb_core::Method::Sgd))
        .run_mem()
        .unwrap_err()
        .to_string();
    eprintln!("{e}");
    assert!(e.contains("non-finite value in u"), "{e}");
    assert!(
        e.contains("the model diverged; its step was sgd at lr 0.5") && e.contains("--lr"),
        "{e}"
    );
}

/// The same data with a custom model's default step (the factored adaptive step at
/// `5 / mean ‖v‖₁`, measured from the model's factors): it trains, and reaches the exact
/// fit's neighbourhood.
#[test]
fn a_custom_model_s_default_step_comes_from_its_factors_and_trains() {
    let run = Cluster::builder()
        .peers(2)
        .model(|_| LeastSquares)
        .init_w(Array2::zeros((2, 8)))
        .data(scaled_least_squares())
        .clocks(400);
    let (opt, lr) = run.resolved_optimizer();
    assert_eq!(opt.method, sfb_core::Method::Factored);
    // Mean ‖x‖₁ of the 64 samples: 5 / that, to 3 significant digits.
    let l1 = scaled_least_squares()
        .iter()
        .map(|(x, _)| x.iter().map(|v| f64::from(v.abs())).sum::<f64>())
        .sum::<f64>()
        / 64.0;
    assert_eq!(lr, format!("{:.2e}", 5.0 / l1).parse::<f32>().unwrap());
    let done = run.run_mem().unwrap();
    assert_eq!(done.info.optimizer, "factored, warm-up 10");
    // W* = [[1, …, 1], [1, −1, 0, …]]: the residual error of every replica is small.
    let truth = ndarray::array![
        [1.0f32, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        [1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    ];
    for p in &done.peers {
        let err = (&p.engine.replica().w() - &truth).mapv(f32::abs).sum();
        assert!(err < 0.05, "Σ|W − W*| = {err}");
    }
}

/// Data loaded per peer (`data_per_peer`, what a node on its own machine reads): with
/// `data`'s rule (sample `t` to peer `t mod P`) the run is bitwise the one on the whole
/// set; a loader's error names the peer; a lost peer's part cannot be taken over.
#[test]
fn data_loaded_per_peer_runs_bitwise_as_the_whole_set() {
    let all = scaled_least_squares();
    let run = || {
        Cluster::builder()
            .peers(4)
            .model(|_| LeastSquares)
            .init_w(Array2::zeros((2, 8)))
            .clocks(40)
            .lr(0.05)
    };
    let whole = run().data(all.clone()).run_mem().unwrap().summary();
    let loaded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = std::sync::Arc::clone(&loaded);
    let parts = run()
        .data_per_peer(move |p| {
            log.lock().unwrap().push(p.id.index());
            let mine = all.iter().skip(p.id.index()).step_by(p.peers);
            Ok(mine.cloned().collect())
        })
        .run_mem()
        .unwrap()
        .summary();
    assert_eq!(parts.replica_checksums, whole.replica_checksums);
    // Each peer's part was loaded for that peer; peer 0's twice, the first time for the
    // up-front check of its first mini-batch (the step size is set: no probe for it).
    let mut ids = loaded.lock().unwrap().clone();
    ids.sort_unstable();
    assert_eq!(ids, [0, 0, 1, 2, 3]);
    // Without a step size every node probes peer 0's part for the default one.
    let (_, lr) = Cluster::builder()
        .peers(4)
        .model(|_| LeastSquares)
        .init_w(Array2::zeros((2, 8)))
        .data_per_peer(|_| Ok(scaled_least_squares()))
        .resolved_optimizer();
    assert!(lr > 0.0 && lr.is_finite(), "{lr}");
    let e = run()
        .data_per_peer(|p| match p.id.index() {
            2 => Err("no such file: part-2.csv".into()),
            _ => Ok(scaled_least_squares()),
        })
        .run_mem()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("loading peer 2's data: no such file: part-2.csv"),
        "{e}"
    );
    let e = run()
        .data_per_peer(|_| Ok(scaled_least_squares()))
        .on_peer_loss(sfb_harness::PeerLossSpec::Continue)
        .lost_shards(sfb_harness::LostShardsSpec::Takeover)
        .run_mem()
        .unwrap_err()
        .to_string();
    assert!(e.contains("loaded per peer"), "{e}");
}

/// Least squares whose peer 2 panics in its 10th `compute_sv`: a crashed peer thread.
struct PanicsAtTen {
    inner: LeastSquares,
    peer: usize,
    calls: u32,
}

impl sfb_core::Model for PanicsAtTen {
    type Sample = (Vec<f32>, Vec<f32>);
    fn compute_sv(
        &mut self,
        w: ndarray::ArrayView2<'_, f32>,
        batch: &[&Self::Sample],
        sv: &mut sfb_core::SvList,
    ) -> Result<(), sfb_core::ModelError> {
        self.calls += 1;
        assert!(!(self.peer == 2 && self.calls == 10), "injected crash");
        self.inner.compute_sv(w, batch, sv)
    }
}

/// Issue 31: the in-memory transport survives a peer thread's loss. Under SSP with the
/// continue policy the others finish without the crashed peer and report it lost; under
/// BSP's fail policy the run fails naming the panic (not a peer it stopped).
#[test]
fn an_in_memory_run_survives_a_peer_thread_that_panics() {
    let run = |consistency: sfb_core::Consistency| {
        Cluster::builder()
            .peers(4)
            .model(|p: &sfb_harness::Peer| PanicsAtTen {
                inner: LeastSquares,
                peer: p.id.index(),
                calls: 0,
            })
            .init_w(Array2::zeros((2, 8)))
            .data(scaled_least_squares())
            .clocks(60)
            .consistency(consistency)
    };
    let done = run(sfb_core::Consistency::Ssp { staleness: 2 })
        .on_peer_loss(sfb_harness::PeerLossSpec::Continue)
        .run_mem()
        .unwrap();
    let ids: Vec<usize> = done
        .peers
        .iter()
        .map(|p| p.engine.config().id.index())
        .collect();
    assert_eq!(ids, [0, 1, 3]);
    for p in &done.peers {
        assert_eq!(p.engine.clock(), 60);
        let lost: Vec<u32> = p.engine.metrics().lost_peers.iter().map(|l| l.0).collect();
        assert_eq!(lost, [2], "{:?}", p.engine.config().id);
    }
    let s = done.summary();
    assert_eq!(s.replica_checksums.len(), 3, "{s:?}");
    assert_eq!(s.lost_peers.len(), 1, "{s:?}");
    assert_eq!(s.lost_peers[0].peer, 2, "{s:?}");
    let e = run(sfb_core::Consistency::Bsp)
        .run_mem()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("p2's thread panicked") && e.contains("injected crash"),
        "{e}"
    );
}

/// A user's model on the simulator through the same builder lines as in memory, SFB and
/// FMS: under BSP the replicas are bitwise those of the in-memory run; the count model
/// prices it as a linear model, calibration measures its `compute_sv` here.
#[test]
fn a_custom_model_runs_on_the_simulator_bitwise_as_in_memory() {
    use sfb_harness::sim::{CostModel, SimOptions};
    let run = || {
        Cluster::builder()
            .peers(4)
            .model(|_| LeastSquares)
            .init_w(Array2::zeros((2, 8)))
            .data(scaled_least_squares())
            .clocks(60)
    };
    let mem = run().run_mem().unwrap().into_outcome();
    let sim = run().run_sim(&SimOptions::default(), None, None).unwrap();
    assert_eq!(sim.summary.replica_checksums, mem.summary.replica_checksums);
    assert_eq!(sim.summary.clocks, 60);
    let report = sim.summary.sim.as_ref().expect("the sim block");
    assert!(report.simulated_s > 0.0 && !report.calibrated);
    // Counted as a linear model's forward pass: 2·J·D + 20·J flops and 4·(J + D) bytes.
    let counted = report.costs["compute_per_sample"];
    let expect = (2.0 * 2.0 * 8.0 + 20.0 * 2.0) / report.flops + 4.0 * 10.0 / report.mem_bw;
    assert!((counted - expect).abs() < 1e-15, "{counted} vs {expect}");
    let calibrate = SimOptions {
        costs: CostModel::Calibrate,
        ..SimOptions::default()
    };
    let cal = run().run_sim(&calibrate, None, None).unwrap();
    assert_eq!(cal.summary.replica_checksums, mem.summary.replica_checksums);
    let measured = cal.summary.sim.as_ref().unwrap().costs["compute_per_sample"];
    assert!(measured > 0.0 && measured != counted, "{measured}");
    // FMS alike: the server's and clients' W equal the in-memory FMS run's.
    let fms_mem = run().run_fms_mem(Push::Factors).unwrap().into_outcome();
    let fms_sim = run()
        .run_sim(&SimOptions::default(), None, Some(Push::Factors))
        .unwrap();
    assert_eq!(
        fms_sim.summary.replica_checksums,
        fms_mem.summary.replica_checksums
    );
    assert_eq!(fms_sim.summary.backend, "fms");
}

/// A user's model as 4 libp2p nodes of a cluster file, each driven by `run_node` on its
/// own thread (as each machine's program would): under BSP their replicas are bitwise the
/// in-memory run's on the file's topology, full broadcast and gossip alike.
#[test]
fn a_custom_model_runs_as_libp2p_nodes_of_a_cluster_file_bitwise_as_in_memory() {
    use std::sync::mpsc;
    let dir = std::env::temp_dir().join(format!("sfb-harness-run-node-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = || {
        Cluster::builder()
            .model(|_| LeastSquares)
            .init_w(Array2::zeros((2, 8)))
            .data(scaled_least_squares())
            .clocks(40)
    };
    for (name, topology) in [
        ("full", sfb_topology::full(4).unwrap()),
        (
            "ring2",
            sfb_topology::Topology::new(vec![vec![1, 2], vec![2, 3], vec![3, 0], vec![0, 1]])
                .unwrap(),
        ),
    ] {
        let path = dir.join(format!("{name}.toml"));
        sfb_net::cluster::Cluster::init(
            &path,
            &topology,
            &["127.0.0.1".to_string()],
            sfb_net::cluster::Ports::Free,
        )
        .unwrap();
        let (tx, rx) = mpsc::channel();
        for id in 0..4 {
            let (tx, path) = (tx.clone(), path.clone());
            std::thread::spawn(move || {
                let _ = tx.send((id, run().run_node(&path, id).map_err(|e| e.to_string())));
            });
        }
        let mut checksums = vec![String::new(); 4];
        for _ in 0..4 {
            let (id, out) = rx
                .recv_timeout(Duration::from_secs(120))
                .expect("a node hung");
            let out = out.unwrap_or_else(|e| panic!("{name}: node {id}: {e}"));
            assert_eq!(out.summary.transport, "libp2p");
            assert_eq!(out.summary.clocks, 40);
            assert_eq!(out.summary.replica_checksums.len(), 1);
            checksums[id] = out.summary.replica_checksums[0].clone();
            eprintln!(
                "{name}: node {id}: {} bytes sent, {:.3} s",
                out.summary.bytes_sent, out.summary.wall_s
            );
        }
        let out: Vec<Vec<usize>> = (0..4).map(|i| topology.out(i).to_vec()).collect();
        let mem = run().peers(4).out_lists(out).run_mem().unwrap().summary();
        assert_eq!(checksums, mem.replica_checksums, "{name}");
    }
    // An id the file does not have is refused before anything starts.
    let e = run()
        .run_node(&dir.join("full.toml"), 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("id"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Nodes of a cluster file whose data is loaded per peer: each node reads only its own
/// part (none loads another's), and the replicas are bitwise the in-memory run's on the
/// whole set.
#[test]
fn libp2p_nodes_with_data_loaded_per_peer_read_only_their_own_part() {
    use std::sync::mpsc;
    let dir = std::env::temp_dir().join(format!("sfb-harness-per-peer-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    let topology = sfb_topology::full(4).unwrap();
    let ports = sfb_net::cluster::Ports::Free;
    sfb_net::cluster::Cluster::init(&path, &topology, &["127.0.0.1".to_string()], ports).unwrap();
    let run = || {
        Cluster::builder()
            .model(|_| LeastSquares)
            .init_w(Array2::zeros((2, 8)))
            .clocks(30)
            .lr(0.05)
    };
    let (tx, rx) = mpsc::channel();
    for id in 0..4 {
        let (tx, path) = (tx.clone(), path.clone());
        std::thread::spawn(move || {
            let read = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let log = std::sync::Arc::clone(&read);
            let out = run()
                .data_per_peer(move |p| {
                    log.lock().unwrap().push(p.id.index());
                    let all = scaled_least_squares();
                    Ok(all
                        .into_iter()
                        .skip(p.id.index())
                        .step_by(p.peers)
                        .collect())
                })
                .run_node(&path, id)
                .map_err(|e| e.to_string());
            let read = read.lock().unwrap().clone();
            let _ = tx.send((id, out, read));
        });
    }
    let mut checksums = vec![String::new(); 4];
    for _ in 0..4 {
        let (id, out, read) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a node hung");
        let out = out.unwrap_or_else(|e| panic!("node {id}: {e}"));
        assert!(
            !read.is_empty() && read.iter().all(|&r| r == id),
            "node {id} read {read:?}"
        );
        checksums[id] = out.summary.replica_checksums[0].clone();
    }
    let mem = run()
        .peers(4)
        .data(scaled_least_squares())
        .run_mem()
        .unwrap()
        .summary();
    assert_eq!(checksums, mem.replica_checksums);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A user's model is refused before its first clock, with a built-in model's messages, for
/// a batch larger than its data, a starting W its factors do not fit (or that is empty),
/// a `compute_sv` that panics on it, and FMS dense push with the factored step; no peer
/// panics.
#[test]
fn a_custom_model_is_refused_before_its_first_clock_as_a_built_in_one() {
    let run = || {
        Cluster::builder()
            .peers(2)
            .model(|_| LeastSquares)
            .init_w(Array2::zeros((2, 8)))
            .data(scaled_least_squares())
            .clocks(10)
    };
    let err = |r: sfb_harness::Result<()>| r.unwrap_err().to_string();
    // The built-in model's message for the same mistake.
    let mut s = spec("classes=4,features=10,samples=64", 10, 1000);
    s.data = DataSource::Synthetic("classes=4,features=10,samples=64".into());
    let builtin = run_spec_err(&s);
    let custom = err(run().batch(1000).run_mem().map(drop));
    assert!(
        builtin.starts_with("batch 1000 is larger than the whole training set ("),
        "{builtin}"
    );
    assert_eq!(
        custom,
        builtin
            .replace("(48 samples)", "(64 samples)")
            .replace("at most 48", "at most 64"),
        "{custom}"
    );
    let e = err(run().init_w(Array2::zeros((0, 8))).run_mem().map(drop));
    assert!(e.contains("the starting W is 0 × 8"), "{e}");
    // v = x has 8 values; W has 7 columns.
    let e = err(run().init_w(Array2::zeros((2, 7))).run_mem().map(drop));
    assert!(e.starts_with("model failed at clock 0:"), "{e}");
    let e = err(run()
        .init_w(Array2::zeros((2, 7)))
        .run_sim(&Default::default(), None, None)
        .map(drop));
    assert!(e.starts_with("model failed at clock 0:"), "{e}");
    struct Panics;
    impl sfb_core::Model for Panics {
        type Sample = (Vec<f32>, Vec<f32>);
        fn compute_sv(
            &mut self,
            w: ndarray::ArrayView2<'_, f32>,
            batch: &[&Self::Sample],
            _: &mut sfb_core::SvList,
        ) -> Result<(), sfb_core::ModelError> {
            // ndarray panics on a shape mismatch.
            let _ = w.dot(&ndarray::ArrayView1::from(&batch[0].0));
            Ok(())
        }
    }
    let e = err(Cluster::builder()
        .peers(2)
        .model(|_| Panics)
        .init_w(Array2::zeros((2, 7)))
        .data(scaled_least_squares())
        .run_mem()
        .map(drop));
    assert!(
        e.contains("compute_sv panicked on its first mini-batch at the starting W (2 × 7)"),
        "{e}"
    );
    // FMS with dense push and the factored step: the built-in's refusal, word for word.
    let mut s = spec("classes=4,features=10,samples=64", 10, 16);
    s.backend = sfb_harness::Backend::Fms;
    s.fms_push = Push::Dense;
    let builtin = run_spec_err(&s);
    let custom = err(run().run_fms_mem(Push::Dense).map(drop));
    assert!(
        builtin.contains("optimizer factored: its statistics are built from the factors"),
        "{builtin}"
    );
    assert_eq!(custom, builtin);
}

fn run_spec_err(s: &RunSpec) -> String {
    match run(s, None) {
        Ok(_) => "ok".into(),
        Err(e) => e.to_string(),
    }
}
