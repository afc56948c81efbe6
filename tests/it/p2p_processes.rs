//! Real peer processes over libp2p on loopback (ports chosen by the OS, exchanged at
//! start-up), driven through the `sfb` binary.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{SFB, Started, init, start, tempdir};

/// This binary's group of temporary directories.
const GROUP: &str = "p2p-processes";

fn run_summary(args: &[&str], out: &Path) -> Value {
    let st = Command::new(SFB)
        .arg("run")
        .args(args)
        .arg("--summary")
        .arg(out)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "sfb run {args:?} failed");
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

/// The run of `args` over libp2p and in memory: their summaries.
fn over_libp2p_and_in_memory(args: &[&str], d: &Path) -> (Value, Value) {
    let p2p = run_summary(
        &[args, &["--transport", "libp2p"]].concat(),
        &d.join("p2p.json"),
    );
    let mem = run_summary(
        &[args, &["--transport", "mem"]].concat(),
        &d.join("mem.json"),
    );
    (p2p, mem)
}

/// A 4-peer, 20-clock run small enough for process-level tests.
const SMALL_RUN: [&str; 8] = [
    "--peers",
    "4",
    "--clocks",
    "20",
    "--seed",
    "9",
    "--synthetic",
    "classes=10,features=60,samples=4000",
];

#[test]
fn four_processes_bsp_match_the_in_memory_cluster_bitwise() {
    let d = tempdir(GROUP, "bsp4");
    let (p2p, mem) = over_libp2p_and_in_memory(&SMALL_RUN, &d);
    let sums = p2p["replica_checksums"].as_array().unwrap();
    assert_eq!(sums.len(), 4);
    assert!(
        sums.iter().all(|s| s == &sums[0]),
        "libp2p replicas differ: {sums:?}"
    );
    assert_eq!(
        p2p["replica_checksums"], mem["replica_checksums"],
        "libp2p and in-memory runs differ"
    );
    assert_eq!(p2p["transport"], "libp2p");
    // Bytes per clock per peer: Q·K·(J+D)·4 plus a small header per frame (< 3%).
    let formula = 3.0 * 16.0 * (10.0 + 60.0) * 4.0;
    let got = p2p["bytes_per_clock_per_peer"].as_f64().unwrap();
    assert!(
        got >= formula && got <= formula * 1.03,
        "bytes/clock/peer {got} vs {formula}"
    );
}

/// The tree mode over libp2p: 7 processes in a tree of fan-out 2 (a cluster file with
/// `tree_fanout`; the down messages are the root's, forwarded): replicas bitwise equal to
/// each other and to the in-memory run's.
#[test]
fn a_tree_of_processes_matches_the_in_memory_tree_bitwise() {
    let d = tempdir(GROUP, "tree7");
    let common = [
        &SMALL_RUN[2..],
        &["--peers", "7", "--out-degree", "2", "--partial", "tree"],
    ]
    .concat();
    let (p2p, mem) = over_libp2p_and_in_memory(&common, &d);
    let sums = p2p["replica_checksums"].as_array().unwrap();
    assert_eq!(sums.len(), 7);
    assert!(sums.iter().all(|s| s == &sums[0]), "{sums:?}");
    assert_eq!(p2p["replica_checksums"], mem["replica_checksums"]);
}

#[test]
fn partial_broadcast_trains_into_the_full_broadcast_accuracy_band() {
    let d = tempdir(GROUP, "partial");
    let common = [
        "--transport",
        "libp2p",
        "--peers",
        "6",
        "--staleness",
        "2",
        "--clocks",
        "1000",
        "--lr",
        "0.3",
        "--synthetic",
        "classes=5,features=20,samples=12000,noise=0.2",
        "--seed",
        "4",
    ];
    let full = run_summary(
        &[&common[..], &["--out-degree", "5"]].concat(),
        &d.join("full.json"),
    );
    let part = run_summary(
        &[&common[..], &["--out-degree", "2"]].concat(),
        &d.join("part.json"),
    );
    let (af, ap) = (
        full["test_accuracy"].as_f64().unwrap(),
        part["test_accuracy"].as_f64().unwrap(),
    );
    eprintln!("accuracy: full broadcast {af:.4}, Q=2 {ap:.4}");
    assert!(af > 0.85, "full broadcast did not learn: {af}");
    assert!(
        (af - ap).abs() <= 0.03,
        "Q=2 accuracy {ap:.4} outside the band of full broadcast {af:.4}"
    );
    assert_eq!(part["out_degree"], 2);
    assert!(part["max_staleness"].as_u64().unwrap() <= 2);
    // Q=2 sends 2/5 of full broadcast's factor bytes, and the gossip mode's consensus
    // message of ⌊3K/16⌋ = 3 pairs beside each batch of K = 16: 2/5 × 19/16 = 0.475.
    let ratio =
        part["bytes_per_clock"].as_f64().unwrap() / full["bytes_per_clock"].as_f64().unwrap();
    assert!((ratio - 0.475).abs() < 0.01, "byte ratio {ratio}");
}

/// Starts `p` peers (out-degree `q`, options `extra`) of a fresh cluster file and hands
/// them their addresses: the run begins.
fn start_peers(p: usize, q: usize, extra: &[&str], name: &str) -> Started {
    let d = tempdir(GROUP, name);
    let cluster = init(
        &d,
        &["--peers", &p.to_string(), "--out-degree", &q.to_string()],
    );
    let nodes: Vec<(String, Vec<String>)> = (0..p)
        .map(|i| {
            let mut args = vec!["peer".to_string(), "--id".into(), i.to_string()];
            args.extend(extra.iter().map(|s| s.to_string()));
            (format!("peer {i}"), args)
        })
        .collect();
    let mut started = start(&cluster, &nodes);
    started.exchange();
    started
}

#[test]
fn killing_a_peer_mid_run_stops_the_others_with_a_clear_error() {
    // A slow peer 2 keeps the run going long enough to kill it in the middle.
    let extra = [
        "--clocks",
        "100000",
        "--straggler",
        "2:20",
        "--peer-timeout",
        "5",
        "--synthetic",
        "classes=4,features=10,samples=400",
    ];
    let mut c = start_peers(3, 2, &extra, "kill");
    // Wait until peer 0 has completed a few clocks, then kill peer 2.
    c.wait_clock(0, 5);
    c.children.kill(2);
    // The survivors fail (the first to notice names peer 2; the other may report the first
    // one's exit, a cascade) instead of hanging: 30 s bounds the test, peers use 5 s.
    let mut errors = Vec::new();
    for i in [0, 1] {
        let (status, err) = c
            .children
            .try_wait_one(i, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("peer {i} still running 30 s after peer 2 was killed"));
        assert!(!status.success(), "peer {i} exited successfully");
        let last = err
            .lines()
            .rfind(|l| l.starts_with("error:"))
            .unwrap_or("")
            .to_string();
        eprintln!("peer {i}: {last}");
        assert!(
            ["closed its stream", "broke after", "waited"]
                .iter()
                .any(|k| last.contains(k)),
            "peer {i} did not fail with a clear stream error: {err}"
        );
        errors.push(last);
    }
    assert!(
        errors.iter().any(|e| e.contains("peer 2")),
        "no survivor named peer 2: {errors:?}"
    );
}

#[test]
fn fms_over_libp2p_processes_is_bitwise_identical_to_sfb() {
    let d = tempdir(GROUP, "fms");
    let common = SMALL_RUN;
    let fms = run_summary(
        &[&common[..], &["--transport", "libp2p", "--backend", "fms"]].concat(),
        &d.join("fms.json"),
    );
    let sfb = run_summary(
        &[&common[..], &["--transport", "mem"]].concat(),
        &d.join("sfb.json"),
    );
    assert_eq!(fms["backend"], "fms");
    assert_eq!(
        fms["replica_checksums"], sfb["replica_checksums"],
        "FMS over libp2p differs from SFB"
    );
    // The server pushes the full W (J·D·4 bytes + header) to each of the 4 clients per clock.
    let per_clock = fms["bytes_per_clock"].as_f64().unwrap();
    let w_push = 4.0 * (10.0 * 60.0 * 4.0);
    let factors = 4.0 * 16.0 * (10.0 + 60.0) * 4.0;
    assert!(
        per_clock >= w_push + factors && per_clock <= (w_push + factors) * 1.03,
        "{per_clock}"
    );
}

#[test]
fn f16_wire_halves_the_bytes_and_keeps_replicas_identical() {
    let d = tempdir(GROUP, "f16");
    let common = [
        "--transport",
        "libp2p",
        "--peers",
        "4",
        "--clocks",
        "30",
        "--seed",
        "5",
        "--synthetic",
        "classes=10,features=60,samples=4000",
    ];
    let f32s = run_summary(&common, &d.join("f32.json"));
    let f16s = run_summary(
        &[&common[..], &["--wire", "f16"]].concat(),
        &d.join("f16.json"),
    );
    let sums = f16s["replica_checksums"].as_array().unwrap();
    assert!(
        sums.iter().all(|s| s == &sums[0]),
        "f16 replicas differ: {sums:?}"
    );
    let formula = 3.0 * 16.0 * (10.0 + 60.0) * 2.0;
    let got = f16s["bytes_per_clock_per_peer"].as_f64().unwrap();
    assert!(
        got >= formula && got <= formula * 1.03,
        "f16 bytes/clock/peer {got} vs {formula}"
    );
    // Training is unaffected beyond rounding noise.
    let (a, b) = (
        f32s["objective"].as_f64().unwrap(),
        f16s["objective"].as_f64().unwrap(),
    );
    assert!((a - b).abs() / a < 0.01, "objective f32 {a} vs f16 {b}");
}
