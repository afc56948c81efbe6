//! Clean exits (issue 13): a launcher stopped by SIGTERM or SIGKILL leaves no child
//! process and no temporary directory behind; a stuck in-memory peer is reported and the
//! process exits at the timeout, not when the peer wakes up. Processes are found and
//! signalled by PID, and every wait is bounded.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::common::{SFB, processes_mentioning, running, signal, tempdir, wait_timeout};

/// Longest any wait here may take.
const WAIT: Duration = Duration::from_secs(120);

/// Polls `cond` until it holds; panics naming `what` after [`WAIT`].
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// PIDs whose parent is `ppid` (from /proc).
fn children_of(ppid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        if rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) == Some(ppid) {
            out.push(pid);
        }
    }
    out
}

/// The launcher's directories under `tmp`.
fn run_dirs(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("sfb-run-"))
        })
        .collect()
}

/// Starts a long libp2p run of 3 peers with its temporary files under `tmp` and its
/// metrics in `tmp/m.jsonl`, and waits until every peer has completed a clock. Returns the
/// launcher and its children's PIDs.
fn start_long_run(tmp: &Path) -> (Launcher, Vec<u32>) {
    let metrics = tmp.join("m.jsonl");
    let launcher = Command::new(SFB)
        .args(small_libp2p_run(
            1_000_000,
            &["--metrics", &metrics.display().to_string()],
        ))
        .env("TMPDIR", tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = launcher.id();
    // The launcher streams every node's records to the metrics file as they arrive.
    wait_for("every peer's first clock", || {
        let text = std::fs::read_to_string(&metrics).unwrap_or_default();
        (0..3).all(|i| text.contains(&format!("{{\"peer\":{i},")))
    });
    let children = children_of(pid);
    assert_eq!(children.len(), 3, "three peer processes: {children:?}");
    // Every node has read its private key: the keys are off the disk (issue 31: they
    // outlived a killed launcher), and the nodes keep no per-clock file there.
    let dirs = run_dirs(tmp);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let mut files: Vec<String> = std::fs::read_dir(&dirs[0])
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        ["cluster.toml", "node.json"],
        "{}",
        dirs[0].display()
    );
    (Launcher(launcher), children)
}

/// The launcher, killed by PID if a test fails before it exits; its peers then see their
/// end of its pipe close and stop too.
struct Launcher(Child);

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_exit(child: &mut Child) -> ExitStatus {
    wait_timeout(child, WAIT).expect("the launcher did not exit")
}

#[test]
fn sigterm_of_the_launcher_stops_every_child_and_removes_its_directory() {
    let tmp = tempdir("exits", "sigterm");
    let (mut launcher, children) = start_long_run(&tmp);
    signal(launcher.0.id(), "TERM");
    let st = wait_exit(&mut launcher.0);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut launcher.0.stderr.take().unwrap(), &mut err).unwrap();
    // A clean shutdown: every node stops at one clock; the run did not do its clocks, so
    // the launcher exits 1, as its summary says `failed` (it exited 0 with a failed
    // summary).
    assert_eq!(st.code(), Some(1), "{st}: {err}");
    assert!(err.contains("stopping every node at clock"), "{err}");
    assert!(
        err.contains("the run did not complete: stopped by a signal: the run stopped at clock"),
        "{err}"
    );
    for pid in children {
        wait_for(&format!("peer process {pid} to end"), || !running(pid));
    }
    assert!(
        run_dirs(&tmp).is_empty(),
        "left behind: {:?}",
        run_dirs(&tmp)
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn sigkill_of_the_launcher_stops_every_child_and_they_remove_its_directory() {
    let tmp = tempdir("exits", "sigkill");
    let (mut launcher, children) = start_long_run(&tmp);
    // No private key is on the disk, now or at any time of the launch: the nodes got
    // theirs on stdin, and the cluster file names none.
    assert_eq!(run_dirs(&tmp).len(), 1, "{:?}", run_dirs(&tmp));
    for dir in run_dirs(&tmp) {
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.contains("key")), "{names:?}");
        let cluster = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
        assert!(!cluster.contains("key ="), "{cluster}");
    }
    signal(launcher.0.id(), "KILL");
    let st = wait_exit(&mut launcher.0);
    assert_eq!(st.code(), None, "killed by a signal: {st}");
    for pid in children {
        wait_for(&format!("orphaned peer process {pid} to end"), || {
            !running(pid)
        });
    }
    // The last child out removes the directory; its siblings may still be on the way.
    wait_for("the launcher's directory to be removed", || {
        run_dirs(&tmp).is_empty()
    });
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_stuck_in_memory_peer_is_reported_and_the_process_exits_at_the_timeout() {
    // Peer 0 sleeps 100 s after its first compute; the others give up after 5 s.
    let start = Instant::now();
    let out = Command::new(SFB)
        .args([
            "run",
            "--peers",
            "3",
            "--clocks",
            "3",
            "--straggler",
            "0:100000",
            "--timeout",
            "5",
            "--synthetic",
            "classes=4,features=16,samples=600",
        ])
        .output()
        .unwrap();
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("without progress"), "{err}");
    assert!(err.contains("waiting on p0"), "{err}");
    // Well before the straggler would wake (100 s): the delay is cut short.
    assert!(took < Duration::from_secs(60), "exited after {took:?}");
}

/// The `--id` a peer process was started with (from its command line).
fn peer_id_of(pid: u32) -> Option<String> {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmd
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--id")?;
    args.get(at + 1).cloned()
}

#[test]
fn the_launcher_names_the_peer_that_was_killed() {
    let tmp = tempdir("exits", "blame");
    let (mut launcher, children) = start_long_run(&tmp);
    let victim = children[1];
    let id = peer_id_of(victim).expect("a peer's command line has --id");
    signal(victim, "KILL");
    let st = wait_exit(&mut launcher.0);
    assert_eq!(st.code(), Some(1), "{st}");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut launcher.0.stderr.take().unwrap(), &mut err).unwrap();
    assert!(
        err.contains(&format!("peer {id} died (killed by signal 9)")),
        "{err}"
    );
    for pid in children {
        wait_for(&format!("peer process {pid} to end"), || !running(pid));
    }
    assert!(
        run_dirs(&tmp).is_empty(),
        "left behind: {:?}",
        run_dirs(&tmp)
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_launch_past_the_open_file_limit_is_refused_before_anything_is_spawned() {
    // Issue 31: `--peers 1000` spawned children for over a minute. With `ulimit -n 256`
    // a launcher of 100 nodes would hold 300 pipes: refused up front, naming both figures,
    // leaving no run directory (and so no keys) behind.
    let tmp = tempdir("exits", "host-limit");
    let summary = tmp.join("s.json");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {SFB} run --transport libp2p --peers 100 --out-degree 3 --clocks 5 --summary {}",
            summary.display()
        ))
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("100 local node processes need 364 open files in the launcher")
            && err.contains("allows 256 (ulimit -n)"),
        "{err}"
    );
    assert!(run_dirs(&tmp).is_empty(), "{:?}", run_dirs(&tmp));
    // The summary of a run that never started says why, with no clock run.
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert!(s["failed"].as_str().unwrap().contains("open files"), "{s}");
    assert_eq!(s["clocks"], 0);
}

#[test]
fn a_reader_that_goes_away_ends_sfb_quietly() {
    // `sfb run … | head -1` panicked with "failed printing to stdout: Broken pipe".
    for args in [
        &[
            "run",
            "--peers",
            "2",
            "--clocks",
            "5",
            "--synthetic",
            "classes=4,features=10,samples=400",
        ][..],
        &[
            "topology",
            "--peers",
            "12",
            "--out-degree",
            "3",
            "--format",
            "dot",
        ][..],
    ] {
        let mut child = Command::new(SFB)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before sfb prints: its first write meets a closed pipe.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "sfb {args:?}: {:?} {err}", out.status);
        assert!(!err.contains("panicked"), "sfb {args:?}: {err}");
    }
}

#[test]
fn sigterm_while_the_nodes_start_leaves_no_process_directory_or_key() {
    // Issue 31: SIGTERM in the launcher's first second killed it by the signal's default
    // action, leaving its directory and keys. The signal comes as soon as the directory
    // exists: while the data is made, the topology built or the nodes spawned.
    let tmp = tempdir("exits", "sigterm-start");
    let mut launcher = Command::new(SFB)
        .args([
            "run",
            "--transport",
            "libp2p",
            "--peers",
            "12",
            "--out-degree",
            "3",
            "--clocks",
            "1000000",
            "--synthetic",
            "classes=16,features=256,samples=60000",
        ])
        .env("TMPDIR", &tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = launcher.id();
    wait_for("the launcher's directory", || !run_dirs(&tmp).is_empty());
    signal(pid, "TERM");
    let st = wait_exit(&mut launcher);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut launcher.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(st.code(), Some(1), "handled, not killed: {st}: {err}");
    assert!(err.contains("interrupted"), "{err}");
    wait_for("every node process to end", || {
        processes_mentioning(&tmp).is_empty()
    });
    wait_for("the launcher's directory to be removed", || {
        run_dirs(&tmp).is_empty()
    });
    let _ = std::fs::remove_dir_all(&tmp);
}

/// `sh -c` that ignores SIGXFSZ and limits every file the command writes to `blocks`
/// (512 or 1024 bytes each, by shell), then runs `sfb args…`: a disk that fills.
fn with_file_limit(blocks: u32, args: &[String]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {blocks}; exec \"$0\" \"$@\""
        ))
        .arg(SFB)
        .args(args);
    c
}

/// `sfb run` of 3 small libp2p peers for `clocks` clocks without evaluations, then `extra`.
fn small_libp2p_run(clocks: u64, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "run",
        "--transport",
        "libp2p",
        "--peers",
        "3",
        "--clocks",
        &clocks.to_string(),
        "--eval-every",
        "0",
        "--synthetic",
        "classes=4,features=16,samples=600",
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

#[test]
fn a_long_libp2p_run_writes_nothing_per_clock_to_its_temporary_directory() {
    // Issue 31: each node appended its records to a file in $TMPDIR (11 MB a minute),
    // and a full $TMPDIR failed the run at the end with `clocks: 0`. Every file sfb writes
    // is limited here to 32–64 KiB; 3 nodes × 3,000 records are about 2.7 MB.
    let tmp = tempdir("exits", "tmpdir-bounded");
    let summary = tmp.join("s.json");
    let out = with_file_limit(
        64,
        &small_libp2p_run(3000, &["--summary", &summary.display().to_string()]),
    )
    .env("TMPDIR", &tmp)
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["clocks"], 3000, "{s}");
    assert!(s["failed"].is_null(), "{s}");
    assert!(run_dirs(&tmp).is_empty(), "{:?}", run_dirs(&tmp));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_metrics_file_that_fills_stops_the_libp2p_run_at_once_checkpointed_with_its_clocks() {
    // Issue 31: a failed output write was found at the end, and the run thrown away. Here
    // the metrics file reaches the file-size limit after some tens of clocks.
    let tmp = tempdir("exits", "metrics-full-libp2p");
    let (summary, metrics, ck) = (tmp.join("s.json"), tmp.join("m.jsonl"), tmp.join("ck"));
    let asked = 1_000_000u64;
    let out = with_file_limit(
        64,
        &small_libp2p_run(
            asked,
            &[
                "--checkpoint-dir",
                &ck.display().to_string(),
                "--checkpoint-every",
                "100000",
                "--metrics",
                &metrics.display().to_string(),
                "--summary",
                &summary.display().to_string(),
            ],
        ),
    )
    .env("TMPDIR", &tmp)
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot write output.metrics") && err.contains("File too large"),
        "{err}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let why = s["failed"].as_str().unwrap();
    assert!(
        why.contains("File too large") && why.contains("continue with --resume"),
        "{why}"
    );
    // The clocks actually done, every node stopped at the same one and checkpointed it.
    let t = s["clocks"].as_u64().unwrap();
    assert!(t > 0 && t < asked, "{s}");
    assert_eq!(s["replica_checksums"].as_array().unwrap().len(), 3, "{s}");
    for i in 0..3 {
        let f = ck.join(format!("peer-{i}.c{t:010}.sfbck"));
        assert!(f.exists(), "{}", f.display());
    }
    // What was written is whole records, none past the stop.
    let text = std::fs::read_to_string(&metrics).unwrap();
    let clocks: Vec<u64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|r| r["clock"].as_u64().unwrap())
        .collect();
    assert!(!clocks.is_empty() && clocks.iter().all(|&c| c <= t), "{t}");
    assert!(run_dirs(&tmp).is_empty(), "{:?}", run_dirs(&tmp));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_metrics_write_that_fails_stops_an_in_memory_or_simulated_run_at_once() {
    // `/dev/full` takes the file and refuses every write, as a full disk does.
    if !Path::new("/dev/full").exists() {
        return;
    }
    let tmp = tempdir("exits", "metrics-full-mem");
    let asked = 10_000_000u64;
    for cmd in ["run", "sim"] {
        let summary = tmp.join(format!("{cmd}.json"));
        let out = Command::new(SFB)
            .args([
                cmd,
                "--peers",
                "4",
                "--clocks",
                &asked.to_string(),
                "--eval-every",
                "0",
                "--synthetic",
                "classes=4,features=16,samples=600",
                "--metrics",
                "/dev/full",
                "--summary",
                &summary.display().to_string(),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        let why = s["failed"].as_str().unwrap();
        assert!(
            why.contains("cannot write output.metrics /dev/full")
                && why.contains("No space left on device"),
            "{cmd}: {why}"
        );
        // A real summary of the clocks done: every replica's checksum, all alike (BSP).
        let t = s["clocks"].as_u64().unwrap();
        assert!(t > 0 && t < asked, "{cmd}: {s}");
        assert!(
            why.contains(&format!("stopped at clock {t}")),
            "{cmd}: {why}"
        );
        let sums = s["replica_checksums"].as_array().unwrap();
        assert_eq!(sums.len(), 4, "{cmd}: {s}");
        assert!(sums.iter().all(|c| c == &sums[0]), "{cmd}: {s}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
