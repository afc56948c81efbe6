//! Real peer processes over libp2p on loopback (ports chosen by the OS, exchanged at
//! start-up), driven through the `sfb` binary.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sfb-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

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
    let d = tempdir("bsp4");
    let common = SMALL_RUN;
    let p2p = run_summary(
        &[&common[..], &["--transport", "libp2p"]].concat(),
        &d.join("p2p.json"),
    );
    let mem = run_summary(
        &[&common[..], &["--transport", "mem"]].concat(),
        &d.join("mem.json"),
    );
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

#[test]
fn partial_broadcast_trains_into_the_full_broadcast_accuracy_band() {
    let d = tempdir("partial");
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
    // Q=2 sends 2/5 of full broadcast's bytes.
    let ratio =
        part["bytes_per_clock"].as_f64().unwrap() / full["bytes_per_clock"].as_f64().unwrap();
    assert!((ratio - 0.4).abs() < 0.01, "byte ratio {ratio}");
}

/// Starts `p` peers of a fresh cluster file with address exchange; returns the children,
/// a receiver of `(peer, stdout line)` and the cluster directory.
fn start_peers(
    p: usize,
    q: usize,
    extra: &[&str],
    name: &str,
) -> (
    Vec<std::process::Child>,
    mpsc::Receiver<(usize, String)>,
    PathBuf,
) {
    let d = tempdir(name);
    let cluster = d.join("cluster.toml");
    let st = Command::new(SFB)
        .args([
            "cluster",
            "init",
            "--peers",
            &p.to_string(),
            "--out-degree",
            &q.to_string(),
            "--base-port",
            "0",
            "-o",
        ])
        .arg(&cluster)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let (tx, rx) = mpsc::channel();
    let mut children = Vec::new();
    for i in 0..p {
        let mut c = Command::new(SFB)
            .args(["peer", "--cluster"])
            .arg(&cluster)
            .args(["--id", &i.to_string(), "--exchange-addrs"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(c.stdout.take().unwrap());
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send((i, line));
            }
        });
        children.push(c);
    }
    let mut addrs = vec![String::new(); p];
    let mut got = 0;
    while got < p {
        let (i, line) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("peers report their addresses");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        if let Some(a) = v["listening"].as_str() {
            addrs[i] = a.to_string();
            got += 1;
        }
    }
    let line = serde_json::json!({ "addrs": addrs }).to_string();
    for c in &mut children {
        let mut stdin = c.stdin.take().unwrap();
        writeln!(stdin, "{line}").unwrap();
    }
    (children, rx, d)
}

fn wait_with_timeout(
    c: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return Some(s);
        }
        if start.elapsed() > limit {
            let _ = c.kill();
            return None;
        }
        // Polling a child's exit status; nothing else to wait on without extra threads.
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let (mut children, rx, _d) = start_peers(3, 2, &extra, "kill");
    // Wait until peer 0 has completed a few clocks, then kill peer 2.
    loop {
        let (i, line) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("progress from peer 0");
        if i == 0 && line == r#"{"clock":5}"# {
            break;
        }
    }
    children[2].kill().unwrap();
    let _ = children[2].wait();
    // The survivors fail (the first to notice names peer 2; the other may report the first
    // one's exit, a cascade) instead of hanging: 30 s bounds the test, peers use 5 s.
    let mut errors = Vec::new();
    for i in [0, 1] {
        let status = wait_with_timeout(&mut children[i], Duration::from_secs(30))
            .unwrap_or_else(|| panic!("peer {i} still running 30 s after peer 2 was killed"));
        assert!(!status.success(), "peer {i} exited successfully");
        let mut err = String::new();
        std::io::Read::read_to_string(children[i].stderr.as_mut().unwrap(), &mut err).unwrap();
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
    let d = tempdir("fms");
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
    let d = tempdir("f16");
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
