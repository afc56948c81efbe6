//! The hand-run cluster of the README: `sfb cluster init` then one `sfb peer` per id (and
//! `sfb server` for FMS), each writing its own `--summary` and streaming its `--metrics`.
//! Ports: the OS picks them (`--base-port 0`) and the processes exchange their addresses
//! (`--exchange-addrs`, JSON lines), so no test needs a fixed port. Every wait is under a
//! timeout; on any failure every child is killed by PID (a guard), and the test checks no
//! child outlives it.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const SFB: &str = env!("CARGO_BIN_EXE_sfb");

/// The DESIGN's `--summary` keys.
const SUMMARY_KEYS: &[&str] = &[
    "backend",
    "peers",
    "out_degree",
    "clocks",
    "wall_s",
    "objective",
    "test_accuracy",
    "samples_per_s",
    "bytes_sent",
    "bytes_per_clock",
    "compute_s",
    "apply_s",
    "wait_s",
    "replica_checksums",
    "max_replica_divergence",
];

const CLOCKS: u64 = 6;
const TRAIN: &[&str] = &[
    "--synthetic",
    "classes=4,features=10,samples=400",
    "--clocks",
    "6",
    "--batch",
    "8",
    "--eval-every",
    "3",
];

fn tempdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("hand-run")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Children killed (by PID, through `Child::kill`) when the guard drops: on panic too.
struct Children(Vec<(String, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Children {
    /// Waits for every child under one deadline; panics (the guard kills the rest) if one
    /// fails or the deadline passes. Returns each child's stderr.
    fn wait_all(&mut self, limit: Duration) -> Vec<String> {
        let start = Instant::now();
        let mut errs = vec![None; self.0.len()];
        while errs.iter().any(Option::is_none) {
            for (k, (name, c)) in self.0.iter_mut().enumerate() {
                if errs[k].is_some() {
                    continue;
                }
                if let Some(s) = c.try_wait().unwrap() {
                    let mut err = String::new();
                    std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
                    assert!(s.success(), "{name} failed ({s}):\n{err}");
                    errs[k] = Some(err);
                }
            }
            assert!(
                start.elapsed() < limit,
                "the cluster did not finish within {limit:?}"
            );
            // Polling exit statuses; std has no wait-with-timeout.
            std::thread::sleep(Duration::from_millis(20));
        }
        errs.into_iter().map(Option::unwrap).collect()
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|(_, c)| c.id()).collect()
    }
}

/// No process with one of these PIDs is left running (a zombie counts as gone).
fn assert_gone(pids: &[u32]) {
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        assert!(
            matches!(state, None | Some("Z" | "X")),
            "child {pid} is still running: {stat}"
        );
    }
}

fn init(dir: &Path, args: &[&str]) -> PathBuf {
    let cluster = dir.join("cluster.toml");
    let out = Command::new(SFB)
        .args(["cluster", "init", "--base-port", "0"])
        .args(args)
        .arg("-o")
        .arg(&cluster)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster
}

/// Starts `sfb <role…> --cluster FILE --exchange-addrs <args>` for every node, exchanges
/// the addresses they print (JSON lines), and returns the guard.
fn start(cluster: &Path, nodes: &[(String, Vec<String>)]) -> Children {
    let (tx, rx) = mpsc::channel();
    let mut children = Children(Vec::new());
    for (k, (name, args)) in nodes.iter().enumerate() {
        let mut c = Command::new(SFB)
            .args(args)
            .arg("--cluster")
            .arg(cluster)
            .arg("--exchange-addrs")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(c.stdout.take().unwrap());
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send((k, line));
            }
        });
        children.0.push((name.clone(), c));
    }
    let mut addrs = vec![None; nodes.len()];
    while addrs.iter().any(Option::is_none) {
        let (k, line) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every node says where it listens within 60 s");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        if let Some(a) = v["listening"].as_str() {
            addrs[k] = Some(a.to_string());
        }
    }
    let line = serde_json::json!({ "addrs": addrs }).to_string();
    for (_, c) in &mut children.0 {
        writeln!(c.stdin.take().unwrap(), "{line}").unwrap();
    }
    children
}

/// Checks one node's summary (the DESIGN keys, one checksum) and its metrics (one JSON
/// line per clock with the record keys); returns its checksum.
fn check_node(dir: &Path, name: &str, backend: &str, peers: u64) -> String {
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap())
            .unwrap();
    for k in SUMMARY_KEYS {
        assert!(s.get(k).is_some(), "{name}: summary lacks {k}: {s}");
    }
    assert_eq!(s["backend"], backend, "{name}");
    assert_eq!(s["peers"], peers, "{name}");
    assert_eq!(s["clocks"], CLOCKS, "{name}");
    let sums = s["replica_checksums"].as_array().unwrap();
    assert_eq!(sums.len(), 1, "{name}: {s}");
    assert!(s["bytes_sent"].as_f64().unwrap() > 0.0, "{name}");
    let metrics = std::fs::read_to_string(dir.join(format!("{name}.jsonl"))).unwrap();
    let lines: Vec<Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // One record per clock as it completes, then the final one (after the final
    // evaluation), as `sfb run --metrics` writes them.
    assert_eq!(lines.len() as u64, CLOCKS + 1, "{name}: {metrics}");
    let last = &lines[CLOCKS as usize];
    assert_eq!(last["clock"], CLOCKS, "{name}: {last}");
    if backend != "fms" || name != "server" {
        // Workers evaluate their final W; the FMS server does not evaluate.
        assert!(last["objective"].as_f64().is_some(), "{name}: {last}");
    }
    for (k, r) in lines[..CLOCKS as usize].iter().enumerate() {
        assert_eq!(r["clock"], k as u64 + 1, "{name}: {r}");
        for key in ["peer", "wall_s", "bytes_sent", "compute_s", "wait_s"] {
            assert!(r.get(key).is_some(), "{name}: record lacks {key}: {r}");
        }
    }
    sums[0].as_str().unwrap().to_string()
}

fn outputs(dir: &Path, name: &str) -> Vec<String> {
    let p = |ext: &str| dir.join(format!("{name}.{ext}")).display().to_string();
    vec![
        "--summary".into(),
        p("json"),
        "--metrics".into(),
        p("jsonl"),
    ]
}

#[test]
fn four_hand_run_peers_write_their_summaries_and_metrics() {
    let d = tempdir("sfb");
    let cluster = init(&d, &["--peers", "4", "--out-degree", "3"]);
    let nodes: Vec<(String, Vec<String>)> = (0..4)
        .map(|i| {
            let name = format!("peer{i}");
            let mut args = vec!["peer".into(), "--id".into(), i.to_string()];
            args.extend(TRAIN.iter().map(|s| s.to_string()));
            args.extend(outputs(&d, &name));
            (name, args)
        })
        .collect();
    let mut children = start(&cluster, &nodes);
    let pids = children.pids();
    children.wait_all(Duration::from_secs(120));
    drop(children);
    assert_gone(&pids);
    let sums: Vec<String> = (0..4)
        .map(|i| check_node(&d, &format!("peer{i}"), "sfb", 4))
        .collect();
    // BSP, full broadcast: every replica is bitwise the same.
    assert!(sums.iter().all(|c| c == &sums[0]), "{sums:?}");
}

#[test]
fn a_hand_run_fms_server_and_clients_agree() {
    let d = tempdir("fms");
    let cluster = init(&d, &["--peers", "3", "--backend", "fms"]);
    let toml = std::fs::read_to_string(&cluster).unwrap();
    assert!(toml.contains("server"), "{toml}");
    let mut nodes: Vec<(String, Vec<String>)> = (0..3)
        .map(|i| {
            let name = format!("client{i}");
            let mut args = vec!["peer".into(), "--id".into(), i.to_string()];
            args.extend(TRAIN.iter().map(|s| s.to_string()));
            args.extend(outputs(&d, &name));
            (name, args)
        })
        .collect();
    let mut server = vec!["server".to_string()];
    server.extend(TRAIN.iter().map(|s| s.to_string()));
    server.extend(outputs(&d, "server"));
    nodes.push(("server".into(), server));
    let mut children = start(&cluster, &nodes);
    let pids = children.pids();
    children.wait_all(Duration::from_secs(120));
    drop(children);
    assert_gone(&pids);
    let mut sums: Vec<String> = (0..3)
        .map(|i| check_node(&d, &format!("client{i}"), "fms", 3))
        .collect();
    sums.push(check_node(&d, "server", "fms", 3));
    assert!(sums.iter().all(|c| c == &sums[0]), "{sums:?}");
}

/// Runs `sfb args…` expecting a quick refusal; returns its stderr.
fn refused(args: &[&str]) -> String {
    let mut c = Command::new(SFB)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guard_pid = c.id();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("sfb {args:?} (pid {guard_pid}) was not refused within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "sfb {args:?} was accepted");
    err
}

#[test]
fn options_a_node_cannot_honour_are_refused() {
    let d = tempdir("refused");
    let sfb_file = init(&d, &["--peers", "2", "--out-degree", "1"]);
    let fms_dir = d.join("fms");
    std::fs::create_dir_all(&fms_dir).unwrap();
    let fms_file = init(&fms_dir, &["--peers", "2", "--backend", "fms"]);
    let (s, f) = (sfb_file.to_str().unwrap(), fms_file.to_str().unwrap());
    let e = refused(&["peer", "--cluster", s, "--id", "0", "--fms-push", "dense"]);
    assert!(e.contains("--fms-push applies to FMS clusters only"), "{e}");
    let e = refused(&["server", "--cluster", f, "--straggler", "0:5"]);
    assert!(e.contains("--straggler"), "{e}");
    let e = refused(&["server", "--cluster", s]);
    assert!(e.contains("names no server"), "{e}");
    let e = refused(&["peer", "--cluster", f, "--id", "2"]);
    assert!(e.contains("is the cluster's server"), "{e}");
    // A spec file is the whole configuration: an option beside it would be ignored.
    let e = refused(&[
        "peer",
        "--cluster",
        s,
        "--id",
        "0",
        "--spec",
        "x.json",
        "--lr",
        "1",
    ]);
    assert!(e.contains("cannot be used with"), "{e}");
    let e = refused(
        &[
            "cluster",
            "init",
            "--peers",
            "2",
            "--backend",
            "fms",
            "--out-degree",
            "1",
            "-o",
        ]
        .iter()
        .copied()
        .chain([d.join("x.toml").to_str().unwrap()])
        .collect::<Vec<_>>(),
    );
    assert!(e.contains("--out-degree does not apply"), "{e}");
}
