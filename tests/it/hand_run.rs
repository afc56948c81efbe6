//! The hand-run cluster of the README: `sfb cluster init` then one `sfb peer` per id (and
//! `sfb server` for FMS), each writing its own `--summary` and streaming its `--metrics`.
//! Ports: the OS picks them (`--base-port 0`) and the processes exchange their addresses
//! (`--exchange-addrs`, JSON lines), so no test needs a fixed port. Every wait is under a
//! timeout; on any failure every child is killed by PID (a guard), and the test checks no
//! child outlives it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{Children, SFB, assert_gone, init, out_lists, start, tempdir, topology_file};

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

/// A node called `name`: its `role`, the training options, and its own `--summary` and
/// `--metrics` in `dir`.
fn node(dir: &Path, name: &str, role: &[&str]) -> (String, Vec<String>) {
    let p = |ext: &str| dir.join(format!("{name}.{ext}")).display().to_string();
    let mut args: Vec<String> = role.iter().chain(TRAIN).map(|s| s.to_string()).collect();
    args.extend([
        "--summary".into(),
        p("json"),
        "--metrics".into(),
        p("jsonl"),
    ]);
    (name.to_string(), args)
}

/// Starts the nodes, hands them their addresses, waits (120 s at most) until every one
/// has succeeded, and checks none outlives the run.
fn run_to_end(cluster: &Path, nodes: &[(String, Vec<String>)]) {
    let mut c = start(cluster, nodes);
    let pids = c.children.pids();
    c.exchange();
    c.children.wait_all(Duration::from_secs(120));
    drop(c);
    assert_gone(&pids);
}

#[test]
fn four_hand_run_peers_write_their_summaries_and_metrics() {
    let d = tempdir("hand-run", "sfb");
    let cluster = init(&d, &["--peers", "4", "--out-degree", "3"]);
    let nodes: Vec<(String, Vec<String>)> = (0..4)
        .map(|i| node(&d, &format!("peer{i}"), &["peer", "--id", &i.to_string()]))
        .collect();
    run_to_end(&cluster, &nodes);
    let sums: Vec<String> = (0..4)
        .map(|i| check_node(&d, &format!("peer{i}"), "sfb", 4))
        .collect();
    // BSP, full broadcast: every replica is bitwise the same.
    assert!(sums.iter().all(|c| c == &sums[0]), "{sums:?}");
}

/// A tree cluster (`sfb cluster init --partial tree`) run by hand (the file says the mode):
/// every peer's replica is bitwise the same (the tree applies the same sums everywhere).
#[test]
fn a_hand_run_tree_cluster_trains_with_identical_replicas() {
    let d = tempdir("hand-run", "tree");
    let cluster = init(
        &d,
        &["--peers", "5", "--out-degree", "2", "--partial", "tree"],
    );
    let toml = std::fs::read_to_string(&cluster).unwrap();
    assert!(toml.contains("tree_fanout = 2"), "{toml}");
    let nodes: Vec<(String, Vec<String>)> = (0..5)
        .map(|i| node(&d, &format!("peer{i}"), &["peer", "--id", &i.to_string()]))
        .collect();
    run_to_end(&cluster, &nodes);
    let sums: Vec<String> = (0..5)
        .map(|i| check_node(&d, &format!("peer{i}"), "sfb", 5))
        .collect();
    assert!(sums.iter().all(|c| c == &sums[0]), "{sums:?}");
}

#[test]
fn a_hand_run_fms_server_and_clients_agree() {
    let d = tempdir("hand-run", "fms");
    let cluster = init(&d, &["--peers", "3", "--backend", "fms"]);
    let toml = std::fs::read_to_string(&cluster).unwrap();
    assert!(toml.contains("server"), "{toml}");
    let mut nodes: Vec<(String, Vec<String>)> = (0..3)
        .map(|i| node(&d, &format!("client{i}"), &["peer", "--id", &i.to_string()]))
        .collect();
    nodes.push(node(&d, "server", &["server"]));
    run_to_end(&cluster, &nodes);
    let mut sums: Vec<String> = (0..3)
        .map(|i| check_node(&d, &format!("client{i}"), "fms", 3))
        .collect();
    sums.push(check_node(&d, "server", "fms", 3));
    assert!(sums.iter().all(|c| c == &sums[0]), "{sums:?}");
}

/// Runs `sfb args…` expecting a quick refusal; returns its stderr.
fn refused(args: &[&str]) -> String {
    let mut c = Children(vec![(
        format!("sfb {args:?}"),
        Command::new(SFB)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )]);
    let guard_pid = c.pids()[0];
    let (status, err) = c
        .try_wait_one(0, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("sfb {args:?} (pid {guard_pid}) was not refused within 30 s"));
    assert!(!status.success(), "sfb {args:?} was accepted");
    err
}

#[test]
fn options_a_node_cannot_honour_are_refused() {
    let d = tempdir("hand-run", "refused");
    let sfb_file = init(&d, &["--peers", "2", "--out-degree", "1"]);
    let fms_dir = d.join("fms");
    std::fs::create_dir_all(&fms_dir).unwrap();
    let fms_file = init(&fms_dir, &["--peers", "2", "--backend", "fms"]);
    let (s, f) = (sfb_file.to_str().unwrap(), fms_file.to_str().unwrap());
    for flag in [["--fms-push", "dense"], ["--fms-sync", "lazy"]] {
        let mut args = vec!["peer", "--cluster", s, "--id", "0"];
        args.extend(flag);
        let e = refused(&args);
        assert!(
            e.contains("--fms-push and --fms-sync apply to FMS clusters only"),
            "{e}"
        );
    }
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

#[test]
fn a_topology_file_runs_as_hand_run_peers_as_in_memory() {
    let d = tempdir("hand-run", "topology");
    let topo = topology_file(
        &d,
        "t.toml",
        &["--peers", "4", "--out-degree", "2", "--method", "kautz"],
    );
    let t = topo.to_str().unwrap();
    // The cluster file carries that very graph: its out-lists are the topology file's.
    let cluster = init(&d, &["--topology", t]);
    assert_eq!(out_lists(&cluster), out_lists(&topo));
    let nodes: Vec<(String, Vec<String>)> = (0..4)
        .map(|i| node(&d, &format!("peer{i}"), &["peer", "--id", &i.to_string()]))
        .collect();
    run_to_end(&cluster, &nodes);
    let hand: Vec<String> = (0..4)
        .map(|i| check_node(&d, &format!("peer{i}"), "sfb", 4))
        .collect();
    // Each node's summary names the cluster file's graph: its out-degree and eq. 3 cost.
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("peer0.json")).unwrap()).unwrap();
    assert_eq!(s["out_degree"], 2, "{s}");
    assert_eq!(s["topology"]["source"], "cluster file", "{s}");
    // The same file through `sfb run`, in memory: the same replicas, bit for bit.
    let summary = d.join("mem.json");
    let mut args = vec![
        "run",
        "--topology",
        t,
        "--summary",
        summary.to_str().unwrap(),
    ];
    args.extend(TRAIN);
    let st = Command::new(SFB)
        .args(&args)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let mem: Vec<String> = m["replica_checksums"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(hand, mem, "hand-run peers and sfb run --topology differ");
    assert_eq!(s["topology"]["cost"], m["topology"]["cost"]);
}

/// Starts a 3-peer full-broadcast cluster whose peer 2 has `odd` beside the others'
/// options; every node must fail (none reports a result mixed with the odd one's
/// updates), and one names `setting` as what differs. Returns the nodes' stderr.
fn odd_peer_is_refused(name: &str, odd: &[&str], setting: &str) -> Vec<String> {
    let d = tempdir("hand-run", name);
    let cluster = init(&d, &["--peers", "3", "--out-degree", "2"]);
    let nodes: Vec<(String, Vec<String>)> = (0..3)
        .map(|i| {
            let mut role = vec!["peer", "--id"];
            let id = i.to_string();
            role.push(&id);
            // A healthy node whose stream to or from the odd one was refused sometimes
            // learns of it only when its start-up wait ends (30 s by default, about one
            // run in two): 5 s here.
            role.extend([
                "--optimizer",
                "sgd",
                "--peer-timeout",
                "5",
                "--startup-timeout",
                "5",
            ]);
            if i == 2 {
                role.extend(odd);
            }
            node(&d, &format!("peer{i}"), &role)
        })
        .collect();
    let mut c = start(&cluster, &nodes);
    let pids = c.children.pids();
    c.exchange();
    let mut errs = Vec::new();
    for i in 0..3 {
        let (status, err) = c
            .children
            .try_wait_one(i, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("peer {i} still running 60 s after the start"));
        assert!(!status.success(), "peer {i} reported success: {err}");
        // A summary, if written, says the run failed.
        if let Ok(text) = std::fs::read_to_string(d.join(format!("peer{i}.json"))) {
            let s: Value = serde_json::from_str(&text).unwrap();
            assert!(s["failed"].is_string(), "peer {i}: {s}");
        }
        errs.push(err);
    }
    drop(c);
    assert_gone(&pids);
    assert!(
        errs.iter()
            .any(|e| e.contains(&format!("{setting} differs"))),
        "no node named {setting}: {errs:#?}"
    );
    errs
}

#[test]
fn a_peer_started_with_another_step_size_or_seed_is_refused_by_name() {
    // Issue 31: one hand-run peer at --lr 1e30 drove every replica to 1e30 with exit 0.
    let errs = odd_peer_is_refused("odd-lr", &["--lr", "1e30"], "lr");
    assert!(errs.iter().any(|e| e.contains("1e30")), "{errs:#?}");
    odd_peer_is_refused("odd-seed", &["--seed", "5"], "seed");
}

#[test]
fn a_misconfigured_peer_is_shut_out_and_the_healthy_majority_finishes() {
    // Issue 31, item 3: a refused handshake was fatal to the *receiving* peer too, so one
    // misconfigured node took the healthy ones down. Under a continue policy the link to
    // it is closed, it is lost like a dead peer, and the majority finishes; it stops,
    // naming what differs.
    let err = shut_out("shut-out", "continue");
    assert!(err.contains("seed differs"), "{err}");
}

#[test]
fn a_peer_that_never_reached_the_run_does_not_train_alone() {
    // Issue 31, failure 4: a peer that reached nobody (started late, another key, here a
    // refused handshake) waited, marked every other peer lost, trained all its clocks
    // alone having received nothing, and exited 0. With the quorum off
    // (continue-alone) the healthy pair trains on; the odd one stops, saying it never
    // heard from anyone.
    let err = shut_out("never-reached", "continue-alone");
    assert!(err.contains("never heard from any peer"), "{err}");
}

/// A 3-peer SSP run whose peer 2 has another seed, under the peer-loss `policy`: peer 2
/// exits 3 (cut off), the two others finish having lost it. Returns peer 2's stderr.
fn shut_out(name: &str, policy: &str) -> String {
    let d = tempdir("hand-run", name);
    let cluster = init(&d, &["--peers", "3", "--out-degree", "2"]);
    let nodes: Vec<(String, Vec<String>)> = (0..3)
        .map(|i| {
            let id = i.to_string();
            let mut role = vec!["peer", "--id", &id];
            role.extend([
                "--consistency",
                "ssp:2",
                "--on-peer-loss",
                policy,
                "--peer-timeout",
                "5",
            ]);
            if i == 2 {
                role.extend(["--seed", "5"]);
            }
            node(&d, &format!("peer{i}"), &role)
        })
        .collect();
    let mut c = start(&cluster, &nodes);
    let pids = c.children.pids();
    c.exchange();
    let (status, odd) = c.children.wait_one(2, Duration::from_secs(60));
    // Exit 3: stopped cut off from the run (sfb_harness::launch::CUT_OFF_EXIT).
    assert_eq!(status.code(), Some(3), "the odd peer: {odd}");
    let mut named = false;
    for i in 0..2 {
        let (status, err) = c.children.wait_one(i, Duration::from_secs(60));
        assert!(status.success(), "peer {i}: {err}");
        // The node that was refused, or refused it, says why; the other may have learnt of
        // the loss first from its notice.
        named |= err.contains("seed differs");
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(d.join(format!("peer{i}.json"))).unwrap(),
        )
        .unwrap();
        assert!(s["failed"].is_null(), "peer {i}: {s}");
        assert_eq!(s["clocks"], CLOCKS, "peer {i}: {s}");
        let lost = s["lost_peers"].as_array().unwrap();
        assert_eq!(lost.len(), 1, "peer {i}: {s}");
        assert_eq!(lost[0]["peer"], 2, "peer {i}: {s}");
    }
    // Under load both healthy nodes may learn of the loss from the closed stream or a
    // notice before either logs the refused handshake (a fresh-clone CI run at load 4): the
    // loss itself is checked above for both; the cause is named by the odd node (callers).
    if !named {
        eprintln!("no healthy node logged the refused handshake; both recorded the loss");
    }
    drop(c);
    assert_gone(&pids);
    odd
}

#[test]
fn a_second_process_with_a_running_peers_id_is_refused_and_the_run_goes_on() {
    // Issue 31, item 3: a duplicate `--id 1` (a copy of the cluster file, another
    // address) made the others exit 1 ("clock 0 from peer p1 is not acceptable:
    // duplicate") and hung for 395 s. The first session of an identity wins: the
    // duplicate is refused and exits naming the conflict; the run, BSP with the default
    // fail policy, finishes untouched.
    let d = tempdir("hand-run", "duplicate-id");
    let cluster = init(&d, &["--peers", "3", "--out-degree", "2"]);
    // Long enough for the duplicate to come while the others train.
    let peer = |i: usize, name: &str| {
        let summary = d.join(format!("{name}.json")).display().to_string();
        let id = i.to_string();
        let args = [
            "peer",
            "--id",
            &id,
            "--synthetic",
            "classes=4,features=10,samples=400",
            "--batch",
            "8",
            "--eval-every",
            "0",
            "--clocks",
            "400",
            "--straggler",
            "0:5",
            "--summary",
            &summary,
        ];
        (name.to_string(), args.map(String::from).to_vec())
    };
    let nodes: Vec<(String, Vec<String>)> = (0..3).map(|i| peer(i, &format!("peer{i}"))).collect();
    let mut c = start(&cluster, &nodes);
    let pids = c.children.pids();
    c.exchange();
    c.wait_clock(0, 20);
    let mut dup = start(&cluster, &[peer(1, "dup")]);
    let dup_pids = dup.children.pids();
    // Its address in place of the original's, as a copy of the file would say.
    let mut addrs = c.addrs.clone();
    addrs[1] = dup.addrs[0].clone();
    dup.addrs = addrs;
    dup.exchange();
    let (status, err) = dup.children.wait_one(0, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "the duplicate: {err}");
    assert!(
        err.contains("duplicate: peer 1 already has a live session with peer"),
        "{err}"
    );
    let mut sums = Vec::new();
    for i in 0..3 {
        let (status, err) = c.children.wait_one(i, Duration::from_secs(120));
        assert!(status.success(), "peer {i}: {err}");
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(d.join(format!("peer{i}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(s["clocks"], 400, "peer {i}: {s}");
        assert!(
            s["lost_peers"].as_array().is_none_or(Vec::is_empty),
            "peer {i}: {s}"
        );
        sums.push(s["replica_checksums"][0].clone());
    }
    assert!(
        sums.iter().all(|c| c == &sums[0]),
        "BSP replicas differ: {sums:?}"
    );
    drop((c, dup));
    assert_gone(&pids);
    assert_gone(&dup_pids);
}
