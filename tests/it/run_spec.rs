//! `sfb run`'s command line and the `RunSpec` it describes: `--print-spec` shows the spec
//! a command line means, `--spec` runs one, and the experiment harness's arms render
//! command lines that mean exactly their specs.

use std::process::Command;

use sfb::harness::{
    Backend, ConsistencySpec, DataSource, ModelChoice, NetOptions, OutputOptions, Push, RunSpec,
    StragglerSpec, TopologyOptions, TrainOptions, Transport,
};
use sfb::lab::experiment::{Demo, mlr, run_args};

/// The spec `sfb run ARGS` describes, as the binary prints it.
fn spec(args: &[&str]) -> RunSpec {
    let out = Command::new(env!("CARGO_BIN_EXE_sfb"))
        .arg("run")
        .args(args)
        .arg("--print-spec")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    RunSpec::from_json(&text).unwrap()
}

#[test]
fn the_command_line_defaults_are_the_specs() {
    assert_eq!(spec(&[]), RunSpec::default());
}

#[test]
fn every_option_lands_in_the_spec() {
    let s = spec(&[
        "--peers",
        "6",
        "--out-degree",
        "2",
        "--backend",
        "fms",
        "--transport",
        "libp2p",
        "--timeout",
        "7",
        "--fms-push",
        "dense",
        "--topology-time-limit",
        "2",
        "--bandwidth",
        "8mbit",
        "--burst",
        "100",
        "--peer-timeout",
        "3",
        "--startup-timeout",
        "4",
        "--wire",
        "f16",
        "--model",
        "sc",
        "--lambda",
        "0.5",
        "--dict-size",
        "9",
        "--sweeps",
        "3",
        "--decay",
        "2",
        "--batch",
        "5",
        "--lr",
        "0.25",
        "--optimizer",
        "momentum",
        "--lr-schedule",
        "step:5:0.5",
        "--warmup",
        "3",
        "--clocks",
        "11",
        "--staleness",
        "2",
        "--seed",
        "9",
        "--init-std",
        "0.1",
        "--eval-every",
        "4",
        "--straggler",
        "rotate:5",
        "--max-drift",
        "12",
        "--scale",
        "maxabs",
        "--no-intercept",
        "--until",
        "plateau:3:0.01",
        "--until",
        "objective<=0.5",
        "--metrics",
        "m.jsonl",
        "--summary",
        "s.json",
        "--save-model",
        "m.sfbm",
        "--checkpoint-dir",
        "ck",
        "--checkpoint-every",
        "6",
        "--checkpoint-keep",
        "3",
        "--resume",
        "--on-peer-loss",
        "continue",
        "--lost-shards",
        "drop",
        "--relay",
        "--relay-compress",
        "rank:3",
        "--aggregate",
        "rank:5",
        "--partial",
        "paper",
        "--gossip-rank",
        "2",
        "--gossip-step",
        "0.25",
        "--gossip-own",
        "0.4",
        "--gossip-gain",
        "0.5",
        "--send-parts",
        "3",
    ]);
    let want = RunSpec {
        peers: 6,
        backend: Backend::Fms,
        transport: Transport::Libp2p,
        model: ModelChoice::Sc {
            atoms: 9,
            lambda: 0.5,
            sweeps: 3,
            decay: 2.0,
        },
        custom_model: None,
        data: RunSpec::default().data,
        train: TrainOptions {
            batch: 5,
            lr: Some(0.25),
            optimizer: Some(sfb::harness::MethodSpec(sfb::core::Method::Momentum)),
            lr_schedule: "step:5:0.5".parse().unwrap(),
            warmup: Some(3),
            clocks: 11,
            consistency: ConsistencySpec::Ssp { staleness: 2 },
            seed: 9,
            init_std: 0.1,
            eval_every: 4,
            straggler: Some(StragglerSpec::Rotating { delay_ms: 5 }),
            max_drift: 12,
            scale: sfb::harness::ScaleSpec(sfb::models::Scale::MaxAbs),
            intercept: false,
            until: vec![
                "plateau:3:0.01".parse().unwrap(),
                "objective<=0.5".parse().unwrap(),
            ],
        },
        topology: TopologyOptions {
            out_degree: Some(2),
            time_limit_s: 2.0,
            ..TopologyOptions::default()
        },
        fms_push: Push::Dense,
        fms_sync: sfb::harness::SyncSpec::Eager,
        net: NetOptions {
            timeout_s: 7.0,
            peer_timeout_s: 3.0,
            startup_timeout_s: 4.0,
            bandwidth: Some(sfb::net::bandwidth::Rate(1e6)),
            burst: 100,
            wire: sfb::core::wire::Dtype::F16,
            netns: false,
            netns_slow: Vec::new(),
            compress: None,
            prioritize: None,
            relay: true,
            relay_compress: Some("rank:3".parse().unwrap()),
            aggregate: Some("rank:5".parse().unwrap()),
            partial: Some(sfb::harness::PartialSpec::Paper),
            gossip_rank: Some(2),
            tree_rank: None,
            gossip_step: Some(0.25),
            gossip_own: Some(0.4),
            gossip_gain: Some(0.5),
            send_parts: 3,
        },
        output: OutputOptions {
            metrics: Some("m.jsonl".into()),
            summary: Some("s.json".into()),
            keep_records: false,
            save_model: Some("m.sfbm".into()),
        },
        fault: sfb::harness::FaultOptions {
            checkpoint_dir: Some("ck".into()),
            checkpoint_every: 6,
            checkpoint_keep: 3,
            resume: true,
            resume_at: None,
            on_peer_loss: Some(sfb::harness::PeerLossSpec::Continue),
            rejoin: false,
            heal_timeout_s: 600.0,
            lost_shards: Some(sfb::harness::LostShardsSpec::Drop),
            step_bound: Some(sfb::core::bound::DEFAULT_STEP_BOUND),
        },
        sim: sfb::harness::sim::SimOptions::default(),
    };
    assert_eq!(s, want);
    let f = spec(&["--data", "a.svm", "--test-data", "b.svm", "--features", "3"]);
    assert_eq!(
        f.data,
        DataSource::Files {
            train: "a.svm".into(),
            test: Some("b.svm".into()),
            holdout: 0.2,
            features: Some(3),
            stream: false,
        }
    );
    assert_eq!(
        spec(&["--consistency", "throttle:2"]).train.consistency,
        ConsistencySpec::Throttle { min_ready: 2 }
    );
    assert_eq!(
        spec(&["--model", "l2mlr"]).model,
        ModelChoice::L2mlr { lambda: 1e-3 }
    );
}

/// Every arm's command line, given to `sfb run`, means the arm's spec exactly.
#[test]
fn arm_commands_reproduce_their_specs() {
    let demo = |transport| Demo {
        peers: 6,
        out_degree: 2,
        clocks: 40,
        bandwidth: "100mbit".parse().unwrap(),
        transport,
    };
    let mut specs: Vec<_> = [Transport::Mem, Transport::Libp2p]
        .into_iter()
        .flat_map(|t| demo(t).arms().unwrap())
        .map(|a| a.spec)
        .collect();
    let mut s = mlr(64, 96, 500, 50);
    s.transport = Transport::Libp2p;
    s.net.bandwidth = Some("1gbit".parse().unwrap());
    s.net.burst = 1000;
    s.net.netns = true;
    s.net.netns_slow = vec!["0,1@1..2.5:4".parse().unwrap(), "1@3..4:2".parse().unwrap()];
    s.backend = Backend::Fms;
    s.fms_push = Push::Dense;
    s.train.consistency = ConsistencySpec::Ssp { staleness: 2 };
    s.train.straggler = Some("rotate:40".parse().unwrap());
    s.train.init_std = 0.01;
    specs.push(s);
    // What a peer sends: re-compressed, or prioritized under a budget.
    let mut s = mlr(64, 96, 500, 50);
    s.net.compress = Some("rank:3".parse().unwrap());
    specs.push(s.clone());
    s.net.compress = None;
    for p in ["round-robin:25%", "magnitude:6"] {
        s.net.prioritize = Some(p.parse().unwrap());
        specs.push(s.clone());
    }
    // Relay over a partial topology.
    s.net.prioritize = None;
    s.net.relay = true;
    s.topology.out_degree = Some(2);
    specs.push(s.clone());
    s.net.aggregate = Some("rank:16".parse().unwrap());
    specs.push(s.clone());
    s.net.relay_compress = Some("rank:2".parse().unwrap());
    specs.push(s.clone());
    // The gossip mode's settings, flow control, checkpoints and the peer-loss policies.
    let mut s = mlr(64, 96, 500, 50);
    s.topology.out_degree = Some(2);
    s.net.partial = Some(sfb::harness::PartialSpec::Paper);
    s.net.gossip_rank = Some(2);
    s.net.gossip_step = Some(0.125);
    s.net.gossip_own = Some(0.25);
    s.net.gossip_gain = Some(0.5);
    s.train.consistency = ConsistencySpec::Ssp { staleness: 1 };
    s.train.max_drift = 7;
    s.fault.checkpoint_dir = Some("ck".into());
    s.fault.checkpoint_every = 5;
    s.fault.checkpoint_keep = 3;
    s.fault.resume = true;
    s.fault.on_peer_loss = Some(sfb::harness::PeerLossSpec::ContinueAlone);
    s.fault.lost_shards = Some(sfb::harness::LostShardsSpec::Drop);
    s.output.save_model = Some("m.sfbm".into());
    specs.push(s);
    specs.push(RunSpec {
        data: DataSource::Files {
            train: "a b.svm".into(),
            test: Some("t.svm".into()),
            holdout: 0.25,
            features: Some(7),
            stream: false,
        },
        model: ModelChoice::Sc {
            atoms: 9,
            lambda: 0.3,
            sweeps: 4,
            decay: 2.5,
        },
        ..RunSpec::default()
    });
    for want in specs {
        let args = run_args(&want).expect("expressible as flags");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(spec(&args), want, "{args:?}");
    }
}

/// The demo's arms are the runs `sfb demo` always made.
#[test]
fn demo_arms_are_the_documented_runs() {
    let arms = Demo {
        peers: 6,
        out_degree: 2,
        clocks: 40,
        bandwidth: "100mbit".parse().unwrap(),
        transport: Transport::Mem,
    }
    .arms()
    .unwrap();
    let base = "--model mlr --synthetic classes=256,features=1024,samples=24000,test=1000,rank=16,blobs=0.3 --batch 16 --seed 2016 --transport mem --peers 6 --clocks 40 --eval-every 2";
    let want = [
        base.to_string(),
        format!("{base} --out-degree 2"),
        format!("{base} --backend fms"),
    ];
    for (arm, w) in arms.iter().zip(want) {
        let w: Vec<&str> = w.split(' ').collect();
        assert_eq!(arm.spec, spec(&w), "{}", arm.name);
    }
}

/// A spec file is the whole run: it runs as printed, and other options are refused.
#[test]
fn a_spec_file_runs_and_refuses_other_options() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    let mut s = spec(&[
        "--peers",
        "2",
        "--clocks",
        "3",
        "--synthetic",
        "classes=3,features=4,samples=60",
    ]);
    s.output.summary = Some(dir.path().join("s.json"));
    std::fs::write(&file, s.to_json()).unwrap();
    let sfb = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sfb"))
            .args(["run", "--spec", file.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    let ok = sfb(&[]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!(summary["peers"], 2);
    assert_eq!(summary["clocks"], 3);
    let refused = sfb(&["--clocks", "5"]);
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("give no other run option"), "{err}");
}
