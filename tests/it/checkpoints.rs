//! Checkpoints and resume (issue 12, parts 1 and 2) with real processes: a run killed
//! (SIGKILL, by PID) at clock 30 of 60 and resumed with `--resume` ends with the same
//! checksums as an uninterrupted run of the same seed, under BSP, in memory (`sfb run`) and
//! over libp2p (`sfb peer`, `sfb server`), SFB and FMS. Damaged, foreign and missing
//! checkpoints are refused with a one-line reason; an unwritable checkpoint directory is
//! reported before any training. No process outlives its test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use crate::common::{Children, SFB, assert_gone, children_of, init, start, tempdir, wait_timeout};

const GROUP: &str = "checkpoints";

/// The run every test interrupts: 60 clocks (see [`SLOW`]).
const RUN: &[&str] = &[
    "--synthetic",
    "classes=8,features=64,samples=4000",
    "--clocks",
    "60",
    "--seed",
    "5",
    "--eval-every",
    "20",
];

/// Slows the workers to ~25 ms a clock by a rotating straggler (a delay only: BSP results
/// do not depend on it), so that a run is killed at clock 30 well before its end.
const SLOW: &[&str] = &["--straggler", "rotate:25"];

/// The run's options with a checkpoint every 10 clocks, then `extra`.
fn args(extra: &[&str]) -> Vec<String> {
    RUN.iter()
        .chain(&["--checkpoint-every", "10"])
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

/// `sfb run` to completion (in memory, uninterrupted, no checkpoints): its summary.
fn uninterrupted(dir: &Path, extra: &[&str]) -> Value {
    let summary = dir.join("uninterrupted.json");
    let out = Command::new(SFB)
        .arg("run")
        .args(RUN)
        .args(extra)
        .arg("--summary")
        .arg(&summary)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap()
}

fn checksums(summary: &Value) -> Vec<String> {
    summary["replica_checksums"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

/// The largest clock in a metrics file so far.
fn last_clock(metrics: &Path) -> u64 {
    std::fs::read_to_string(metrics)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["clock"].as_u64())
        .max()
        .unwrap_or(0)
}

/// Polls `metrics` until some node has completed `clock` clocks (60 s at most).
fn wait_for_clock(metrics: &Path, clock: u64, child: &mut std::process::Child) {
    let start = Instant::now();
    while last_clock(metrics) < clock {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before clock {clock}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no clock {clock} within 60 s"
        );
        // Polling a file another process appends to.
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn checkpoint_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sfbck"))
        .collect();
    v.sort();
    v
}

#[test]
fn sfb_run_in_memory_killed_at_clock_30_resumes_bitwise() {
    // SFB, FMS, SFB re-compressing its factors (the residual kept back is in the
    // checkpoint), partial broadcast in the gossip mode (its public copy, the copies of
    // its in-neighbours' replicas and its warm start are in the checkpoint), and in the
    // tree mode (each peer's residual is), and with relay (the batches still travelling the
    // trees at the cut are handed on again).
    for (backend, extra) in [
        ("sfb", &[][..]),
        ("fms", &[][..]),
        ("sfb", &["--compress", "rank:4"][..]),
        ("sfb", &["--out-degree", "2"][..]),
        ("sfb", &["--out-degree", "2", "--partial", "tree"][..]),
        ("sfb", &["--out-degree", "2", "--relay"][..]),
    ] {
        let name = format!("mem-{backend}{}", extra.join(""));
        let dir = tempdir(GROUP, &name);
        let mut run_args = vec!["--backend", backend];
        run_args.extend_from_slice(extra);
        let want = uninterrupted(&dir, &run_args);
        let ck = dir.join("ck");
        let metrics = dir.join("m.jsonl");
        let mut child = Command::new(SFB)
            .arg("run")
            .args(args(&run_args))
            .args(SLOW)
            .arg("--checkpoint-dir")
            .arg(&ck)
            .arg("--metrics")
            .arg(&metrics)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        wait_for_clock(&metrics, 30, &mut child);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_gone(&[pid]);
        let files = checkpoint_files(&ck);
        assert!(!files.is_empty(), "{name}: no checkpoint written");
        let summary = dir.join("resumed.json");
        let out = Command::new(SFB)
            .arg("run")
            .args(args(
                &[&run_args[..], &["--resume", "--checkpoint-dir"]].concat(),
            ))
            .arg(&ck)
            .arg("--summary")
            .arg(&summary)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        let got: Value = serde_json::from_str(&std::fs::read_to_string(summary).unwrap()).unwrap();
        assert_eq!(checksums(&got), checksums(&want), "{name}: {files:?}");
        assert_eq!(got["clocks"], want["clocks"]);
        assert_eq!(got["objective"], want["objective"], "{name}");
    }
}

fn report(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("report-{name}.json"))
}

fn report_checksum(dir: &Path, name: &str) -> String {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(report(dir, name)).unwrap()).unwrap();
    v["report"]["checksum"].as_str().unwrap().to_string()
}

/// Starts every node of `cluster` (`sfb peer --id I`, and `sfb server` for FMS) with the
/// run's options, `--checkpoint-dir ck`, `extra`, and a report each.
fn start_nodes(
    dir: &Path,
    cluster: &Path,
    peers: usize,
    fms: bool,
    ck: &Path,
    extra: &[&str],
) -> common::Started {
    let mut nodes: Vec<(String, Vec<String>)> = (0..peers)
        .map(|i| {
            let mut a: Vec<String> = vec!["peer".into(), "--id".into(), i.to_string()];
            a.extend([
                "--report".into(),
                report(dir, &i.to_string()).display().to_string(),
            ]);
            (format!("peer {i}"), a)
        })
        .collect();
    if fms {
        let a = vec![
            "server".to_string(),
            "--report".into(),
            report(dir, "server").display().to_string(),
        ];
        nodes.push(("server".into(), a));
    }
    for (k, (_, a)) in nodes.iter_mut().enumerate() {
        a.extend(args(extra));
        if k < peers {
            // The server computes nothing to slow down.
            a.extend(SLOW.iter().map(|s| s.to_string()));
        }
        a.push("--checkpoint-dir".into());
        a.push(ck.display().to_string());
    }
    let mut c = start(cluster, &nodes);
    c.exchange();
    c
}

/// Kills `victim` by PID once it reports clock 30; every other node must then stop on its
/// own (BSP fails fast on a lost node) within the liveness timeout. Returns the nodes' exit
/// statuses.
fn kill_at_30(c: &mut common::Started, victim: usize) {
    let pids = c.children.pids();
    c.wait_clock(victim, 30);
    c.children.kill(victim);
    for k in 0..pids.len() {
        if k != victim {
            let (status, err) = c.children.wait_one(k, Duration::from_secs(60));
            assert!(
                !status.success(),
                "node {k} succeeded without its peer:\n{err}"
            );
            assert!(err.contains("lost"), "node {k}: {err}");
        }
    }
    assert_gone(&pids);
}

#[test]
fn libp2p_peers_killed_at_clock_30_resume_bitwise() {
    // Full broadcast, and relay over a Q = 2 topology (the batches still travelling its
    // trees at the cut are in the checkpoints and handed on again on resume).
    for (name, q, extra) in [
        ("p2p-sfb", "3", &[][..]),
        ("p2p-relay", "2", &["--relay"][..]),
    ] {
        let dir = tempdir(GROUP, name);
        let want = uninterrupted(
            &dir,
            &[&["--peers", "4", "--out-degree", q], extra].concat(),
        );
        let cluster = init(&dir, &["--peers", "4", "--out-degree", q]);
        let ck = dir.join("ck");
        let mut c = start_nodes(&dir, &cluster, 4, false, &ck, extra);
        kill_at_30(&mut c, 2);
        drop(c);
        let files = checkpoint_files(&ck);
        assert!(
            files.iter().any(|f| f.starts_with("peer-2.c")),
            "{name}: {files:?}"
        );
        // Every node again, from the latest clock they all have.
        let resume = [extra, &["--resume"][..]].concat();
        let mut c = start_nodes(&dir, &cluster, 4, false, &ck, &resume);
        let pids = c.children.pids();
        c.children.wait_all(Duration::from_secs(120));
        drop(c);
        assert_gone(&pids);
        let got: Vec<String> = (0..4)
            .map(|i| report_checksum(&dir, &i.to_string()))
            .collect();
        assert_eq!(got, checksums(&want), "{name}: {files:?}");
    }
}

#[test]
fn fms_server_and_clients_killed_at_clock_30_resume_bitwise() {
    let dir = tempdir(GROUP, "p2p-fms");
    let want = uninterrupted(&dir, &["--peers", "3", "--backend", "fms"]);
    let cluster = init(&dir, &["--peers", "3", "--backend", "fms"]);
    let ck = dir.join("ck");
    let mut c = start_nodes(&dir, &cluster, 3, true, &ck, &[]);
    // The server is node 3: kill it.
    kill_at_30(&mut c, 3);
    drop(c);
    let files = checkpoint_files(&ck);
    assert!(files.iter().any(|f| f.starts_with("server.c")), "{files:?}");
    let mut c = start_nodes(&dir, &cluster, 3, true, &ck, &["--resume"]);
    let pids = c.children.pids();
    c.children.wait_all(Duration::from_secs(120));
    drop(c);
    assert_gone(&pids);
    let want = checksums(&want);
    for name in ["0", "1", "2", "server"] {
        assert_eq!(report_checksum(&dir, name), want[0], "{name}: {files:?}");
    }
}

/// `sfb run` with `args`: exit status, stderr and how long it took.
fn sfb_run(args: &[String]) -> (bool, String, Duration) {
    let t0 = Instant::now();
    let mut child = Command::new(SFB)
        .arg("run")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_timeout(&mut child, Duration::from_secs(60));
    let guard = Children(vec![("sfb run".into(), child)]);
    let status = status.expect("sfb run within 60 s");
    let mut guard = guard;
    let err = common::stderr_of(&mut guard.0[0].1);
    (status.success(), err, t0.elapsed())
}

#[test]
fn damaged_foreign_and_missing_checkpoints_are_refused_in_one_line() {
    let dir = tempdir(GROUP, "refused");
    let ck = dir.join("ck");
    let base = |extra: &[&str]| -> Vec<String> {
        let mut a = args(&[]);
        a.extend(extra.iter().map(|s| s.to_string()));
        a.push("--checkpoint-dir".into());
        a.push(ck.display().to_string());
        a
    };
    // Nothing to resume yet.
    let (ok, err, _) = sfb_run(&base(&["--resume"]));
    assert!(!ok);
    assert!(err.contains("peer 0 has no checkpoint there"), "{err}");
    let (ok, err, _) = sfb_run(&base(&[]));
    assert!(ok, "{err}");
    let files = checkpoint_files(&ck);
    assert_eq!(
        files.len(),
        8,
        "4 peers × the newest 2 (clocks 40, 50): {files:?}"
    );
    let newest = ck.join(files.iter().rfind(|f| f.starts_with("peer-1.")).unwrap());
    let original = std::fs::read(&newest).unwrap();
    let error_line = |err: &str| -> String {
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(lines.len(), 1, "{err}");
        lines[0].to_string()
    };
    // Corrupted: one flipped byte in W.
    let mut bytes = original.clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&newest, &bytes).unwrap();
    let (ok, err, _) = sfb_run(&base(&["--resume"]));
    assert!(!ok);
    let line = error_line(&err);
    assert!(
        line.contains("checksum mismatch: the file is corrupted"),
        "{line}"
    );
    assert!(line.contains("peer-1.c0000000050.sfbck"), "{line}");
    // Truncated.
    std::fs::write(&newest, &original[..original.len() - 100]).unwrap();
    let (ok, err, _) = sfb_run(&base(&["--resume"]));
    assert!(!ok);
    assert!(error_line(&err).contains("truncated"), "{err}");
    // Not a checkpoint at all.
    std::fs::write(&newest, b"hello").unwrap();
    let (ok, err, _) = sfb_run(&base(&["--resume"]));
    assert!(!ok);
    assert!(error_line(&err).contains("not an sfb checkpoint"), "{err}");
    std::fs::write(&newest, &original).unwrap();
    // Foreign: other data, another model, another number of peers, another seed, step
    // size or consistency model (the run's agreement, in the files' meta).
    for (extra, reason) in [
        (
            vec!["--synthetic", "classes=9,features=64,samples=4000"],
            "written by a run with data synthetic classes=8,features=64,samples=4000, this run has synthetic classes=9",
        ),
        (
            vec!["--seed", "6"],
            "written by a run with seed 5, this run has 6",
        ),
        (vec!["--lr", "1e30"], "this run has 1e30"),
        (
            vec!["--staleness", "2"],
            "written by a run with consistency",
        ),
        (
            vec!["--model", "dml"],
            "written for model mlr, this run trains dml",
        ),
        (
            vec!["--peers", "3"],
            "written by a run of 4 peers, this run has 3",
        ),
        (vec!["--peers", "5"], "peer 4 has no checkpoint there"),
        (vec!["--out-degree", "2"], "another topology"),
    ] {
        let mut a = base(&["--resume"]);
        match a.iter().position(|x| x == extra[0]) {
            // --synthetic is in RUN: replace its value.
            Some(i) => a[i + 1] = extra[1].to_string(),
            None => a.extend(extra.iter().map(|s| s.to_string())),
        }
        let (ok, err, _) = sfb_run(&a);
        assert!(!ok, "{extra:?}");
        assert!(error_line(&err).contains(reason), "{extra:?}: {err}");
    }
    // And the intact files still resume.
    let (ok, err, _) = sfb_run(&base(&["--resume"]));
    assert!(ok, "{err}");
}

#[test]
fn an_unwritable_checkpoint_directory_is_reported_before_training() {
    let dir = tempdir(GROUP, "unwritable");
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let metrics = dir.join("m.jsonl");
    for (target, why) in [
        (file.clone(), "it is an existing file, not a folder"),
        (file.join("sub"), "Not a directory"),
    ] {
        let mut a = args(&["--metrics", &metrics.display().to_string()]);
        a.push("--checkpoint-dir".into());
        a.push(target.display().to_string());
        let (ok, err, took) = sfb_run(&a);
        assert!(!ok);
        assert!(err.contains("cannot write --checkpoint-dir"), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(took < Duration::from_secs(10), "{took:?}");
        assert_eq!(last_clock(&metrics), 0, "no clock ran");
    }
}

#[test]
fn sigint_to_the_launcher_stops_every_node_at_one_clock_checkpointed_and_resumable() {
    let dir = tempdir(GROUP, "sigint");
    let want = uninterrupted(&dir, &[]);
    let ck = dir.join("ck");
    let summary = dir.join("stopped.json");
    let mut launcher = Command::new(SFB)
        .args(["run", "--transport", "libp2p"])
        .args(args(&[]))
        .args(SLOW)
        .arg("--checkpoint-dir")
        .arg(&ck)
        .arg("--summary")
        .arg(&summary)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = launcher.id();
    // Wait for the nodes, then for the run to be under way (a checkpoint of clock 10).
    let start = Instant::now();
    let kids = loop {
        let k = children_of(pid);
        if k.len() == 4 && ck.join("peer-0.c0000000010.sfbck").exists() {
            break k;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run did not start"
        );
        // Polling the process table and a file another process writes.
        std::thread::sleep(Duration::from_millis(10));
    };
    common::signal(pid, "INT");
    let status = wait_timeout(&mut launcher, Duration::from_secs(60)).expect("the launcher exits");
    let mut guard = Children(vec![("launcher".into(), launcher)]);
    let err = common::stderr_of(&mut guard.0[0].1);
    // Stopped before its clocks: exit 1, as the summary's `failed` says.
    assert_eq!(status.code(), Some(1), "{status}: {err}");
    assert!(err.contains("stopping every node at clock"), "{err}");
    assert!(
        err.contains("the run did not complete: stopped by a signal"),
        "{err}"
    );
    assert_gone(&kids);
    assert_gone(&[pid]);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let why = s["failed"].as_str().unwrap();
    assert!(why.contains("continue with --resume"), "{why}");
    let t = s["clocks"].as_u64().unwrap();
    assert!(t < 60, "stopped at {t}");
    // Every node checkpointed the stop's clock.
    for i in 0..4 {
        let f = ck.join(format!("peer-{i}.c{t:010}.sfbck"));
        assert!(f.exists(), "{}", f.display());
    }
    // And the run resumed from there ends where the uninterrupted one does.
    let resumed = dir.join("resumed.json");
    let out = Command::new(SFB)
        .args(["run", "--transport", "libp2p"])
        .args(args(&["--resume"]))
        .arg("--checkpoint-dir")
        .arg(&ck)
        .arg("--summary")
        .arg(&resumed)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_str(&std::fs::read_to_string(resumed).unwrap()).unwrap();
    assert_eq!(checksums(&got), checksums(&want));
}

#[test]
fn sigterm_to_a_peer_ends_its_run_with_exit_1_and_the_others_go_on_under_ssp() {
    let dir = tempdir(GROUP, "sigterm-peer");
    let cluster = init(&dir, &["--peers", "4", "--out-degree", "3"]);
    let ck = dir.join("ck");
    let nodes: Vec<(String, Vec<String>)> = (0..4)
        .map(|i| {
            let mut a: Vec<String> = vec!["peer".into(), "--id".into(), i.to_string()];
            a.extend([
                "--report".into(),
                report(&dir, &i.to_string()).display().to_string(),
            ]);
            a.extend([
                "--summary".into(),
                dir.join(format!("s-{i}.json")).display().to_string(),
            ]);
            // Periodic cuts at 8, 16, 24, …: the stop (at 20 or a little later) is not one.
            let every = args(&["--consistency", "ssp:2"])
                .into_iter()
                .map(|s| if s == "10" { "8".to_string() } else { s });
            a.extend(every);
            a.extend(SLOW.iter().map(|s| s.to_string()));
            a.extend(["--checkpoint-dir".into(), ck.display().to_string()]);
            (format!("peer {i}"), a)
        })
        .collect();
    let mut c = start(&cluster, &nodes);
    c.exchange();
    let pids = c.children.pids();
    c.wait_clock(1, 20);
    common::signal(pids[1], "TERM");
    let (status, err) = c.children.wait_one(1, Duration::from_secs(60));
    // It did not do its clocks: exit 1, as its summary's `failed` says (it exited 0).
    assert_eq!(status.code(), Some(1), "{status}: {err}");
    assert!(
        err.contains("the node's run did not complete: stopped at clock"),
        "{err}"
    );
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("s-1.json")).unwrap()).unwrap();
    let why = s["failed"].as_str().unwrap();
    assert!(why.starts_with("stopped at clock"), "{why}");
    // Its checkpoint of the clock it stopped at (every update of the clocks before it
    // applied, as at a periodic cut), besides the periodic ones.
    let at: u64 = why["stopped at clock ".len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let file = ck.join(format!("peer-1.c{at:010}.sfbck"));
    assert!(
        !at.is_multiple_of(8) && file.exists(),
        "{why}: no {}",
        file.display()
    );
    for k in [0, 2, 3] {
        let (status, err) = c.children.wait_one(k, Duration::from_secs(120));
        assert!(status.success(), "peer {k}: {err}");
        // A planned leave, said as such (not "lost"), with who said so (p1, or a
        // neighbour passing its notice on).
        assert!(
            err.lines().any(|l| l.contains("p1 left the run (p")
                && l.contains(" says so); training on without it")),
            "peer {k}: {err}"
        );
    }
    drop(c);
    assert_gone(&pids);
}
